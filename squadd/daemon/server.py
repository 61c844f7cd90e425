"""`squadd serve`'s lifecycle: the repo's daemon lock, the pid, socket and token files, the
listeners, the runtime and the Scribe worker in one task group, and the graceful stop.

SIGTERM, SIGINT or `POST /v1/shutdown`: admission stops, running turns get `daemon.grace_s`,
the rest are marked `interrupted` in their transcripts, then the listeners close and the socket,
pid and token files are removed. A second signal stops at once. Files a killed daemon left
behind are found (the lock is free) and cleaned at the next start.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import secrets
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import structlog
import uvicorn
from starlette.types import ASGIApp

from squadd import telemetry
from squadd.config import Settings
from squadd.contracts.events import DaemonStarted, DaemonStopping
from squadd.daemon._unix import SocketAddress
from squadd.daemon.app import BearerAuth, DaemonContext, create_app
from squadd.daemon.dashboard import UI_PREFIX, Dashboard
from squadd.daemon.dashboard_access import UiPortOnly
from squadd.daemon.deadline import StopDeadline
from squadd.daemon.listener_limits import ListenerLimits, ensure_descriptors, limited
from squadd.daemon.live_settings import LiveSettings
from squadd.daemon.notify import HookRelay, Notifier
from squadd.daemon.recovery import (
    past_views,
    recover_sessions,
    sweep_empty_entries,
    sweep_stale_temp_files,
)
from squadd.daemon.startup import (
    bind_tcp,
    bind_unix,
    clear_stale,
    parse_tcp,
    take_daemon_lock,
)
from squadd.fsio import atomic_write, private_dir
from squadd.gc_tuning import tune_for_serving
from squadd.logs import configure_logging
from squadd.loop_watch import LoopWatch
from squadd.procs import stop_orphans
from squadd.runtime.runtime import SquadRuntime
from squadd.runtime.tracing import start_tracing
from squadd.sandbox import cgroup
from squadd.scribe.worker import run_scribe_worker
from squadd.serving import run_serving
from squadd.state.layout import SquadLayout
from squadd.tools.secrets import SecretRegistry

if TYPE_CHECKING:
    from squadd.daemon.coordinator import Coordinator

log = structlog.get_logger("squadd.daemon")

HTTP_DRAIN_S = 5.0
"""After the runtime stopped, how long open requests get to send their answers."""
STARTUP_TIMEOUT_S = 15.0
SECOND_SIGNAL_S = 5.0
"""After a second signal, how long the stop's last steps (those that need the disk) get before
the daemon exits without them (see `StopDeadline`)."""


class _Server(uvicorn.Server):
    """uvicorn, minus its signal handlers (the daemon handles signals for all listeners), and
    with an event set once it listens."""

    def __init__(self, config: uvicorn.Config):
        super().__init__(config)
        self.ready = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass
class Listener:
    kind: str
    sock: socket.socket
    where: str


class Daemon:
    """One repo's daemon. `run()` blocks until it has stopped and cleaned up."""

    def __init__(self, layout: SquadLayout, settings: Settings, *, tcp: str | None = None,
                 allow_remote: bool = False, console_level: str = "info",
                 overrides: Mapping[str, Mapping[str, Any]] | None = None):
        self.layout = layout
        self.settings = settings
        self.overrides = overrides
        """The command line's settings, kept over the files when they are read again."""
        self.tcp = parse_tcp(tcp, allow_remote=allow_remote) if tcp else None
        self.console_level = console_level
        self.coordinator: Coordinator | None = None
        self._marked: list[str] = []
        """Sessions found unfinished at start and marked interrupted."""
        """Set in cluster mode: the coordinator of `squadd worker`s (`[cluster] url`)."""
        self.deadline = StopDeadline()
        """Armed when the stop starts, disarmed when `run` is done (or the process exits): a
        stop held up by a disk that does not answer ends the process anyway."""

    def run(self, *, until_exit: bool = False) -> None:
        """Serve until stopped. With `until_exit` (the process ends when this returns: `squadd
        serve`) the stop's deadline stays armed until the interpreter's last step, so that a
        worker thread stuck in a call to a disk that does not answer (one a cancelled call
        gave up on) cannot hold the exit, which waits for every such thread, for good."""
        layout, settings = self.layout, self.settings
        for folder in layout.private_dirs():  # made 0700, also those an older squadd made
            if folder == layout.run_dir or folder.is_dir():
                private_dir(folder)
        lock_fd = take_daemon_lock(layout)
        listeners: list[Listener] = []
        address: SocketAddress | None = None
        served = False
        try:
            known_secrets = SecretRegistry()  # the runtime's, redacted from every log line
            configure_logging(redact=known_secrets.redact_log_event,
                              console_level=self.console_level,
                              json_file=layout.log_file, file_level=settings.daemon.log_level,
                              max_bytes=settings.daemon.log_max_bytes,
                              backups=settings.daemon.log_backups)
            start_tracing(settings.telemetry, redact=known_secrets.redact)
            stale = clear_stale(layout)
            if stale:
                log.warning("removed files a daemon that did not stop cleanly left behind",
                            files=stale)
            runtime = SquadRuntime.from_settings(layout, settings, secrets=known_secrets)
            if settings.cluster.url:
                from squadd.daemon.cluster_mode import coordinate

                self.coordinator = coordinate(runtime, settings)
            atomic_write(layout.pid_file, f"{os.getpid()}\n")
            token = None
            if self.tcp is not None:
                token = secrets.token_urlsafe(32)
                atomic_write(layout.token_file, token + "\n", mode=0o600)
            address = SocketAddress(layout.socket)
            listeners.append(Listener("unix", bind_unix(address), str(layout.socket)))
            if self.tcp is not None:
                host, port = self.tcp
                sock = bind_tcp(host, port)
                bound = sock.getsockname()
                listeners.append(Listener("tcp", sock, f"{host}:{bound[1]}"))
            dashboard = None
            if settings.daemon.ui:
                sock = bind_tcp("127.0.0.1", settings.daemon.ui_port)
                port = sock.getsockname()[1]
                listeners.append(Listener("ui", sock, f"127.0.0.1:{port}"))
                dashboard = Dashboard(token=secrets.token_urlsafe(32),
                                      url=f"http://127.0.0.1:{port}{UI_PREFIX}/")
            served = True
            run_serving(self._main, runtime, listeners, token, dashboard)
        finally:
            telemetry.shutdown()  # what is left is exported (bounded by its timeout)
            for listener in listeners:
                listener.sock.close()
            clear_stale(layout)
            if address is not None:
                address.close()
            os.close(lock_fd)
            if served:
                log.info("squadd stopped", pid=os.getpid())
            if until_exit:  # exit handlers run once the interpreter has joined its threads
                self.deadline.waiting_for("the process's exit, which waits for every thread "
                                          "still running (the stop itself has ended)")
                atexit.register(self.deadline.disarm)
            else:
                self.deadline.disarm()

    async def _main(self, runtime: SquadRuntime, listeners: list[Listener],
                    token: str | None, dashboard: Dashboard | None) -> None:
        stop = anyio.Event()
        reasons: list[str] = []

        def request_stop(reason: str) -> None:
            if not stop.is_set():
                reasons.append(reason)
                stop.set()

        async with anyio.create_task_group() as outer:
            outer.start_soon(self._watch_signals, request_stop, outer.cancel_scope,
                             self.deadline)
            recovered = await anyio.to_thread.run_sync(functools.partial(
                recover_sessions, self.layout, keep=self.settings.pool.ended_keep,
                cluster=self.coordinator is not None))
            for view in recovered.views:
                runtime.pool.remember(view)
            orphans = await anyio.to_thread.run_sync(stop_orphans)
            if orphans:
                log.warning("stopped commands a killed squadd left running", pids=orphans)
            caged = await anyio.to_thread.run_sync(cgroup.remove_stale)
            if caged:
                log.warning("stopped commands a killed squadd left in its sandbox cgroups",
                            processes=caged)
            swept = await anyio.to_thread.run_sync(sweep_stale_temp_files, self.layout)
            if swept:
                log.info("removed temp files a crash left mid-write", files=len(swept))
            self._marked = recovered.marked
            if recovered.marked:
                log.warning("sessions were running when squadd last stopped; marked "
                            "interrupted (resume one with 'squadd sessions resume ID')",
                            sessions=recovered.marked)
            if recovered.running_elsewhere:
                log.info("sessions another squadd process is running were left alone",
                         sessions=recovered.running_elsewhere)
            async with runtime:
                outer.start_soon(self._remember_past, runtime, recovered.ended)
                outer.start_soon(self._sweep_empty_entries)
                live = LiveSettings(self.layout, runtime, runtime.bus, overrides=self.overrides)
                context = DaemonContext(runtime=runtime, request_stop=request_stop,
                                        coordinator=self.coordinator, live_settings=live)
                try:
                    await self._serve(context, listeners, token, dashboard, stop, reasons)
                finally:  # a stop, an error or a cancellation: the end is bounded all the same
                    self._arm_deadline("the daemon's end")
            outer.cancel_scope.cancel()

    async def _remember_past(self, runtime: SquadRuntime, ended: list[Path]) -> None:
        """List the sessions that ended under earlier daemons (`status --all`), read in the
        background: a long history must not hold up the start."""
        try:
            views = await anyio.to_thread.run_sync(past_views, ended)
        except Exception:  # a listing, not the daemon's work: the daemon serves on
            log.exception("past sessions not listed")
            return
        runtime.pool.remember_past(views)

    async def _sweep_empty_entries(self) -> None:
        """Remove the orchestration-log entries a kill left empty, in the background: a stat
        per entry of a long log must not hold up the start."""
        try:
            swept = await anyio.to_thread.run_sync(sweep_empty_entries, self.layout)
        except Exception:  # tidying, not the daemon's work: the daemon serves on
            log.exception("empty orchestration-log entries not swept")
            return
        if swept:
            log.info("removed orchestration-log entries a kill left empty",
                     files=[path.name for path in swept])

    async def _serve(self, context: DaemonContext, listeners: list[Listener],
                     token: str | None, dashboard: Dashboard | None, stop: anyio.Event,
                     reasons: list[str]) -> None:
        runtime = context.runtime
        app = create_app(context, dashboard)
        servers: list[_Server] = []
        daemon = self.settings.daemon
        ensure_descriptors([daemon.max_connections] * len(listeners))
        async with anyio.create_task_group() as group:
            for listener in listeners:
                served: ASGIApp = app
                if listener.kind == "tcp":
                    served = BearerAuth(app, token or "")
                elif listener.kind == "ui":  # the dashboard's own guard checks its token
                    served = UiPortOnly(app, UI_PREFIX)
                limits = ListenerLimits(listener.kind, daemon.max_connections,
                                        daemon.header_timeout_s, daemon.keep_alive_s)
                served, protocol = limited(served, limits)
                server = _Server(uvicorn.Config(
                    served, lifespan="off", log_config=None, access_log=False,
                    timeout_graceful_shutdown=int(HTTP_DRAIN_S), server_header=False,
                    http=protocol, timeout_keep_alive=daemon.keep_alive_s))
                servers.append(server)
                group.start_soon(server.serve, [listener.sock])
            with anyio.fail_after(STARTUP_TIMEOUT_S):
                for server in servers:
                    await server.ready.wait()
            watch = LoopWatch(functools.partial(_loop_blocked, runtime), LOOP_BLOCKED_AFTER_S)
            watching = anyio.CancelScope()
            await group.start(_beat, watch, watching)
            coordinating = anyio.CancelScope()
            if self.coordinator is not None:
                if self.coordinator.keeper is not None:
                    self.coordinator.keeper.on_lost = context.request_stop
                await group.start(_coordinate, self.coordinator, coordinating)
                group.start_soon(_resume_accepted, self.coordinator, self._marked)
            scribe_stop = anyio.Event()
            group.start_soon(functools.partial(run_scribe_worker, self.layout, self.settings,
                                               runtime.bus, stop=scribe_stop,
                                               current=lambda: runtime.settings))
            reloading = anyio.CancelScope()
            if context.live_settings is not None:
                await group.start(_follow_settings, context.live_settings, reloading)
            notifier = Notifier(self.settings, runtime.inbox)
            runtime.inbox.add_hook(notifier.hook)
            relay = HookRelay(runtime.notify)
            runtime.inbox.add_hook(relay.hook)
            notifying = anyio.CancelScope()
            group.start_soon(_in_scope, notifying, notifier.run)
            relaying = anyio.CancelScope()
            group.start_soon(_in_scope, relaying, relay.run)
            tune_for_serving()  # what startup built stays out of GC passes; fewer of them
            runtime.bus.publish(DaemonStarted(pid=context.pid, repo=str(self.layout.repo)))
            log.info("squadd serving", pid=context.pid, repo=str(self.layout.repo),
                     listen=[listener.where for listener in listeners],
                     provider=self.settings.provider.kind)
            if dashboard is not None:
                log.info("dashboard ready: 'squadd ui' opens it", url=dashboard.url)
            await stop.wait()
            reason = reasons[0] if reasons else "stop requested"
            log.info("squadd stopping", reason=reason, grace_s=self.settings.daemon.grace_s)
            self._arm_deadline(f"the stop ({reason})")
            context.stopping = True
            runtime.bus.publish(DaemonStopping(reason=reason))
            await runtime.shutdown(grace_s=self.settings.daemon.grace_s)
            context.close_streams()
            scribe_stop.set()
            notifying.cancel()  # what it had not sent yet is sent at the next start
            relaying.cancel()
            watching.cancel()
            if context.live_settings is not None:
                context.live_settings.close()
            reloading.cancel()
            for server in servers:
                server.should_exit = True
            coordinating.cancel()
            if self.coordinator is not None:
                await self.coordinator.close()

    def _arm_deadline(self, why: str) -> None:
        daemon = self.settings.daemon
        self.deadline.arm(daemon.grace_s + daemon.stop_timeout_s, why)

    @staticmethod
    async def _watch_signals(request_stop: Callable[[str], None], scope: anyio.CancelScope,
                             deadline: StopDeadline) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            first = True
            async for signum in signals:
                if first:
                    first = False
                    request_stop(f"signal {signal.Signals(signum).name}")
                    continue
                log.warning("second signal: stopping now, without waiting")
                deadline.arm(SECOND_SIGNAL_S, "the stop after a second signal")
                scope.cancel()
                return


async def _follow_settings(live: LiveSettings, scope: anyio.CancelScope, *,
                           task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                           ) -> None:
    """Read the settings files again on a change and on SIGHUP, until `scope` is cancelled."""
    async def on_hangup() -> None:
        with anyio.open_signal_receiver(signal.SIGHUP) as signals:
            async for _ in signals:
                await live.reload("SIGHUP")

    with scope:
        async with anyio.create_task_group() as group:
            group.start_soon(on_hangup)
            await group.start(live.watch)
            task_status.started()


LOOP_BLOCKED_AFTER_S = 2.0
"""The daemon's event loop not running for this long is logged, with the tools then running."""


async def _coordinate(coordinator: Coordinator, scope: anyio.CancelScope, *,
                      task_status: anyio.abc.TaskStatus[None]) -> None:
    with scope:
        await coordinator.run(task_status=task_status)


async def _resume_accepted(coordinator: Coordinator, marked: list[str]) -> None:
    """A restarted coordinator resumes the routes it had accepted and not finished."""
    if coordinator.keeper is None:
        return
    try:
        await coordinator.keeper.resume_unqueued(marked)
    except Exception:  # the rest of the daemon serves on; `sessions resume` still works
        log.exception("accepted routes not resumed after the restart")


async def _beat(watch: LoopWatch, scope: anyio.CancelScope, *,
                task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    with scope:
        await watch.beat(task_status=task_status)


def _loop_blocked(runtime: SquadRuntime, seconds: float) -> None:
    """Called in the watch's thread: a log line (thread-safe), naming the tools running."""
    log.warning("event loop blocked", seconds=round(seconds, 3),
                tools_running=sorted(set(runtime.invoker.running.values())))


async def _in_scope(scope: anyio.CancelScope, run: Callable[[], Awaitable[None]]) -> None:
    with scope:
        await run()
