"""The job streams: the cluster's admission queue, held in Redis.

The coordinator adds one entry per session to run (urgent or normal stream); workers read them
in the `workers` consumer group, only as many as they have free slots, urgent first. A job
stays pending in the group until its worker acknowledges it at the end; a worker keeps its
pending jobs fresh, and one whose jobs go stale past the lease (it died, or is cut off) loses
them to `XAUTOCLAIM` by another worker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import ValidationError
from redis.commands.core import AsyncScript
from redis.exceptions import ResponseError

from squadd.cluster import keys
from squadd.cluster.connection import BLOCK_S, RedisGuard
from squadd.cluster.wire import Job

log = structlog.get_logger("squadd.cluster")

HELD_SCAN = 4096
"""Most pending jobs of one worker looked through when its claim is checked (its slots)."""

FIRST_WAITING = """\
local taken = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1,
                         'STREAMS', KEYS[1], '>')
if taken then return taken end
return redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1, 'STREAMS', KEYS[2], '>')
"""
"""The first job waiting for a worker with room for one, urgent first, in one round trip:
`KEYS` the urgent and the normal stream, `ARGV` the group and the consumer. (One read of both
streams could give two jobs; a script may not block, so a worker that finds none then waits
on the normal stream.)"""


@dataclass(frozen=True)
class Delivery:
    """A job as one worker got it: the stream and entry id it must acknowledge."""

    stream: str
    entry_id: str
    job: Job
    reclaimed: bool = False


async def ensure_group(guard: RedisGuard, stream: str, group: str) -> None:
    """Create `group` on `stream` (and the stream) unless it exists; it reads from the start."""
    async def create() -> None:
        try:
            await guard.client.xgroup_create(stream, group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
    await guard.run(create)


class JobQueue:
    """Both job streams, from the coordinator's side (`submit`) and a worker's (the rest)."""

    def __init__(self, guard: RedisGuard):
        self.guard = guard
        self._first_waiting: AsyncScript = guard.client.register_script(FIRST_WAITING)

    async def ensure(self) -> None:
        for stream in keys.JOB_STREAMS:
            await ensure_group(self.guard, stream, keys.WORKERS_GROUP)

    @staticmethod
    def stream_of(job: Job) -> str:
        return keys.JOBS_URGENT if job.priority == "urgent" else keys.JOBS_NORMAL

    async def submit(self, job: Job, *, uncancel: bool = False) -> str:
        """Add `job` to its stream; its entry id. In the same round trip, first: `uncancel`
        deletes the session's cancel mark (a cancel of an earlier run of it is over); a job
        `handed` over sets the session's lease epoch to the one it hands (a new session has
        none yet)."""
        stream = self.stream_of(job)
        client = self.guard.client

        async def add() -> Any:
            async with client.pipeline(transaction=False) as pipe:
                if uncancel:
                    pipe.delete(keys.cancel(job.session_id))
                if job.handed is not None:
                    pipe.set(keys.epoch(job.session_id), int(job.handed["epoch"]))
                pipe.xadd(stream, {"data": job.dump()})
                return (await pipe.execute())[-1]
        return str(await self.guard.run(add))

    async def take(self, consumer: str, *, block_s: float = BLOCK_S) -> Delivery | None:
        """One new job for `consumer`: an urgent one if any waits, else a normal one (waiting
        up to `block_s` for it). None when none came."""
        found = await self.take_some(consumer, room=1, block_s=block_s)
        return found[0] if found else None

    async def take_some(self, consumer: str, *, room: int,
                        block_s: float = BLOCK_S) -> list[Delivery]:
        """New jobs for `consumer`, at most `room` of them, urgent first, waiting up to
        `block_s` for one. With room for one: an urgent one if any waits, else a normal one
        (one script reads the urgent stream, then the normal one; when neither had one, a
        blocking read of the normal stream waits). With room for two or more: one read of both
        streams, which gives at most one of each (one round trip where there were two)."""
        client = self.guard.client
        block = max(1, int(block_s * 1000))
        if room >= 2:
            both = await self._grouped(lambda: client.xreadgroup(
                keys.WORKERS_GROUP, consumer, {keys.JOBS_URGENT: ">", keys.JOBS_NORMAL: ">"},
                count=1, block=block))
            entries = sorted(_entries(both), key=lambda e: e[0] != keys.JOBS_URGENT)
        else:
            entries = await self._waiting_first(consumer)
            if not entries:
                normal = await self._grouped(lambda: client.xreadgroup(
                    keys.WORKERS_GROUP, consumer, {keys.JOBS_NORMAL: ">"}, count=1,
                    block=block))
                entries = _entries(normal)[:1]
        found = [await self._valid(entry) for entry in entries]
        return [delivery for delivery in found if delivery is not None]

    async def _waiting_first(self, consumer: str) -> list[_Entry]:
        """Without waiting: the first job of either stream, urgent first, in one round trip
        (`FIRST_WAITING`); where Redis refuses scripts, an urgent one only (the caller's
        blocking read of the normal stream comes next)."""
        client, guard = self.guard.client, self.guard
        if guard.scripts is not False:
            try:
                found = await self._grouped(lambda: self._first_waiting(
                    keys=list(keys.JOB_STREAMS), args=[keys.WORKERS_GROUP, consumer],
                    client=client))
                guard.scripts = True
                return _script_entries(found)[:1]
            except ResponseError as exc:
                if not guard.scripts_refused(exc):  # this time only (another script is busy)
                    log.warning("the job streams' script failed; read one at a time",
                                error=str(exc)[:300])
        urgent = await self._grouped(lambda: client.xreadgroup(
            keys.WORKERS_GROUP, consumer, {keys.JOBS_URGENT: ">"}, count=1))
        return _entries(urgent)[:1]

    async def reclaim(self, consumer: str, *, lease_s: float,
                      count: int = 1) -> list[Delivery]:
        """Up to `count` jobs other workers left idle past `lease_s`, now `consumer`'s, urgent
        first: one scan takes as many as the caller has slots for, so a dead worker's jobs
        come back together, not one a scan."""
        client = self.guard.client
        found: list[Delivery] = []
        for stream in keys.JOB_STREAMS:
            cursor = "0-0"
            while len(found) < count:
                result: Any = await self._grouped(lambda s=stream, c=cursor: client.xautoclaim(  # type: ignore[misc]
                    s, keys.WORKERS_GROUP, consumer, int(lease_s * 1000), c,
                    count=count - len(found)))
                if not result:
                    break
                for entry_id, fields in result[1]:
                    delivery = await self._valid((stream, str(entry_id), fields, True))
                    if delivery is not None:
                        found.append(delivery)
                cursor = str(result[0])
                if cursor == "0-0":
                    break
        return found

    async def sessions_queued(self) -> set[str]:
        """The sessions that have a job in either stream (waiting, or held by a worker)."""
        client = self.guard.client
        sessions: set[str] = set()
        for stream in keys.JOB_STREAMS:
            entries: Any = await self.guard.run(lambda s=stream: client.xrange(s, "-", "+"))  # type: ignore[misc]
            for _, fields in entries or []:
                try:
                    sessions.add(Job.model_validate_json((fields or {})["data"]).session_id)
                except (KeyError, ValidationError):
                    continue
        return sessions

    async def backlog(self, *, now_ms: int) -> dict[str, Any]:
        """What `squadd status` shows of the queue: per stream the jobs not yet taken, those
        taken and not finished, and the age of the oldest one not taken; per worker the jobs
        it holds."""
        client = self.guard.client
        streams: dict[str, dict[str, Any]] = {}
        per_worker: dict[str, int] = {}
        for stream in keys.JOB_STREAMS:
            try:
                groups: Any = await self.guard.run(lambda s=stream: client.xinfo_groups(s))  # type: ignore[misc]
            except ResponseError:
                continue
            group = next((g for g in groups or [] if g.get("name") == keys.WORKERS_GROUP), None)
            if group is None:
                continue
            last = str(group.get("last-delivered-id") or "0-0")
            oldest: Any = await self.guard.run(lambda s=stream, f=last: client.xrange(  # type: ignore[misc]
                s, f"({f}", "+", count=1))
            age = None
            if oldest:
                age = max(0.0, (now_ms - int(str(oldest[0][0]).split("-")[0])) / 1000)
            summary: Any = await self.guard.run(lambda s=stream: client.xpending(  # type: ignore[misc]
                s, keys.WORKERS_GROUP))
            for consumer in (summary or {}).get("consumers") or []:
                name = str(consumer.get("name"))
                per_worker[name] = per_worker.get(name, 0) + int(consumer.get("pending") or 0)
            streams[stream.rsplit(":", 1)[-1]] = {
                "queued": int(group.get("lag") or 0), "pending": int(group.get("pending") or 0),
                "oldest_unclaimed_s": None if age is None else round(age, 1)}
        return {"streams": streams, "pending_per_worker": per_worker}

    async def held_by(self, consumer: str, session_id: str,
                      nonces: frozenset[str] | None = None,
                      entries: Mapping[str, str] | None = None) -> bool:
        """Whether `consumer` holds (has pending in the group) the job of `session_id`: the
        coordinator's test of a claim, so no one claims a session whose job it was not given.
        `nonces`: the marks of the jobs the coordinator submitted for it, where it knows them
        (a job someone else added to the stream then counts for nothing). `entries`: the
        stream entries of those jobs (entry id to stream), looked at first."""
        if not consumer:  # no name: XPENDING would list every consumer's jobs
            return False
        client = self.guard.client
        for entry_id, stream in (entries or {}).items():
            # The jobs the coordinator added itself, each looked up by its id: one round trip,
            # not a scan of everything the worker holds.
            holder: Any = await self._grouped(lambda s=stream, e=entry_id: client.xpending_range(  # type: ignore[misc]
                s, keys.WORKERS_GROUP, min=e, max=e, count=1))
            if holder and str(holder[0].get("consumer")) == consumer:
                return True
        for stream in keys.JOB_STREAMS:
            pending: Any = await self._grouped(lambda s=stream: client.xpending_range(  # type: ignore[misc]
                s, keys.WORKERS_GROUP, min="-", max="+", count=HELD_SCAN,
                consumername=consumer))
            for entry in pending or []:
                if str(entry.get("consumer")) != consumer:
                    continue
                entry_id = str(entry.get("message_id"))
                found: Any = await self.guard.run(lambda s=stream, e=entry_id: client.xrange(  # type: ignore[misc]
                    s, min=e, max=e, count=1))
                for _, fields in found or []:
                    try:
                        job = Job.model_validate_json((fields or {})["data"])
                        if job.session_id == session_id and (nonces is None or
                                                             job.nonce in nonces):
                            return True
                    except (KeyError, ValidationError):
                        continue
        return False

    async def _grouped(self, read: Callable[[], Awaitable[Any]]) -> Any:
        """`read()` of the job streams in the workers' group; None when Redis has lost the
        group (it restarted without its data, or was flushed), which is made again."""
        try:
            return await self.guard.run(read)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            log.warning("the job streams' group is gone from Redis; making it again",
                        error=str(exc))
            await self.ensure()
            return None

    async def _valid(self, entry: _Entry | None) -> Delivery | None:
        """The delivery of `entry`; an entry with no job in it (deleted meanwhile, or not a
        job at all) is acknowledged and dropped, so no worker takes it again."""
        if entry is None:
            return None
        stream, entry_id, fields, reclaimed = entry
        try:
            return Delivery(stream, entry_id, Job.model_validate_json((fields or {})["data"]),
                            reclaimed=reclaimed)
        except (KeyError, ValidationError) as exc:
            if fields:
                log.warning("malformed job dropped", stream=stream, entry=entry_id,
                            error=str(exc)[:300])
            await self.ack(stream, entry_id)
            return None

    async def keep(self, consumer: str, deliveries: list[Delivery],
                   ) -> tuple[list[Delivery], list[Delivery]]:
        """Renew the lease of `consumer`'s jobs. Returns those another worker holds now (it
        reclaimed them: this one must stop them), and those nobody holds (acknowledged by a
        worker that reclaimed and finished them, or lost with Redis's data: the caller tells
        which). A job is renewed only while this consumer owns it, so a worker that wakes
        from a pause never takes one back."""
        client = self.guard.client
        taken: list[Delivery] = []
        gone: list[Delivery] = []
        mine: list[Delivery] = []

        async def look() -> list[Any]:  # every job's holder, in one round trip
            async with client.pipeline(transaction=False) as pipe:
                for d in deliveries:
                    pipe.xpending_range(d.stream, keys.WORKERS_GROUP, min=d.entry_id,
                                        max=d.entry_id, count=1)
                return list(await pipe.execute())

        holders = await self._grouped(look) or [None] * len(deliveries)
        for delivery, pending in zip(deliveries, holders, strict=True):
            if not pending:
                gone.append(delivery)
            elif str(pending[0].get("consumer")) != consumer:
                taken.append(delivery)
            else:
                mine.append(delivery)

        async def renew() -> None:  # and every one still this worker's renewed, in another
            async with client.pipeline(transaction=False) as pipe:
                for d in mine:
                    pipe.xclaim(d.stream, keys.WORKERS_GROUP, consumer, 0, [d.entry_id],
                                justid=True)
                await pipe.execute()
        if mine:
            await self.guard.run(renew)
        return taken, gone

    async def ack(self, stream: str, entry_id: str) -> None:
        client = self.guard.client

        async def done() -> None:
            async with client.pipeline(transaction=True) as pipe:
                pipe.xack(stream, keys.WORKERS_GROUP, entry_id)
                pipe.xdel(stream, entry_id)
                await pipe.execute()
        await self.guard.run(done)

    async def lags(self) -> dict[str, dict[str, int]]:
        """Per job stream: entries not yet delivered (`lag`) and delivered but unacknowledged
        (`pending`). A stream Redis does not hold (yet, or any more) is left out."""
        client = self.guard.client
        report: dict[str, dict[str, int]] = {}
        for stream in keys.JOB_STREAMS:
            try:
                groups: Any = await self.guard.run(lambda s=stream: client.xinfo_groups(s))  # type: ignore[misc]
            except ResponseError:  # no such key, or not a stream
                continue
            for group in groups or []:
                if group.get("name") == keys.WORKERS_GROUP:
                    report[stream] = {"lag": int(group.get("lag") or 0),
                                      "pending": int(group.get("pending") or 0)}
        return report


_Entry = tuple[str, str, dict[str, str] | None, bool]
"""A job stream entry as read: stream, entry id, fields, and whether it was reclaimed."""


def _script_entries(result: Any) -> list[_Entry]:
    """The entries a script's `XREADGROUP` read, as `_entries` gives them: Redis answers a
    script with the command's plain reply, each entry's fields a flat list of names and values."""
    return [(str(stream), str(entry_id),
             dict(zip(fields[::2], fields[1::2], strict=True)) if fields else None, False)
            for stream, entries in result or [] for entry_id, fields in entries]


def _entries(result: Any) -> list[_Entry]:
    """The entries an `XREADGROUP` read, as (stream, entry id, fields, not reclaimed)."""
    return [(str(stream), str(entry_id), fields, False)
            for stream, entries in result or [] for entry_id, fields in entries]
