"""The worker process: heartbeat, slots, job intake, leases, reclaiming, and each job's run.

A worker takes a job only when one of its `--slots` is free: first a job another worker left
idle past `cluster.lease_s` (`XAUTOCLAIM`), then an urgent one, then a normal one. It claims
the session from the coordinator (getting a new lease epoch and the conversation so far), or
starts a new one from its job's hand-over when it holds the prompt and specs that names; runs
the agent loop with its own provider and its clone's tools, and acknowledges the job when the
coordinator has the end. While it runs a job it renews the job's lease; a job another worker
took over is stopped here without a further word. A session waiting on a child route gives its
slot back until the child is done.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import secrets
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import structlog

from squadd import telemetry
from squadd._version import __version__
from squadd.cluster import keys, workers
from squadd.cluster.connection import BLOCK_S, ClusterError, RedisGuard
from squadd.cluster.events import forward_events
from squadd.cluster.identity import SquadIdentity, published_identity
from squadd.cluster.jobs import Delivery, JobQueue
from squadd.cluster.requests import send
from squadd.cluster.wire import (
    PromptsSeen,
    Reply,
    Request,
    SpecsSeen,
    WorkerBeat,
    held_hand_over,
)
from squadd.config import Settings
from squadd.contracts.events import BaseEvent
from squadd.contracts.messages import parse_message
from squadd.providers.base import Provider
from squadd.runtime.events import EventBus
from squadd.runtime.planning import info_from_transcript
from squadd.runtime.prompt import file_cache
from squadd.runtime.services import Found, SessionServices
from squadd.runtime.session import AgentSession, SessionOutcome
from squadd.runtime.slots import PrioritySlots, SlotClass
from squadd.statcache import NotCached
from squadd.state.layout import SquadLayout
from squadd.state.skills import summary_cache
from squadd.state.transcripts import Transcript
from squadd.tools.base import CancelSignal, Tool, ToolSet
from squadd.tools.builtin import workspace_tools
from squadd.tools.discovery import ToolDiscoverer, discover_tools, known_tools
from squadd.tools.invoke import ToolInvoker
from squadd.worker.session import (
    EndEvents,
    ForwardingSink,
    Running,
    SquadToolProxy,
    StaleLease,
    checked,
)
from squadd.worker.workspace import checkpoints, close_worktree, open_worktree, push
from squadd.workspaces.git import Git

log = structlog.get_logger("squadd.worker")
SHORT_BLOCK_S = 0.1


class Worker:
    """One `squadd worker`: `await worker.run()` until cancelled."""

    def __init__(self, *, name: str, slots: int, layout: SquadLayout, settings: Settings,
                 provider: Provider, guard: RedisGuard, identity: SquadIdentity | None = None):
        self.name = name
        self.identity = identity
        """The squad this worker's clone holds (None: not checked)."""
        self._identity_ok = True
        self._identity_checked_until = 0.0
        self.layout = layout
        self.settings = settings
        self.cluster = settings.cluster
        self.provider = provider
        self.guard = guard
        self.jobs = JobQueue(guard)
        self.slots = PrioritySlots(slots)
        self.bus = EventBus(buffer=settings.daemon.event_buffer)
        self.invoker = ToolInvoker(layout, settings, self.bus)
        self.services = SessionServices(layout, settings, provider, self.invoker,
                                        files=file_cache(layout), summaries=summary_cache())
        """What its sessions work with (no budgets here: the coordinator counts the calls)."""
        self._discoverer = ToolDiscoverer()
        self._git = Git(settings.workspace.git_timeout_s)
        self._builtins: list[Tool[Any]] = list(workspace_tools(settings))
        self._running: dict[str, Running] = {}
        self._started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.stopping = anyio.Event()
        """Set when the worker stops: waits on the coordinator end at once."""
        self._squad_names: set[str] = set()
        self._host = socket.gethostname()
        self._specs = SpecsSeen()
        self._prompts = PromptsSeen()
        self._lent = 0
        """Sessions that gave their slot back while a child route runs."""
        self._reading = 0
        """Slots the job reader holds while it waits for a job (not work: not busy)."""
        self.finished = 0
        """Jobs this worker ran to their end (acknowledged)."""

    @property
    def jobs_running(self) -> int:
        """How many jobs this worker runs now (left pending in Redis if it stops)."""
        return len(self._running)

    # The loops.
    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
                  ) -> None:
        self.bus.bind()
        await self.jobs.ensure()
        await self._beat()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._heartbeat)
            tg.start_soon(self._forward_events)
            tg.start_soon(self._keep_leases)
            task_status.started()
            log.info("worker ready", worker=self.name, slots=self.slots.total,
                     clone=str(self.layout.repo))
            next_reclaim = 0.0
            while True:
                ticket = self.slots.enqueue(SlotClass.NORMAL)
                await self.slots.wait(ticket)
                self._reading = 1  # this slot waits for a job: free, as others see it
                try:
                    deliveries: list[Delivery] = []
                    now = anyio.current_time()
                    if now >= next_reclaim:  # stale jobs are looked for every heartbeat
                        next_reclaim = now + min(self.cluster.lease_s / 4,
                                                 self.cluster.heartbeat_s)
                        reclaimed = await self._reclaim(tg)
                        deliveries = [reclaimed] if reclaimed is not None else []
                    if not deliveries:
                        if not await self._same_squad():
                            self._give_back_reading()
                            await anyio.sleep(self.cluster.heartbeat_s)
                            continue
                        # A second free slot: one read takes from both streams at once (unless
                        # a session waits for its slot back from a child route).
                        if not self._lent and self.slots.try_acquire():
                            self._reading = 2
                        # A session waiting on a child route wants its slot back soon after
                        # the child ends: hold this one only briefly while no job comes.
                        deliveries = await self.jobs.take_some(
                            self.name, room=self._reading,
                            block_s=SHORT_BLOCK_S if self._lent else BLOCK_S)
                except Exception as exc:  # Redis away past its bound, or a refusal: keep trying
                    self._give_back_reading()
                    log.error("no job taken; trying again", error=f"{type(exc).__name__}: {exc}")
                    await anyio.sleep(self.cluster.heartbeat_s)
                    continue
                except BaseException:
                    self._give_back_reading()
                    raise
                for delivery in deliveries:  # each on a slot the reading held
                    self._reading -= 1
                    tg.start_soon(self._run_job, delivery)
                self._give_back_reading()

    def _give_back_reading(self) -> None:
        """The slots held to wait for a job that did not come given back."""
        for _ in range(self._reading):
            self.slots.release()
        self._reading = 0

    async def _reclaim(self, tg: anyio.abc.TaskGroup) -> Delivery | None:
        """Take over every stale job this worker has free slots for, in one scan: the first
        runs on the slot the caller holds, the others on slots taken here; those not needed
        are given back."""
        extra = 0
        while self.slots.try_acquire():
            extra += 1
        found: list[Delivery] = []
        try:
            found = await self.jobs.reclaim(self.name, lease_s=self.cluster.lease_s,
                                            count=1 + extra)
        finally:
            for _ in range(extra - max(0, len(found) - 1)):
                self.slots.release()
        if found:
            log.info("stale jobs reclaimed", count=len(found),
                     sessions=[d.job.session_id for d in found])
        for delivery in found[1:]:
            tg.start_soon(self._run_job, delivery)
        return found[0] if found else None

    async def _same_squad(self) -> bool:
        """Whether the coordinator on this Redis serves the squad this worker's clone holds
        (checked every heartbeat; jobs of another squad are never taken)."""
        if self.identity is None:
            return True
        now = anyio.current_time()
        if now < self._identity_checked_until:
            return self._identity_ok
        self._identity_checked_until = now + self.cluster.heartbeat_s
        published = await published_identity(self.guard)
        why = None if published is None else published.differs(self.identity)
        ok = why is None
        if ok != self._identity_ok or (not ok and published is not None):
            if ok:
                log.info("the coordinator's squad matches this clone again")
            else:
                assert published is not None
                log.error("the coordinator serves another squad: no job taken",
                          reason=why, coordinator=published.named(), clone=self.identity.named())
        self._identity_ok = ok
        return ok

    async def _beat(self) -> None:
        await workers.beat(self.guard, WorkerBeat(
            name=self.name, host=socket.gethostname(), pid=os.getpid(), version=__version__,
            slots=self.slots.total, busy=self.slots.in_use - self._reading,
            started=self._started),
            every_s=self.cluster.heartbeat_s)

    async def _heartbeat(self) -> None:
        while True:
            await anyio.sleep(self.cluster.heartbeat_s)
            try:
                await self._beat()
            except Exception as exc:  # Redis away past its bound, or a refusal: next beat
                log.warning("heartbeat not sent", error=f"{type(exc).__name__}: {exc}")

    async def _forward_events(self) -> None:
        def skip(event: BaseEvent) -> bool:
            # A forwarded squad-tool call is announced by the coordinator's own pipeline.
            return getattr(event, "tool", None) in self._squad_names

        with self.bus.subscribe() as subscription:
            await forward_events(self.guard, self.name, subscription, skip=skip,
                                 maxlen=self.cluster.events_maxlen,
                                 retry_s=self.cluster.heartbeat_s)

    async def _keep_leases(self) -> None:
        while True:
            await anyio.sleep(max(0.05, self.cluster.lease_s / 3))
            held = [r for r in self._running.values() if not r.unleased]
            if not held:
                continue
            try:
                taken, gone = await self.jobs.keep(self.name, [r.delivery for r in held])
                moved_on = [d for d in gone if await self._moved_on(d)]
            except Exception as exc:  # Redis away past its bound, or a refusal: next round
                log.warning("leases not renewed", error=f"{type(exc).__name__}: {exc}")
                continue
            for delivery in (*taken, *moved_on):
                running = self._running.get(delivery.entry_id)
                if running is not None and not running.acking:
                    log.warning("job taken over by another worker; stopping it",
                                session_id=delivery.job.session_id)
                    running.lost = True
                    running.scope.cancel()
            for delivery in gone:
                running = self._running.get(delivery.entry_id)
                if running is not None and not running.lost and not running.acking:
                    # Redis lost the job (it restarted without its data, or was flushed): the
                    # session carries on, its epoch still fences it, but no lease is left.
                    log.warning("job lost from Redis; the session carries on without a lease",
                                session_id=delivery.job.session_id)
                    running.unleased = True

    async def _moved_on(self, delivery: Delivery) -> bool:
        """Whether another worker claimed the session of a job nobody holds (it reclaimed the
        job, and has finished it): the session's epoch is past this worker's."""
        running = self._running.get(delivery.entry_id)
        if running is None:
            return False
        client = self.guard.client
        sid = delivery.job.session_id
        stored: Any = await self.guard.run(lambda: client.get(keys.epoch(sid)))
        return int(stored or 0) > running.epoch

    # One job.
    async def _run_job(self, delivery: Delivery) -> None:
        running = Running(delivery)
        self._running[delivery.entry_id] = running
        sid = delivery.job.session_id
        try:
            with running.scope, telemetry.continued(delivery.job.traceparent):
                outcome = await self._claim_and_run(running)
                if outcome is not None:
                    await self._end(running, {
                        "status": outcome.status, "answer": outcome.answer,
                        "error": outcome.error, "turns": outcome.turns,
                        "input_tokens": outcome.usage.input_tokens,
                        "output_tokens": outcome.usage.output_tokens,
                        "duration_s": outcome.duration_s})
                await self._ack(running)
                self.finished += 1
            if running.scope.cancelled_caught and not running.lost:
                # The coordinator cancelled the session (its transcript says interrupted): the
                # job is done with; only a job another worker took over is left alone.
                await self._ack(running)
        except StaleLease as exc:
            log.warning("session given up: its lease moved on", session_id=sid, error=str(exc))
        except ClusterError as exc:
            # The job stays pending: after the lease another worker (or this one) resumes it.
            log.error("session stopped: the cluster did not answer or store it; its job "
                      "stays pending", session_id=sid, error=str(exc))
        except Exception as exc:  # a fault in this job must not stop the worker's other jobs
            log.exception("session failed on this worker", session_id=sid)
            await self._give_up(running, f"worker {self.name} failed to run the session: "
                                         f"{type(exc).__name__}: {exc}")
        finally:
            self._running.pop(delivery.entry_id, None)
            self.slots.release()

    async def _ack(self, running: Running) -> None:
        """Acknowledge the job: it is done with, here and for every other worker (unless the
        coordinator did with its reply to the end)."""
        running.acking = True
        if running.acked:
            return
        delivery = running.delivery
        await self.jobs.ack(delivery.stream, delivery.entry_id)

    async def _give_up(self, running: Running, error: str) -> None:
        """End the session with `error` (its route learns it now, not after its bound) and
        drop its job; one whose end is refused stays pending and moves on after the lease."""
        delivery = running.delivery
        try:
            await self._end(running, {"status": "error", "error": error})
            await self._ack(running)
        except Exception as exc:  # the job stays pending: after the lease it moves on
            log.error("failed session not ended", session_id=delivery.job.session_id,
                      error=f"{type(exc).__name__}: {exc}")

    async def _end(self, running: Running, body: dict[str, Any]) -> None:
        """Report the session's end, carrying the records its last flush left pending (one
        request, not two); its end event goes out once the coordinator has them."""
        records = running.sink.ending() if running.sink is not None else []
        delivery = running.delivery
        # The coordinator may acknowledge the job with its reply (one transaction, and no
        # round trip of this worker's own): from here the lease keeper finding the job gone
        # is its end, not a loss.
        running.acking = True
        reply = await self._request(running, "end", "end", {
            **body, "records": records,
            "job": {"stream": delivery.stream, "entry": delivery.entry_id}})
        if not reply.ok and (records or reply.refused == "failed"):
            # As a refused records request: the job stays pending, and its route waits for
            # the worker that takes it next rather than for its bound.
            raise ClusterError(f"the coordinator did not store the session's end: "
                               f"{reply.error}")
        running.acked = reply.ok and reply.body.get("acked") is True
        if running.sink is not None and running.events is not None:
            running.sink.ended(len(records))
            running.events.release()

    async def _request(self, running: Running, kind: str, suffix: str,
                       body: dict[str, Any]) -> Reply:
        delivery = running.delivery
        job = delivery.job
        held = None
        if running.handed:
            body = {**body, "host": self._host}
            # No holder yet until a request of this run is answered: each goes out marked by
            # Redis (`ADD_HELD`) with the job's nonce, so the coordinator need not ask who
            # holds the job.
            if not running.held:
                held = (delivery.stream, delivery.entry_id)
                body["nonce"] = job.nonce
        request = Request(request_id=f"{job.session_id}:{running.epoch}:{suffix}", kind=kind,
                          session_id=job.session_id, worker=self.name, epoch=running.epoch,
                          body=body)
        attempts = self.cluster.request_attempts
        if kind == "tool":  # a child route may run as long as a route may
            attempts = max(attempts, int(2 * job.timeout_s / self.cluster.request_timeout_s) + 2)
        reply = checked(await send(self.guard, request, timeout_s=self.cluster.request_timeout_s,
                                   attempts=attempts, sent=running.sent, held=held))
        running.held = running.held or reply.ok
        return reply

    async def _claim_and_run(self, running: Running) -> SessionOutcome | None:
        delivery = running.delivery
        job = delivery.job
        handed = None if delivery.reclaimed else held_hand_over(
            delivery.job.handed, self._specs, self._prompts)
        if handed is not None:  # no claim: the job carries what its reply would
            body, filled = handed
            running.handed = True
        else:
            # A new id for each claim: a worker started again under the same name that
            # reclaims its own job must get the conversation as it is now, not a stored
            # earlier answer.
            claim_id = f"claim-{delivery.entry_id}-{self.name}-{secrets.token_hex(6)}"
            reply = await self._request(running, "claim", claim_id,
                                        {"reclaimed": delivery.reclaimed,
                                         "host": self._host,
                                         "specs_held": self._specs.held,
                                         "prompts_held": self._prompts.held})
            if reply.refused == "failed":  # the job stays pending: it moves on after its lease
                raise ClusterError(f"the coordinator failed to hand the session over: "
                                   f"{reply.error}")
            if not reply.ok:  # ended, cancelled or unknown: nothing to run
                log.info("job dropped", session_id=job.session_id, reason=reply.error)
                return None
            body = reply.body
            filled = self._prompts.filled(body.get("messages", []))
        running.epoch = int(body["epoch"])
        # Before anything is made for the session: a reply that cannot be run leaves nothing.
        messages = [parse_message(m) for m in filled]
        transcript = Transcript(session_id=job.session_id, meta=dict(body.get("info") or {}))
        info = info_from_transcript(transcript)
        cancel = CancelSignal()
        outer = running.scope

        def on_cancel() -> None:
            cancel.set()
            outer.cancel()

        def forward(kind: str, suffix: str, payload: dict[str, Any]) -> Any:
            return self._request(running, kind, suffix, payload)

        tools = await self._tools(body, forward, on_cancel)
        space = body.get("workspace")
        tree = None
        if isinstance(space, dict) and space.get("start_ref"):
            tree = await open_worktree(
                self._git, self.layout, session_id=job.session_id, agent=info.agent,
                epoch=running.epoch, start_ref=str(space["start_ref"]),
                author_email=str(space.get("author_email") or "{agent}@squad.local"))
        running.sink = ForwardingSink(forward, on_cancel, self.stopping)
        running.events = EndEvents(self.bus, running.sink)
        session = AgentSession(info, self.services, sink=running.sink,
                               events=running.events, tools=Found(tools),
                               workspace_dir=tree.path if tree is not None else None)
        # Debug: one line a job costs more than its requests; its events say it started.
        log.debug("session running", session_id=job.session_id, agent=info.agent,
                 epoch=running.epoch, reclaimed=delivery.reclaimed,
                 worktree=str(tree.path) if tree is not None else None)
        if tree is None:
            return await session.run_from(messages, cancel=cancel, timeout_s=job.timeout_s)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(checkpoints, self._git, tree,
                                                every_s=max(1.0, self.cluster.lease_s / 2)))
                outcome = await session.run_from(messages, cancel=cancel,
                                                 timeout_s=job.timeout_s)
                tg.cancel_scope.cancel()
            # The work goes to the coordinator's repository before the end is reported.
            with anyio.CancelScope(shield=True):
                await push(self._git, tree, message=f"work of session {job.session_id}")
            return outcome
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(30):
                await close_worktree(self._git, tree)

    async def _tools(self, body: dict[str, Any], forward: Any, on_cancel: Any) -> ToolSet:
        proxies: list[Tool[Any]] = [
            SquadToolProxy(spec, forward, on_cancel, around=self._slot_back)
            for spec in self._specs.claimed(body)]
        self._squad_names.update(p.name for p in proxies)
        names = [*(p.name for p in proxies), *(t.name for t in self._builtins)]
        try:  # on the loop when every tool file is loaded and unchanged
            custom = known_tools(self.layout, self.settings, self._discoverer, self.bus,
                                 builtin_names=names).toolset()
        except NotCached:
            custom = await anyio.to_thread.run_sync(lambda: discover_tools(
                self.layout, self.settings, self.bus, builtin_names=names,
                discoverer=self._discoverer).toolset())
        tools = ToolSet([*proxies, *self._builtins]).merged(custom)
        allowed = [str(n) for n in body.get("tools", [])]
        return tools.narrowed(allowed, rule="the coordinator allows this session only "
                                            + (", ".join(allowed) or "no tools"))

    @asynccontextmanager
    async def _slot_back(self, tool_name: str) -> AsyncIterator[None]:
        """While a forwarded `squad_route` runs, its session's slot serves other jobs."""
        if tool_name != "squad_route":
            yield
            return
        self.slots.release()
        self._lent += 1
        try:
            yield
        finally:
            self._lent -= 1
            ticket = self.slots.enqueue(SlotClass.RETURNING)
            with anyio.CancelScope(shield=True):
                await self.slots.wait(ticket)

