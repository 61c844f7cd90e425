"""The coordinator's answers to its workers' requests: claim, records, tool, end; and a new
session's hand-over, made when its job is submitted.

A claim raises the session's lease epoch and hands over the conversation so far; transcript
records (a `records` request's, and the last ones an end carries) are appended and made
durable (through the runtime's group commit) before the reply;
squad-tool calls go through the one invocation pipeline; the end of a session wakes the route
that waits for it. Every request but a claim must carry the current epoch and come from the
worker whose claim holds the session, so a worker whose job moved on is refused. A new
session's job may carry its hand-over (`hand_ahead`: its opening durable, under epoch 1): the
worker that takes it starts without a claim, and its first request, once the group is found
to have given it the job, makes it the holder (`_take`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import structlog

from squadd.cluster import keys
from squadd.cluster.connection import ClusterError, RedisGuard
from squadd.cluster.jobs import JobQueue
from squadd.cluster.wire import Reply, Request
from squadd.contracts.events import NullSink
from squadd.contracts.messages import ToolCall, ToolMessage, Usage, message_record
from squadd.daemon import remote_worktrees
from squadd.daemon.claim_reply import ClaimReplies
from squadd.daemon.cluster_records import WorkerRecords, durable
from squadd.daemon.handover import recovered_results
from squadd.daemon.orphans import Orphans
from squadd.daemon.placement import (
    RemoteSession,
    claim_event,
    job_of,
    last_epoch,
    last_worker,
    marked_held,
    recorded_holder,
)
from squadd.errors import NotCached
from squadd.runtime.opening import SessionTools, accept, open_new
from squadd.runtime.runtime import SquadRuntime
from squadd.runtime.services import Found
from squadd.runtime.session import AgentSession, SessionOutcome
from squadd.runtime.session_info import SessionInfo, session_meta
from squadd.state.transcripts import (
    FileSink,
    Transcript,
    TranscriptSink,
    TranscriptWriter,
    read_transcript,
)
from squadd.tools.base import CancelSignal, ToolSet
from squadd.tools.invoke import CallOrigin
from squadd.workspaces.git import Git

log = structlog.get_logger("squadd.coordinator")

REDO_SAFE = ("claim", "records", "end")
"""Requests whose handling is idempotent (a tool call is not: it is never applied twice)."""
_ENDED = frozenset({"completed", "error"})
HANDED_EPOCH = 1
"""The lease epoch a job's hand-over gives (a new session's first)."""


class WorkerRequests:
    """Answers the requests of the workers running a coordinator's sessions."""

    def __init__(self, runtime: SquadRuntime, guard: RedisGuard, jobs: JobQueue,
                 remote: dict[str, RemoteSession], orphans: Orphans, git: Git,
                 on_claimed: Callable[[str], None]):
        self.runtime = runtime
        self.guard = guard
        self.jobs = jobs
        self._remote = remote
        """The sessions out on workers whose route waits here (shared with the coordinator)."""
        self._orphans = orphans
        self._git = git
        self.on_claimed = on_claimed
        """Told of each session a worker claimed."""
        self._epochs: dict[str, int] = {}
        self._applied: dict[str, tuple[int, int]] = {}
        """Per session, the (epoch, number) of the last transcript record appended."""
        self._locks: dict[str, anyio.Lock] = {}
        self._holders: dict[str, tuple[str, int]] = {}
        """Per session, the worker that claimed it and the epoch its claim got."""
        self._taken: dict[str, TranscriptWriter] = {}
        """Per session, a `_take`'s holder records, to be durable with the request's own."""
        self._replies = ClaimReplies(runtime.runner.services.sinks.prompts)
        self._worker_records = WorkerRecords(runtime, remote, self._applied, self._lock,
                                             self._transcript, self._session)

    async def handle(self, request: Request) -> Reply:
        handlers = {"claim": self._claim, "records": self._records, "tool": self._tool,
                    "end": self._end}
        try:
            return await handlers[request.kind](request)
        except ClusterError:
            raise
        except Exception as exc:
            log.exception("cluster request failed", kind=request.kind,
                          session_id=request.session_id)
            error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, OSError):  # a full disk, a failed sync: it may pass
                return Reply(request_id=request.request_id, ok=False, refused="failed",
                             error=error)
            if request.kind == "claim":  # it would fail again: the job is dropped
                self._fail_route(request.session_id, "the coordinator could not hand the "
                                 f"session over to worker {request.worker!r}: {error}")
            return Reply(request_id=request.request_id, ok=False, refused="invalid",
                         error=error)

    def _fail_route(self, session_id: str, error: str) -> None:
        """End with `error` the route waiting here for the session, now rather than at its
        bound (no worker will run it)."""
        remote = self._remote.get(session_id)
        if remote is not None and not remote.done.is_set():
            info = remote.plan.info
            remote.outcome = SessionOutcome(session_id=info.session_id, agent=info.agent,
                                            status="error", error=error, model=info.model)
            remote.done.set()

    def _lock(self, session_id: str) -> anyio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = anyio.Lock()
        return lock

    async def _epoch(self, session_id: str) -> int:
        known = self._epochs.get(session_id)
        if known is None:
            client = self.guard.client
            stored: Any = await self.guard.run(lambda: client.get(keys.epoch(session_id)))
            known = int(stored or 0)
            self._epochs[session_id] = known
        return known

    async def _stale(self, request: Request) -> Reply | None:
        """The refusal of a request that is not the holder's: a stale epoch, or a worker
        that is not the one whose claim holds the session now. None: it may go on."""
        sid = request.session_id
        current = await self._epoch(sid)
        if request.epoch != current:
            _refused(request, "stale epoch", current=current)
            return Reply(request_id=request.request_id, ok=False, refused="stale_epoch",
                         error=f"lease epoch {request.epoch} of session {sid} is "
                               f"stale (now {current}): the job was reclaimed by another "
                               "worker, so this worker's results are refused")
        holder = await self._holder(sid)
        if holder is None and current == 1:  # started from its job's hand-over
            refused = await self._take(request)
            if refused is not None:
                return refused
            holder = self._holders.get(sid)
        if holder != (request.worker, current):
            _refused(request, "not the holder", holder=holder)
            return Reply(request_id=request.request_id, ok=False, refused="invalid",
                         error=f"session {sid} is not held by worker {request.worker!r} under "
                               f"epoch {current}: only the worker whose claim holds it may "
                               "send its requests")
        return None

    async def _holder(self, session_id: str) -> tuple[str, int] | None:
        """The worker whose claim holds the session, and that claim's epoch (after a restart
        of this coordinator: as the claim recorded it in the transcript)."""
        known = self._holders.get(session_id)
        if known is None:
            remote = self._remote.get(session_id)
            if remote is not None and remote.unheld:
                return None
            known = await anyio.to_thread.run_sync(recorded_holder,
                                                    self.runtime.layout.transcript(session_id))
            if known is not None:
                self._holders[session_id] = known
        return known


    async def _cancelled(self, session_id: str) -> bool:
        """Whether the session was cancelled: this coordinator knows for the sessions it
        submitted (their cancel key is its own, cleared at submission); for a session whose
        route caller is gone, the key an earlier coordinator left was read once."""
        remote = self._remote.get(session_id)
        if remote is not None:
            return remote.cancelled
        orphan = await self._orphans.get(session_id)
        return orphan is not None and orphan.cancelled

    async def _session(self, session_id: str) -> tuple[SessionInfo, ToolSet] | None:
        remote = self._remote.get(session_id)
        if remote is not None:
            return remote.plan.info, remote.tools
        orphan = await self._orphans.get(session_id)
        return None if orphan is None else (orphan.info, orphan.tools)

    async def _claim(self, request: Request) -> Reply:
        sid = request.session_id
        refuse = functools.partial(Reply, request_id=request.request_id, ok=False)
        found = await self._session(sid)
        if found is None:
            return refuse(refused="unknown_session", error=f"no session {sid}")
        if await self._cancelled(sid):
            self._orphans.drop(sid)  # its job is dropped: no request of its follows
            return refuse(refused="invalid", error=f"session {sid} was cancelled")
        info, tools = found
        remote = self._remote.get(sid)
        submitted = frozenset(remote.nonces) if remote is not None else None
        entries = dict(remote.entries) if remote is not None else None
        if not await self.jobs.held_by(request.worker, sid, submitted, entries):
            _refused(request, "claim of a job the worker was not given")
            return refuse(refused="invalid",
                          error=f"worker {request.worker!r} holds no job of session {sid}: a "
                                "session is claimed only by the worker its job went to")
        client = self.guard.client
        async with self._lock(sid):
            transcript = await anyio.to_thread.run_sync(read_transcript,
                                                        self._transcript(sid))
            if transcript.last_state in _ENDED:
                self._orphans.drop(sid)
                return refuse(refused="invalid",
                              error=f"session {sid} has ended ({transcript.last_state})")
            # Before the conversation: a session in a worktree is told so by its prompt.
            workspace = await remote_worktrees.hand_out(self._git, self.runtime.layout,
                                                        self.runtime.settings, sid)
            worktree = workspace is not None
            epoch = int(await self.guard.run(lambda: client.incr(keys.epoch(sid))))
            floor = max(self._epochs.get(sid, 0), last_epoch(transcript.states))
            if epoch <= floor:
                # Redis lost the session's epoch (it restarted empty): epochs never go back,
                # or a late result of an earlier holder would pass as current.
                epoch = floor + 1
                await self.guard.run(lambda: client.set(keys.epoch(sid), epoch))
            self._epochs[sid] = epoch
            self._holders[sid] = (request.worker, epoch)
            previous = last_worker(transcript.states)
            self._applied[sid] = (epoch, 0)
            # From here the earlier holder's requests are stale: a call of its that has no
            # stored reply now is never applied, and one that has one gets its real result.
            recovered = await recovered_results(self.guard, transcript.messages, sid, epoch)
            host = str(request.body.get("host") or "")[:255]
            try:  # a new session whose prompt's files are cached: on the loop
                if recovered:
                    raise NotCached("recovered results are written and read back")
                messages, sink = self._hand_over_known(info, tools, request.worker, host,
                                                       epoch, transcript, worktree)
            except NotCached:
                messages, sink = await anyio.to_thread.run_sync(
                    self._hand_over, info, tools, request.worker, host, epoch, recovered,
                    transcript, worktree)
            with anyio.CancelScope(shield=True):
                await sink.commit()
        self._took(info, request.worker, host, epoch, previous)
        return Reply(request_id=request.request_id, ok=True, body={
            "epoch": epoch, "info": session_meta(info), "tools": tools.names,
            "workspace": workspace,
            **self._replies.specs(tools, request.body.get("specs_held")),
            "messages": self._replies.messages(messages, request.body.get("prompts_held")),
        })

    def _took(self, info: SessionInfo, worker: str, host: str, epoch: int,
              previous: str | None) -> None:
        """`worker` holds the session now (its claim's or first request's records are
        durable): the route's record names it, and the bus tells of it."""
        sid = info.session_id
        remote = self._remote.get(sid)
        record = remote.record if remote is not None else self.runtime.pool.get(sid)
        if remote is not None:
            remote.worker = worker
            if remote.record.state == "creating":
                self.runtime.pool.activate(remote.record)
        if record is not None:
            record.worker, record.worker_host = worker, host or None
        self.runtime.bus.publish(claim_event(sid, info.agent, worker, host, epoch, previous))
        self.on_claimed(sid)
        # Debug: at the console one line a route costs most of a claim; the event says it.
        log.debug("session claimed", session_id=sid, worker=worker, host=host, epoch=epoch,
                  previous_worker=previous)

    async def hand_ahead(self, session_id: str) -> dict[str, Any] | None:
        """A new session's hand-over for its job (`Job.handed`): its acceptance (unless made
        already) and opening (prompt, task, epoch 1, no worker yet) added to the route's sink
        and made durable in one commit, as a local session opens, and what a claim's reply
        would carry. None, with nothing added, for a session not new or in a worktree; None,
        its opening durable, when its prompt is not kept by digest (a claim continues it)."""
        remote = self._remote.get(session_id)
        if remote is None or remote.cancelled or remote.plan.continuing:
            return None
        if await remote_worktrees.worktree_of(self.runtime.layout, session_id) is not None:
            return None
        plan, tools, services = remote.plan, remote.tools, self.runtime.runner.services
        if not plan.sink.written:
            accept(plan)
        messages = await open_new(services, plan,
                                  SessionTools(services, plan, remote.record, found=tools),
                                  plan.task or plan.info.task)
        named = self._replies.named(tools, messages)
        if named is not None:
            # The epoch it hands, recorded (epochs never go back, even when Redis lost them);
            # its worker is recorded at that worker's first request.
            plan.sink.add("state", state="active", epoch=HANDED_EPOCH, handed=True)
        with anyio.CancelScope(shield=True):
            await plan.sink.commit()
        if named is None:
            return None
        remote.unheld = True
        self._epochs[session_id] = HANDED_EPOCH
        self._applied[session_id] = (HANDED_EPOCH, 0)
        return {"epoch": HANDED_EPOCH, "info": session_meta(plan.info), "tools": tools.names,
                "workspace": None, **named}

    async def _take(self, request: Request) -> Reply | None:
        """For `_stale`: the first request of a worker that started a session from its job's
        hand-over (no holder yet). The group must have given it the job, as for a claim; then
        it is the holder, recorded before what the request carries (in one commit with its
        records) and told of as a claim is. The refusal, or None."""
        sid = request.session_id
        async with self._lock(sid):
            if sid in self._holders:
                return None
            found = await self._session(sid)
            remote = self._remote.get(sid)
            submitted = frozenset(remote.nonces) if remote is not None else None
            entries = dict(remote.entries) if remote is not None else None
            if found is None or not (marked_held(remote, request)
                                     or await self.jobs.held_by(request.worker, sid,
                                                                submitted, entries)):
                _refused(request, "first request of a job the worker was not given")
                return Reply(request_id=request.request_id, ok=False, refused="invalid",
                             error=f"worker {request.worker!r} holds no job of session {sid}: "
                                   "a session is run only by the worker its job went to")
            info, tools = found
            host = str(request.body.get("host") or "")[:255]
            writer = TranscriptWriter(self._transcript(sid))
            _claimed_by(writer, tools, request.worker, host, request.epoch)
            if request.kind in ("records", "end") and request.body.get("records"):
                self._taken[sid] = writer  # durable with the records (`_apply`)
            else:
                await durable(self.runtime, writer)
            self._holders[sid] = (request.worker, request.epoch)
            self._took(info, request.worker, host, request.epoch, None)
        return None

    async def _apply(self, request: Request) -> None:
        """The request's records appended, after the holder's records of its `_take`."""
        first = self._taken.pop(request.session_id, None)
        try:
            await self._worker_records.apply(request, first)
        except BaseException:
            if first is not None:  # not durable: the request sent again takes it again
                self._holders.pop(request.session_id, None)
                self._unheld_no_more(request.session_id)  # (or durable: read to know)
            raise

    def _hand_over(self, info: SessionInfo, tools: ToolSet, worker: str, host: str,
                   epoch: int, recovered: list[ToolMessage], transcript: Transcript,
                   worktree: bool) -> tuple[list[Any], TranscriptSink]:
        """The conversation the claiming worker carries on (blocking), and the sink holding
        what the claim adds (a new session's prompt and task, then its owner and `active`),
        for the caller to make durable, in one group commit, before the worker hears of it.
        `transcript`: the session's as the claim read it; `worktree`: whether the worker
        runs it in a worktree."""
        runtime = self.runtime
        read: Transcript | None = transcript
        if recovered:  # durable at once: the conversation below reads them back
            writer = TranscriptWriter(runtime.layout.transcript(info.session_id))
            for message in recovered:
                writer.add("message", message=message_record(message), recovered=True,
                           result_type="failure" if message.is_error else "success")
            writer.flush()
            read = None
        session, sink = self._handed(info, tools, worktree)
        messages = session.conversation(read)
        _claimed_by(sink, tools, worker, host, epoch)
        return messages, sink

    def _hand_over_known(self, info: SessionInfo, tools: ToolSet, worker: str, host: str,
                         epoch: int, transcript: Transcript, worktree: bool,
                         ) -> tuple[list[Any], TranscriptSink]:
        """`_hand_over` of a session not started yet, without reading or writing a file (the
        event loop may call it); `NotCached` when one must be."""
        session, sink = self._handed(info, tools, worktree)
        messages = session.opening_known(transcript,
                                         self.runtime.runner.services.sinks.prompts.kept)
        _claimed_by(sink, tools, worker, host, epoch)
        return messages, sink

    def _transcript(self, session_id: str) -> Path:
        """A session's transcript: for a session this coordinator accepted, the path its
        acceptance checked (a local session's writer, too, checks its folder once, when the
        session starts); else found through the layout (a session an earlier coordinator
        accepted). A claim and an end each spared the walk of the path, an `lstat` a folder."""
        remote = self._remote.get(session_id)
        if remote is not None and isinstance(remote.plan.sink, FileSink):
            return remote.plan.sink.path
        return self.runtime.layout.transcript(session_id)

    def _handed(self, info: SessionInfo, tools: ToolSet,
                worktree: bool) -> tuple[AgentSession, TranscriptSink]:
        services = self.runtime.runner.services
        sink = services.sinks.existing(info.session_id, self._transcript(info.session_id))
        return AgentSession(info, services.session, sink=sink, events=NullSink(),
                            tools=Found(tools), worktree=worktree), sink

    async def _records(self, request: Request) -> Reply:
        stale = await self._stale(request)
        if stale is not None:
            return stale
        await self._apply(request)
        return Reply(request_id=request.request_id, ok=True,
                     cancelled=await self._cancelled(request.session_id))

    async def _tool(self, request: Request) -> Reply:
        stale = await self._stale(request)
        if stale is not None:
            return stale
        found = await self._session(request.session_id)
        if found is None:
            return Reply(request_id=request.request_id, ok=False, refused="unknown_session",
                         error=f"no session {request.session_id}")
        info, tools = found
        call = ToolCall.model_validate(request.body.get("call", {}))
        tool = tools.get(call.name)
        if tool is None or not tool.squad_tool:
            _refused(request, "not a squad tool", tool=call.name[:100])
            return Reply(request_id=request.request_id, ok=False, refused="invalid",
                         error=f"{call.name[:100]!r} is not a squad tool of session "
                               f"{info.session_id}: a worker runs every other tool itself, "
                               "and sends only squad-tool calls")
        tools = ToolSet([t for t in tools if t.squad_tool])
        origin = CallOrigin(session_id=info.session_id, agent=info.agent, depth=info.depth,
                            lineage=(*info.lineage, info.agent), cancel=CancelSignal())
        result = await self.runtime.invoker.invoke(tools, call, origin)
        return Reply(request_id=request.request_id, ok=True,
                     body={"result": result.model_dump(mode="json")},
                     cancelled=await self._cancelled(request.session_id))

    async def _end(self, request: Request) -> Reply:
        if await self._session(request.session_id) is None:
            return Reply(request_id=request.request_id, ok=False, refused="unknown_session",
                         error=f"no session {request.session_id}")
        stale = await self._stale(request)
        if stale is not None:
            return stale
        body = request.body
        # The session's last records ride with its end: durable before the route hears of it.
        if body.get("records"):
            await self._apply(request)
        remote = self._remote.get(request.session_id)
        if remote is not None and not remote.done.is_set():
            info = remote.plan.info
            remote.outcome = SessionOutcome(
                session_id=info.session_id, agent=info.agent,
                status=body.get("status", "error"), answer=str(body.get("answer") or ""),
                error=body.get("error"), turns=int(body.get("turns") or 0),
                usage=Usage(input_tokens=int(body.get("input_tokens") or 0),
                            output_tokens=int(body.get("output_tokens") or 0)),
                duration_s=float(body.get("duration_s") or 0.0), model=info.model)
            remote.done.set()
        self._forget(request.session_id)
        job = job_of(remote, body.get("job"))
        return Reply(request_id=request.request_id, ok=True, body={"acked": job is not None},
                     job_done=job)

    def _unheld_no_more(self, session_id: str) -> None:
        """A holder may be recorded now, and `_holders` does not know it: read it back."""
        remote = self._remote.get(session_id)
        if remote is not None:
            remote.unheld = False

    def _forget(self, session_id: str) -> None:
        """Drop what is kept here for a session that ended: a late request of its reads the
        epoch from Redis and the last record applied from the transcript again."""
        self._epochs.pop(session_id, None)
        self._applied.pop(session_id, None)
        self._orphans.drop(session_id)
        self._holders.pop(session_id, None)
        self._unheld_no_more(session_id)
        self._taken.pop(session_id, None)
        lock = self._locks.get(session_id)
        if lock is not None and not lock.locked() and not lock.statistics().tasks_waiting:
            del self._locks[session_id]


def _claimed_by(sink: TranscriptSink | TranscriptWriter, tools: ToolSet, worker: str,
                host: str, epoch: int) -> None:
    """A claim's records (or those of a handed job's first request): its owner (the worker,
    under its epoch) and `active`."""
    sink.add("meta", tools=tools.names, owner={"worker": worker, "epoch": epoch})
    sink.add("state", state="active", worker=worker, host=host, epoch=epoch)


def _refused(request: Request, why: str, **fields: Any) -> None:
    log.warning("cluster request refused", why=why, kind=request.kind,
                session_id=request.session_id[:200], worker=request.worker[:200],
                epoch=request.epoch, **fields)
