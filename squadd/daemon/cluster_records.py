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
            # A call's counts are checked before anything is appended: bad ones refuse the
            # request whole, as often as it comes.
            calls = [(r, _usage(r)) for r in fresh
                     if r.get("kind") == "message" and "input_tokens" in r]
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
                remote.record, input_tokens=sum(usage.input_tokens for _, usage in calls),
                output_tokens=sum(usage.output_tokens for _, usage in calls))
        if found is not None:
            self._charge(found[0], sid, epoch, calls)

    def _priced(self, info: SessionInfo, calls: list[tuple[dict[str, Any], Usage]]) -> None:
        """Each call's `cost_usd` at this coordinator's prices, as a local session's message
        record has it, before the records are appended: the ledger rebuilt at a start reads
        the cost there. A worker prices nothing; whatever one sent is replaced, so that the
        transcript says what the ledger charged."""
        spending = self.runtime.spending
        for record, usage in calls:
            record["cost_usd"] = spending.cost(_model(record, info), usage)

    def _charge(self, info: SessionInfo, session_id: str, epoch: int,
                calls: list[tuple[dict[str, Any], Usage]]) -> None:
        """A worker's model calls into this coordinator's spending ledger, as a local
        session's are (their cost is shown, and counted against the day's and route's), each
        under its message's id, as a local call is: the ledger rebuilt at a start finds the
        call in the transcript by that id, and so does not count it a second time."""
        spending = self.runtime.spending
        root = spending.root_for(info)
        for record, usage in calls:
            message = record.get("message")
            named = message.get("id") if isinstance(message, dict) else None
            spending.charge(info, root, _model(record, info), usage,
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


_TOKEN_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _usage(record: Mapping[str, Any]) -> Usage:
    """A worker's message record's token counts; `ValueError` naming the field when one is
    not a count (a negative one would take spending off the ledger)."""
    counts: dict[str, int] = {}
    for name in _TOKEN_COUNTS:
        value = record.get(name) or 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"a model call's {name} is {value!r:.40}, not a count of tokens")
        counts[name] = value
    return Usage(**counts)


def _model(record: Mapping[str, Any], info: SessionInfo) -> str:
    """The model a worker's call was priced and charged for: the record's, else the
    session's."""
    return str(record.get("model") or info.model)


async def durable(runtime: SquadRuntime, writer: TranscriptWriter) -> None:
    """`writer`'s records appended and made durable in the runtime's group commit: one sync
    for the records of every session that commits meanwhile, as a local session's are, not
    one fsync per request."""
    with anyio.CancelScope(shield=True):
        await runtime.commits.commit(writer)
