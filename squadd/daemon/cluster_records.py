"""A worker's transcript records on the coordinator: each appended once (numbered under the
lease epoch it was sent under, so a repeated or redone request adds none twice), made durable
through the runtime's group commit before the reply, and the model calls among them charged
to the spending ledger as a local session's are.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio

from squadd.cluster.wire import Request
from squadd.contracts.messages import Usage
from squadd.daemon.placement import RemoteSession
from squadd.runtime.runtime import SquadRuntime
from squadd.runtime.session_info import SessionInfo
from squadd.state.transcripts import TranscriptWriter, read_transcript
from squadd.tools.base import ToolSet


class WorkerRecords:
    """Applies the `records` (and an end's records) of the workers' requests."""

    def __init__(self, runtime: SquadRuntime, remote: Mapping[str, RemoteSession],
                 applied: dict[str, tuple[int, int]], lock: Callable[[str], anyio.Lock],
                 transcript: Callable[[str], Path],
                 session: Callable[[str], Awaitable[tuple[SessionInfo, ToolSet] | None]]):
        self.runtime = runtime
        self._remote = remote
        self._applied = applied
        """Per session, the (epoch, number) of the last record appended (shared with the
        request handler, which starts and forgets it)."""
        self._lock = lock
        self._transcript = transcript
        self._session = session

    async def apply(self, request: Request, first: TranscriptWriter | None = None) -> None:
        """Append the request's transcript records not appended yet (each is numbered under
        its epoch: a repeated request, or one redone after a crash, adds none twice), after
        those `first` holds, all made durable before this returns, and charge the model
        calls among them."""
        sid, epoch = request.session_id, request.epoch
        records = [r for r in request.body.get("records", []) if isinstance(r, dict)]
        async with self._lock(sid):
            last = self._applied.get(sid)
            if last is None:
                last = await anyio.to_thread.run_sync(self._last_applied, sid)
            fresh = [r for r in records if (epoch, int(r.get("n", 0))) > last]
            calls = [r for r in fresh if r.get("kind") == "message" and "input_tokens" in r]
            found = await self._session(sid) if calls else None
            if found is not None:
                self._priced(found[0], calls)
            if fresh or first is not None:
                await durable(self.runtime, self._appended(sid, epoch, fresh, first))
            if fresh:
                self._applied[sid] = (epoch, max(int(r.get("n", 0)) for r in fresh))
        remote = self._remote.get(sid)
        if remote is not None:
            self.runtime.pool.touch(
                remote.record, input_tokens=sum(int(r.get("input_tokens", 0)) for r in calls),
                output_tokens=sum(int(r.get("output_tokens", 0)) for r in calls))
        if found is not None:
            self._charge(found[0], sid, epoch, calls)

    def _priced(self, info: SessionInfo, calls: list[dict[str, Any]]) -> None:
        """Each call's `cost_usd` at this coordinator's prices, as a local session's message
        record has it (a worker prices nothing), before the records are appended: the ledger
        rebuilt at a start reads the cost there."""
        spending = self.runtime.spending
        for record in calls:
            if record.get("cost_usd") is None:
                record["cost_usd"] = spending.cost(str(record.get("model") or info.model),
                                                   _usage(record))

    def _charge(self, info: SessionInfo, session_id: str, epoch: int,
                calls: list[dict[str, Any]]) -> None:
        """A worker's model calls into this coordinator's spending ledger, as a local
        session's are (their cost is shown, and counted against the day's and route's), each
        under its message's id, as a local call is: the ledger rebuilt at a start finds the
        call in the transcript by that id, and so does not count it a second time."""
        spending = self.runtime.spending
        root = spending.root_for(info)
        for record in calls:
            message = record.get("message")
            named = message.get("id") if isinstance(message, dict) else None
            spending.charge(info, root, str(record.get("model") or info.model), _usage(record),
                            named if isinstance(named, str) and named
                            else f"{session_id}:{epoch}:{int(record.get('n', 0))}")

    def _last_applied(self, session_id: str) -> tuple[int, int]:
        transcript = read_transcript(self.runtime.layout.transcript(session_id))
        marks = [tuple(r["cluster"]) for r in transcript.records
                 if isinstance(r.get("cluster"), list) and len(r["cluster"]) == 2]
        return max((int(m[0]), int(m[1])) for m in marks) if marks else (0, 0)

    def _appended(self, session_id: str, epoch: int, records: list[dict[str, Any]],
                  writer: TranscriptWriter | None = None) -> TranscriptWriter:
        """A writer (`writer`, else a new one) holding a worker's `records` as well, each
        marked with its (epoch, number)."""
        writer = writer or TranscriptWriter(self._transcript(session_id))
        for record in records:
            fields = {k: v for k, v in record.items() if k not in ("kind", "n", "ts")}
            writer.add(str(record.get("kind", "note")), **fields,
                       cluster=[epoch, int(record.get("n", 0))])
        return writer


def _usage(record: Mapping[str, Any]) -> Usage:
    """A worker's message record's token counts."""
    return Usage(input_tokens=int(record.get("input_tokens") or 0),
                 output_tokens=int(record.get("output_tokens") or 0),
                 cache_read_tokens=int(record.get("cache_read_tokens") or 0),
                 cache_write_tokens=int(record.get("cache_write_tokens") or 0))


async def durable(runtime: SquadRuntime, writer: TranscriptWriter) -> None:
    """`writer`'s records appended and made durable in the runtime's group commit: one sync
    for the records of every session that commits meanwhile, as a local session's are, not
    one fsync per request."""
    with anyio.CancelScope(shield=True):
        await runtime.commits.commit(writer)
