"""The daemon's settings while it runs: read again through the one loader when a settings file
changes (`.squad/config.toml`, the user's config), on SIGHUP or on `squadd reload`. What can
change live (`config.LIVE_SECTIONS`) is applied to the runtime at once; any other change is
logged and reported by `squadd status` until a restart; a file that does not load is refused,
named with its key, and the running settings stay. A changed file is read once it has stopped
changing (`SETTLE_S`), so that one written in place is not read half written.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import structlog
import watchfiles

from squadd.config import (
    Settings,
    changed_settings,
    is_live,
    load_settings,
    user_config_file,
    with_live_sections,
)
from squadd.contracts.events import EventSink, SettingsReloaded
from squadd.errors import ConfigError
from squadd.state.layout import SquadLayout

log = structlog.get_logger("squadd.settings")

WATCH_DEBOUNCE_MS = 200
"""Changes this close together are one reload (an editor's write, rename and chmod)."""
WATCH_TIMEOUT_MS = 1000
POLL_S = 2.0
"""How often the files' stats are read when watching them fails."""
SETTLE_S = 0.25
"""A changed file is read once its stats have stayed the same this long: a tool that writes
it in place (truncate, then write) is not read half way."""
SETTLE_LIMIT_S = 5.0
"""A file still changing after this long is read as it is (the next change reads it again)."""


class SettingsTarget(Protocol):
    """What the settings are applied to (the runtime): its settings now, and the setter that
    returns the keys it could not apply."""

    settings: Settings

    def apply_settings(self, settings: Settings) -> list[str]: ...


@dataclass
class Reloaded:
    """What one reload did: `applied` keys, keys whose change waits for a restart, or the
    `error` that refused the files (the running settings stay)."""

    ok: bool
    why: str
    applied: list[str] = field(default_factory=list)
    restart_needed: list[str] = field(default_factory=list)
    error: str = ""

    def answer(self) -> dict[str, Any]:
        return {"ok": self.ok, "why": self.why, "applied": self.applied,
                "restart_needed": restart_lines(self.restart_needed), "error": self.error}


def restart_lines(keys: list[str]) -> list[str]:
    return [f"{key} changed on disk: restart to apply" for key in keys]


class LiveSettings:
    """The running daemon's settings files, read again on demand or on change."""

    def __init__(self, layout: SquadLayout, target: SettingsTarget, sink: EventSink, *,
                 overrides: Mapping[str, Mapping[str, Any]] | None = None,
                 user_file: Path | None = None,
                 settle_sleep: Callable[[float], Awaitable[None]] = anyio.sleep):
        self.layout = layout
        self.target = target
        self.sink = sink
        self.overrides = overrides
        self.user_file = user_file if user_file is not None else user_config_file()
        self.restart_needed: list[str] = []
        """Keys changed on disk that the daemon runs without until it restarts."""
        self.error = ""
        """Why the files on disk were last refused ("" once they load again)."""
        self._lock = anyio.Lock()
        self._stop = anyio.Event()
        self._settle_sleep = settle_sleep

    def close(self) -> None:
        """End `watch` (its watcher thread returns within a step, not a whole timeout)."""
        self._stop.set()

    @property
    def files(self) -> list[Path]:
        return [self.user_file, self.layout.config_toml]

    def report(self) -> dict[str, Any]:
        """What `squadd status` shows: the changes waiting for a restart, and a refusal."""
        return {"restart_needed": restart_lines(self.restart_needed), "error": self.error}

    async def reload(self, why: str) -> Reloaded:
        """Read the files again and apply what can change live; one reload at a time."""
        async with self._lock:
            load = functools.partial(load_settings, self.layout.root, overrides=self.overrides,
                                     user_file=self.user_file)
            try:
                loaded = await anyio.to_thread.run_sync(load)
            except ConfigError as exc:
                self.error = f"{exc} (the running settings stay; fix the file, then " \
                             "`squadd reload`)"
                log.error("settings refused", why=why, error=str(exc))
                self.sink.publish(SettingsReloaded(why=why, error=self.error))
                return Reloaded(ok=False, why=why, error=self.error,
                                restart_needed=self.restart_needed)
            self.error = ""
            running = self.target.settings
            live = [key for key in changed_settings(running, loaded)
                    if is_live(key) and key not in self.restart_needed]
            if live:
                self.target.apply_settings(with_live_sections(running, loaded))
            # Whatever still differs waits for a restart: other sections, and a live key the
            # runtime could not take (a cluster's pool size).
            waiting = changed_settings(self.target.settings, loaded)
            applied = [key for key in live if key not in waiting]
            news = [key for key in waiting if key not in self.restart_needed]
            self.restart_needed = waiting
            if applied:
                log.info("settings applied", why=why, keys=applied)
            for key in news:
                log.warning(f"{key} changed on disk: restart to apply", why=why)
            if applied or news or why != "changed on disk":
                self.sink.publish(SettingsReloaded(why=why, applied=applied,
                                                   restart_needed=self.restart_needed))
            return Reloaded(ok=True, why=why, applied=applied,
                            restart_needed=self.restart_needed)

    async def watch(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                    ) -> None:
        """Reload whenever a settings file changes, until cancelled: watchfiles on the files'
        folders (editors replace a file rather than write it), else polling their stats. A
        folder missing at start (no user config yet) is not watched: SIGHUP or `squadd
        reload` reads it."""
        wanted = {str(path) for path in self.files}
        folders = sorted({str(path.parent) for path in self.files if path.parent.is_dir()})

        def relevant(change: watchfiles.Change, path: str) -> bool:
            return path in wanted

        started = False
        try:
            watcher = watchfiles.awatch(*folders, watch_filter=relevant, recursive=False,
                                        stop_event=self._stop,
                                        debounce=WATCH_DEBOUNCE_MS, step=50,
                                        rust_timeout=WATCH_TIMEOUT_MS)
            task_status.started()
            started = True
            async for changes in watcher:
                if changes:
                    await self._settled()
                    if self._stop.is_set():
                        break
                    await self.reload("changed on disk")
        except Exception as exc:  # watching is a convenience: polling does the same job
            log.warning("settings files not watched: polling them", error=str(exc),
                        every_s=POLL_S)
        if not started:
            task_status.started()
        await self._poll()

    async def _poll(self) -> None:
        seen = self._stats()
        while not self._stop.is_set():
            await anyio.sleep(POLL_S)
            now = self._stats()
            if now != seen:
                seen = await self._settled()
                if not self._stop.is_set():
                    await self.reload("changed on disk")

    async def _settled(self) -> list[tuple[int, int, int] | None]:
        """Wait until the files' stats stay the same for `SETTLE_S` (at most `SETTLE_LIMIT_S`,
        and no longer once `close` is called); their stats then."""
        seen = self._stats()
        for _step in range(max(1, round(SETTLE_LIMIT_S / SETTLE_S))):
            await self._settle_sleep(SETTLE_S)
            if self._stop.is_set():
                return seen
            now = self._stats()
            if now == seen:
                return now
            seen = now
        log.warning("settings files still changing: reading them as they are",
                    after_s=SETTLE_LIMIT_S)
        return seen

    def _stats(self) -> list[tuple[int, int, int] | None]:
        stats: list[tuple[int, int, int] | None] = []
        for path in self.files:
            try:
                info = path.stat()
            except OSError:
                stats.append(None)
            else:
                stats.append((info.st_ino, info.st_mtime_ns, info.st_size))
        return stats

