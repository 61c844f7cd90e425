"""The request channel between workers and the coordinator.

A worker adds its request to the `requests` stream and waits on the request's reply box, for
at most `cluster.request_timeout_s` at a time; no reply yet, it sends the same request again
(`cluster.request_attempts` times in all). The coordinator reads the stream in its consumer
group and answers each request id once: the reply is stored, and a repeated request gets the
stored reply back (a request the worker marks as sent for the first time, read new, has none to
look up). Before a request that has an effect (a squad-tool call) is applied, its id
is written to the `applying` hash; one found there after a coordinator crash, with no stored
reply, is answered "interrupted, effect unknown" and never applied a second time.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog
from pydantic import ValidationError
from redis.exceptions import ResponseError

from squadd.cluster import keys
from squadd.cluster.connection import BLOCK_S, ClusterError, RedisGuard
from squadd.cluster.jobs import ensure_group
from squadd.cluster.wire import Reply, Request

log = structlog.get_logger("squadd.cluster")

Handler = Callable[[Request], Awaitable[Reply]]
MIN_CONCURRENCY = 64
"""Requests answered at once when the cluster's sessions need no more (`RequestServer.fit`)."""
HEADROOM = 16
"""Places beyond one per session, for a stale worker's requests and the odd repeat."""
SENT_IDS_KEPT = 4096
"""Request ids a worker remembers having sent for one running session (`SentIds`): a repeat
follows its first send within the session's life."""
ADD_HELD = """\
local fields = {'data', ARGV[1]}
local pending = redis.pcall('XPENDING', KEYS[2], ARGV[2], ARGV[3], ARGV[3], 1)
if type(pending) == 'table' and not pending.err and pending[1]
    and pending[1][2] == ARGV[4] then
  fields[3], fields[4] = 'held', KEYS[2] .. ' ' .. ARGV[3]
end
return redis.call('XADD', KEYS[1], '*', unpack(fields))
"""
"""A worker's request added to `KEYS[1]` (the requests stream), marked `held` when its job
(entry `ARGV[3]` of stream `KEYS[2]`) is pending in group `ARGV[2]` for consumer `ARGV[4]`
at that moment: the coordinator then need not ask Redis who holds it. `ARGV[1]`: the request.
A job stream or group Redis has lost leaves it unmarked (the coordinator asks, as for a worker
that does not mark), never unsent. Sent whole (`EVAL`), so a Redis that lost its script cache
runs it all the same."""
INTERRUPTED = ("interrupted, effect unknown: the coordinator stopped while it applied this "
               "call; check before repeating it")


class SentIds:
    """The request ids a worker has sent for one running session, the last `SENT_IDS_KEPT` of
    them: a request whose id is not among them goes out marked `first` (its ids name the
    session's lease epoch, which no other run of the session continues)."""

    def __init__(self, kept: int = SENT_IDS_KEPT):
        self.kept = kept
        self._ids: OrderedDict[str, None] = OrderedDict()

    def first(self, request_id: str) -> bool:
        """Whether `request_id` was not sent before; from now on it was."""
        if request_id in self._ids:
            return False
        self._ids[request_id] = None
        if len(self._ids) > self.kept:
            self._ids.popitem(last=False)
        return True


async def send(guard: RedisGuard, request: Request, *, timeout_s: float,
               attempts: int, sent: SentIds | None = None,
               held: tuple[str, str] | None = None) -> Reply:
    """Send `request` and wait for its reply, sending it again after each `timeout_s` without
    one; `ClusterError` after `attempts` sends (or when Redis stays away). Its first send is
    marked `first` when `sent` says this process never sent its id; every later one, and
    every send without `sent`, is not. `held`: the job (stream, entry id) the worker runs the
    session for; each send is then added by `ADD_HELD`, which marks it when Redis has the job
    pending for the worker (unmarked where Redis refuses scripts: `RedisGuard.scripts`)."""
    client = guard.client
    box = keys.reply_box(request.request_id)
    first = sent is not None and sent.first(request.request_id)
    dumped: dict[bool, str] = {}

    def dump(marked: bool) -> str:
        if marked not in dumped:
            dumped[marked] = (request if request.first == marked else
                              request.model_copy(update={"first": marked})).dump()
        return dumped[marked]

    def add_held(target: Any, data: str, job: tuple[str, str]) -> Any:
        return target.eval(ADD_HELD, 2, keys.REQUESTS, job[0], data,
                           keys.WORKERS_GROUP, job[1], request.worker)

    async def add_alone(data: str, job: tuple[str, str]) -> None:
        # The first script this process runs on this Redis goes alone: one that Redis refuses
        # is then added plainly, with no wait for a reply to a request never added.
        try:
            await add_held(client, data, job)
            guard.scripts = True
        except ResponseError as exc:
            if not guard.scripts_refused(exc):
                raise
            await client.xadd(keys.REQUESTS, {"data": data})

    async def pipelined(data: str, job: tuple[str, str] | None) -> Any:
        async with client.pipeline(transaction=False) as pipe:
            if job is None:
                pipe.xadd(keys.REQUESTS, {"data": data})
            else:
                add_held(pipe, data, job)
            pipe.blpop([box], timeout=BLOCK_S)
            return (await pipe.execute())[1]

    async def add_and_wait() -> Any:
        # One round trip: the request added, then the wait for its reply begins at once.
        # Added again (a timeout, or the guard's retry after a lost connection) it is a repeat.
        nonlocal first
        data, first = dump(first), False
        job = held if guard.scripts is not False else None
        if job is not None and guard.scripts is None:
            await add_alone(data, job)
            return await client.blpop([box], timeout=BLOCK_S)
        try:
            return await pipelined(data, job)
        except ResponseError as exc:  # scripts refused since: this one was never added
            if job is None or not guard.scripts_refused(exc):
                raise
            return await pipelined(data, None)

    for _ in range(attempts):
        with anyio.move_on_after(timeout_s):
            popped: Any = await guard.run(add_and_wait)
            while True:
                if popped:
                    return await _whole(guard, Reply.model_validate_json(popped[1]), box)
                stored: Any = await guard.run(lambda: client.get(keys.reply(request.request_id)))
                if stored:
                    return await _whole(guard, Reply.model_validate_json(stored), box)
                popped = await guard.run(lambda: client.blpop([box], timeout=BLOCK_S))
    raise ClusterError(
        f"the coordinator did not answer request {request.request_id} ({request.kind}) after "
        f"{attempts} tries {timeout_s:g}s apart (cluster.request_attempts, "
        "cluster.request_timeout_s): is 'squadd serve --cluster' running?")


async def _whole(guard: RedisGuard, reply: Reply, box: str) -> Reply:
    """`reply`, or, for a stored copy without its conversation (`Reply.boxed`), the whole
    reply the same transaction left in the box."""
    if not reply.boxed:
        return reply
    whole: Any = await guard.run(lambda: guard.client.lpop(box))
    if whole:
        return await _whole(guard, Reply.model_validate_json(whole), box)
    raise ClusterError(f"the coordinator's answer to {reply.request_id} is gone from its "
                       "reply box (it expired, or was taken and lost): the job's lease moves "
                       "it on to a new claim")


class RequestServer:
    """The coordinator's side: reads requests in its group, answers each id exactly once."""

    def __init__(self, guard: RedisGuard, handler: Handler, *, reply_ttl_s: int,
                 redo_safe: Collection[str], concurrency: int = MIN_CONCURRENCY):
        self.guard = guard
        self.handler = handler
        self.reply_ttl_s = reply_ttl_s
        self.redo_safe = frozenset(redo_safe)
        """Request kinds whose handler is idempotent: safe to run again after a crash."""
        self._floor = concurrency
        self._limit = anyio.CapacityLimiter(concurrency)
        self._in_hand: set[str] = set()
        self.handled = 0
        self._answers: list[_Answer] = []
        """Answers waiting for the next transaction (at most one per request in hand)."""
        self._answering = anyio.Event()

    @property
    def concurrency(self) -> int:
        """How many requests are answered at once, at most."""
        return int(self._limit.total_tokens)

    def fit(self, sessions: int) -> None:
        """Make room for one request of each of `sessions` sessions at once (never below the
        floor given at construction). A squad_route that waits holds its request until the
        session it started ends, and that session's own requests need room too: with fewer
        places than sessions that can wait, the waiting ones would starve the rest for good."""
        self._limit.total_tokens = max(self._floor, sessions + HEADROOM)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
                  ) -> None:
        """Serve until cancelled: first the requests this consumer held when it last stopped,
        then new ones."""
        await ensure_group(self.guard, keys.REQUESTS, keys.COORDINATOR_GROUP)
        task_status.started()
        client = self.guard.client
        backlog, cursor = True, "0"  # our own pending entries first: a restart resumes there
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._write_answers)
            while True:
                if backlog:
                    result: Any = await self.guard.run(lambda c=cursor: client.xreadgroup(  # type: ignore[misc]
                        keys.COORDINATOR_GROUP, keys.COORDINATOR_CONSUMER, {keys.REQUESTS: c},
                        count=64))
                else:
                    result = await self.guard.run(lambda: client.xreadgroup(
                        keys.COORDINATOR_GROUP, keys.COORDINATOR_CONSUMER, {keys.REQUESTS: ">"},
                        count=64, block=int(BLOCK_S * 1000)))
                entries = [entry for _, batch in result or [] for entry in batch]
                if backlog:
                    if not entries:
                        backlog = False
                        continue
                    cursor = str(entries[-1][0])
                parsed = [(str(entry_id), _parsed(str(entry_id), fields))
                          for entry_id, fields in entries]
                # Read new, a request sent for the first time has no stored reply to find.
                unsent: dict[str, str | None] = {} if backlog else {
                    r.request_id: None for _, r in parsed
                    if r is not None and r.first and r.kind in self.redo_safe}
                stored = await self._stored([request for _, request in parsed
                                             if request is not None
                                             and request.request_id not in unsent])
                stored.update(unsent)
                for entry_id, request in parsed:
                    place = object()  # taken here, given back by the task that answers
                    await self._limit.acquire_on_behalf_of(place)
                    tg.start_soon(self._serve_one, place, entry_id, request, stored)

    async def _stored(self, requests: list[Request]) -> dict[str, str | None]:
        """The stored replies of a batch's redo-safe requests, in one round trip (a request
        that is not redo-safe looks its own up, right before it is applied)."""
        ids = list({r.request_id: None for r in requests if r.kind in self.redo_safe})
        if not ids:
            return {}
        client = self.guard.client
        found: Any = await self.guard.run(lambda: client.mget([keys.reply(i) for i in ids]))
        return dict(zip(ids, found or [None] * len(ids), strict=True))

    async def _serve_one(self, place: object, entry_id: str, request: Request | None,
                         stored: dict[str, str | None]) -> None:
        try:
            await self._answer(entry_id, request, stored)
        except ClusterError:
            raise
        except Exception:
            log.exception("request not answered", entry=entry_id)
        finally:
            self._limit.release_on_behalf_of(place)

    async def _answer(self, entry_id: str, request: Request | None,
                      prefetched: dict[str, str | None]) -> None:
        client = self.guard.client
        if request is None:
            await self._finish(entry_id)
            return
        rid = request.request_id
        stored: Any
        if rid in prefetched:
            stored = prefetched[rid]
        else:
            stored = await self.guard.run(lambda: client.get(keys.reply(rid)))
        if stored:
            await self._finish(entry_id, rid, stored)
            return
        if rid in self._in_hand:  # a repeat while the first is still being applied
            await self._finish(entry_id)
            return
        self._in_hand.add(rid)
        try:
            unsafe = request.kind not in self.redo_safe
            if unsafe:
                was_applying: Any = await self.guard.run(
                    lambda: client.hsetnx(keys.APPLYING, rid, entry_id))
                if not was_applying:
                    reply = Reply(request_id=rid, ok=False, refused="interrupted",
                                  error=INTERRUPTED)
                    await self._finish(entry_id, rid, reply.dump(), store=True)
                    return
            reply = await self.handler(request)
            await self._finish(entry_id, rid, reply.dump(), store=True, applied=unsafe,
                               stored=reply.stored(), job_done=reply.job_done)
            self.handled += 1
        finally:
            self._in_hand.discard(rid)

    async def _finish(self, entry_id: str, rid: str | None = None, data: str | None = None,
                      *, store: bool = False, applied: bool = False,
                      stored: str | None = None,
                      job_done: tuple[str, str] | None = None) -> None:
        """In one transaction: the reply `data` pushed to its box (and stored under `rid`
        when new, as `stored` when given: `Reply.stored`), the write-ahead mark of an
        `applied` call cleared, the entry acknowledged, and the job `job_done` (stream,
        entry id) acknowledged for its worker. The answers ready while a transaction is on
        its way go together in the next one."""
        answer = _Answer(entry_id, rid, data, store, applied, stored, job_done)
        self._answers.append(answer)
        self._answering.set()
        await answer.done.wait()
        if answer.error is not None:
            raise answer.error

    async def _write_answers(self) -> None:
        """Write the waiting answers, each batch in one transaction, until cancelled."""
        while True:
            await self._answering.wait()
            self._answering = anyio.Event()
            batch, self._answers = self._answers, []
            try:
                await self.guard.run(functools.partial(self._transaction, batch))
            except Exception as exc:  # each answer's request fails as its own write would
                for answer in batch:
                    answer.error = exc
            except BaseException:
                for answer in batch:
                    answer.error = ClusterError("the request server stopped")
                raise
            finally:
                for answer in batch:
                    answer.done.set()

    async def _transaction(self, batch: list[_Answer]) -> None:
        client = self.guard.client
        async with client.pipeline(transaction=True) as pipe:
            for answer in batch:
                rid, data = answer.rid, answer.data
                if rid is not None and data is not None:
                    if answer.store:
                        pipe.set(keys.reply(rid), answer.stored or data, ex=self.reply_ttl_s)
                    pipe.rpush(keys.reply_box(rid), data)
                    pipe.expire(keys.reply_box(rid), self.reply_ttl_s)
                if rid is not None and answer.applied:
                    pipe.hdel(keys.APPLYING, rid)
                if answer.job_done is not None:  # as `JobQueue.ack` would
                    stream, job_entry = answer.job_done
                    pipe.xack(stream, keys.WORKERS_GROUP, job_entry)
                    pipe.xdel(stream, job_entry)
                pipe.xack(keys.REQUESTS, keys.COORDINATOR_GROUP, answer.entry_id)
                pipe.xdel(keys.REQUESTS, answer.entry_id)
            await pipe.execute()

@dataclass(eq=False)
class _Answer:
    """One request's answer, waiting for the transaction that writes it."""

    entry_id: str
    rid: str | None
    data: str | None
    store: bool
    applied: bool
    stored: str | None = None
    """What is stored, when not `data` itself (a claim's reply without its conversation)."""
    job_done: tuple[str, str] | None = None
    """A job acknowledged in the same transaction (an end's)."""
    done: anyio.Event = field(default_factory=anyio.Event)
    error: BaseException | None = None


def _parsed(entry_id: str, fields: dict[str, str] | None) -> Request | None:
    """The request in a stream entry; None (logged) when the entry holds none."""
    try:
        return Request.model_validate_json((fields or {}).get("data", "")).marked_held(
            (fields or {}).get("held"))
    except ValidationError as exc:
        log.warning("malformed cluster request dropped", entry=entry_id, error=str(exc)[:300])
        return None
