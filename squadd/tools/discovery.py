"""Finding custom tools: `.squad/tools/` over `~/.config/squadd/tools/` over `tools.extra_dirs`,
then (with `tools.cycod_dirs`) the CYCOD folders: `.cycod/tools/` in the repo, `~/.cycod/tools/`
and the system-wide one (`/etc/.cycod/tools/`, `%ProgramData%\\.cycod\\tools\\` on Windows).

Each `.py`, `.yaml` and `.yml` file is loaded on its own (only YAML in the CYCOD folders): one
that fails is reported (file and reason, and a `tools.load_failed` event) and skipped. On the
same name the earlier folder wins and the other is listed as shadowed. A tool that cannot run on
this machine (another platform, no interpreter) is listed as unavailable. Run at each session
start; files that did not change since the last run are not loaded again, and folders that did
not change are not listed again.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from squadd.config import Settings
from squadd.contracts.events import EventSink, NullSink, ToolsLoadFailed
from squadd.errors import ShellToolError, StateError, ToolDefinitionError
from squadd.statcache import NotCached
from squadd.state.layout import SquadLayout, read_inside
from squadd.tools.base import Tool, ToolSet, ToolSource
from squadd.tools.python.calls import SpareWorkers
from squadd.tools.python.files import MAX_PYTHON_FILE_BYTES, load_python_file
from squadd.tools.python.tool import PythonTool
from squadd.tools.yaml.agent import PromptTool, enabled, load_agent_tool
from squadd.tools.yaml.schema import MAX_FILE_BYTES
from squadd.tools.yaml.tool import link_shell_tools, load_shell_tool
from squadd.untrusted import has_surrogate

log = structlog.get_logger("squadd.tools")

SUFFIXES = (".py", ".yaml", ".yml")
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class ToolDir:
    path: Path
    source: ToolSource


@dataclass(frozen=True)
class LoadFailure:
    file: Path
    source: ToolSource
    reason: str


@dataclass(frozen=True)
class Shadowed:
    tool: Tool[Any]
    by: Tool[Any] | None
    """The tool that won, or None when a builtin tool has the name."""

    @property
    def reason(self) -> str:
        if self.by is None:
            return "a builtin tool has this name"
        return f"shadowed by the {self.by.source} tool in {self.by.file}"


@dataclass(frozen=True)
class Skipped:
    name: str
    file: Path
    source: ToolSource
    reason: str


@dataclass(frozen=True)
class Discovery:
    """What one discovery found: the tools that count, and everything else, with reasons."""

    tools: tuple[Tool[Any], ...] = ()
    shadowed: tuple[Shadowed, ...] = ()
    failures: tuple[LoadFailure, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    dirs: tuple[ToolDir, ...] = ()

    def toolset(self) -> ToolSet:
        """The tools, and the names of files that failed to load (by file stem) with why."""
        return ToolSet(self.tools, {f.file.stem: f"{f.file}: {f.reason}" for f in self.failures})

    def get(self, name: str) -> Tool[Any] | None:
        return next((t for t in self.tools if t.name == name), None)


def _utf8_or_none(data: bytes) -> str | None:
    """`data` as text, or None when it is not UTF-8 (the shell tool loader then says so)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def user_tools_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "squadd" / "tools"


def cycod_user_tools_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get("HOME") or Path.home()) / ".cycod" / "tools"


def cycod_global_tools_dir(environ: Mapping[str, str] | None = None) -> Path:
    """CYCOD's machine-wide tool folder (unless `tools.cycod_global_dir` names another)."""
    if sys.platform == "win32":
        env = os.environ if environ is None else environ
        return Path(env.get("ProgramData") or "C:\\ProgramData") / ".cycod" / "tools"
    return Path("/etc/.cycod/tools")


_DIR_VARIABLES = ("XDG_CONFIG_HOME", "HOME", "ProgramData")
"""The environment variables the tool folders' places are made from."""


@functools.lru_cache(maxsize=64)
def _named_dirs(layout: SquadLayout, extra_dirs: tuple[str, ...], cycod_dirs: bool,
                cycod_global_dir: str, named: tuple[tuple[str, str], ...]) -> tuple[ToolDir, ...]:
    """The folders the settings and environment name, in order (remembered: a session's
    opening asks for them, and building the paths cost more than looking in them)."""
    environ = dict(named)
    dirs = [ToolDir(layout.tools_dir, "project"), ToolDir(user_tools_dir(environ), "user")]
    for extra in extra_dirs:
        path = Path(extra).expanduser()
        dirs.append(ToolDir(path if path.is_absolute() else layout.repo / path, "extra"))
    if cycod_dirs:
        global_dir = Path(cycod_global_dir).expanduser() if cycod_global_dir \
            else cycod_global_tools_dir(environ)
        dirs += [ToolDir(layout.cycod_tools_dir, "cycod-project"),
                 ToolDir(cycod_user_tools_dir(environ), "cycod-user"),
                 ToolDir(global_dir, "cycod-global")]
    return tuple(dirs)


def tool_dirs(layout: SquadLayout, settings: Settings,
              environ: Mapping[str, str] | None = None) -> list[ToolDir]:
    """The folders searched, first wins; an extra folder may be relative to the repo."""
    return [folder for folder, _ in _stated_dirs(layout, settings, environ)]


def _stated_dirs(layout: SquadLayout, settings: Settings, environ: Mapping[str, str] | None
                 ) -> list[tuple[ToolDir, os.stat_result | None]]:
    """`tool_dirs`, each with its folder's stat (None when it is not there)."""
    env = os.environ if environ is None else environ
    tools = settings.tools
    named = {name: env[name] for name in _DIR_VARIABLES if name in env}
    dirs = _named_dirs(layout, tuple(tools.extra_dirs), tools.cycod_dirs,
                       tools.cycod_global_dir or "", tuple(named.items()))
    unique: list[tuple[ToolDir, os.stat_result | None]] = []
    seen: set[object] = set()
    for folder in dirs:
        # One folder named twice (a link, an extra folder that is the project's) by its
        # inode: a stat a folder, where resolving the path cost a stat a component.
        st: os.stat_result | None
        try:
            st = folder.path.stat()
            key: object = (st.st_dev, st.st_ino)
        except OSError:  # not there (yet): nothing to list twice, but name it once
            st, key = None, folder.path
        if key not in seen:
            seen.add(key)
            unique.append((folder, st))
    return unique


def _tool_files(folder: ToolDir) -> tuple[list[Path], bool]:
    """The tool files in `folder`, by name, and whether none of them is a link (a link's
    target may change kind without the folder changing)."""
    try:
        entries = sorted(os.scandir(folder.path), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return [], False
    suffixes = SUFFIXES if not folder.source.startswith("cycod") else YAML_SUFFIXES
    named = [e for e in entries if e.name.endswith(suffixes) and not e.name.startswith(("_", "."))]
    return ([Path(e.path) for e in named if e.is_file()],
            not any(e.is_symlink() for e in named))


LISTING_SETTLED_NS = 3_000_000_000
"""How long before a listing a folder's modification time must be for the listing to be kept:
longer than any file system's timestamp step (FAT's is 2 s), so that a file added after the
listing always gives the folder another modification time."""


@dataclass(frozen=True)
class _Listing:
    """A folder's tool files as listed when its stat was `key`."""

    key: tuple[int, int, int, int, str]
    files: tuple[Path, ...]


@dataclass
class _Loaded:
    key: tuple[Any, ...]
    tools: list[Tool[Any]] = field(default_factory=list)
    error: str | None = None
    skipped: list[Skipped] = field(default_factory=list)


_Loader = Callable[[Path, ToolSource, Settings, str, Path], _Loaded]
"""How `_find` gets one file's tools: loaded now, or only as loaded before."""


def _failure_reason(exc: BaseException, path: Path) -> str:
    if isinstance(exc, SyntaxError):
        return f"syntax error at line {exc.lineno}: {exc.msg}"
    reason = f"{type(exc).__name__}: {exc}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
    if frames:
        reason += f" (line {frames[-1].lineno})"
    return reason


def _stat_key(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class ToolDiscoverer:
    """Discovery with a cache of loaded files, keyed by (inode, size, mtime, ctime), and of
    the folders' listings, keyed by the folder's (device, inode, mtime, ctime): a session
    start stats each folder and file, and lists only a folder that changed. It also holds the
    spare worker processes its Python tools' calls start from (`close()` ends them)."""

    def __init__(self, workers: SpareWorkers | None = None, *,
                 now_ns: Callable[[], int] = time.time_ns) -> None:
        self.workers = workers if workers is not None else SpareWorkers()
        self._lock = threading.Lock()
        self._files: dict[Path, _Loaded] = {}
        self._listings: dict[Path, _Listing] = {}
        self._reported: dict[Path, str] = {}
        self._now_ns = now_ns

    def close(self) -> None:
        """End the spare worker processes (blocking: it reaps them)."""
        self.workers.close()

    def discover(self, layout: SquadLayout, settings: Settings, sink: EventSink | None = None,
                 *, builtin_names: Iterable[str] = (),
                 environ: Mapping[str, str] | None = None) -> Discovery:
        """What the tool folders hold now (blocking: it reads the files that changed)."""
        with self._lock:
            found, seen = self._find(layout, settings, set(builtin_names), environ, self._load)
            return self._settle(found, seen, sink or NullSink())

    def known(self, layout: SquadLayout, settings: Settings, sink: EventSink | None = None,
              *, builtin_names: Iterable[str] = (),
              environ: Mapping[str, str] | None = None) -> Discovery:
        """`discover` from what is loaded already: the folders are listed and each file
        stat'ed, but nothing is read, loaded or started (the event loop may call it).
        `NotCached` when something must be, or when another thread is discovering now."""
        if not self._lock.acquire(blocking=False):
            raise NotCached("custom tools are being discovered in another thread")
        try:
            found, seen = self._find(layout, settings, set(builtin_names), environ,
                                     self._loaded)
            python = any(isinstance(tool, PythonTool) for tool in found.tools)
            if python and not self.workers.ready():
                raise NotCached("a spare worker process must be started for the Python tools")
            return self._settle(found, seen, sink or NullSink())
        finally:
            self._lock.release()

    def _find(self, layout: SquadLayout, settings: Settings, builtins: set[str],
              environ: Mapping[str, str] | None, load: _Loader
              ) -> tuple[Discovery, set[Path]]:
        """The tools of every folder, each file through `load`, and the files seen."""
        stated = _stated_dirs(layout, settings, environ)
        fingerprint = settings.tools.model_dump_json()
        winners: dict[str, Tool[Any]] = {}
        shadowed: list[Shadowed] = []
        failures: list[LoadFailure] = []
        skipped: list[Skipped] = []
        seen_files: set[Path] = set()
        for folder, st in stated:
            # Project tools stay inside the repository, others inside their own folder.
            base = layout.repo if folder.source in ("project", "cycod-project") else folder.path
            for path in self._listed(folder, st):
                seen_files.add(path)
                loaded = load(path, folder.source, settings, fingerprint, base)
                if loaded.error is not None:
                    failures.append(LoadFailure(path, folder.source, loaded.error))
                    continue
                skipped.extend(loaded.skipped)
                for tool in loaded.tools:
                    if isinstance(tool, PromptTool) and not enabled(tool.spec_file, environ):
                        skipped.append(Skipped(tool.name, path, folder.source,
                                               f"optional: {tool.spec_file.optional} is not "
                                               "true, 1 or yes"))
                        continue
                    if tool.name in builtins:
                        shadowed.append(Shadowed(tool, None))
                    elif tool.name in winners:
                        shadowed.append(Shadowed(tool, winners[tool.name]))
                    else:
                        winners[tool.name] = tool
        linked, link_failures = link_shell_tools(winners)
        tools: list[Tool[Any]] = []
        for name, tool in winners.items():
            if name in link_failures:
                assert tool.file is not None
                failures.append(LoadFailure(tool.file, tool.source,
                                            f"tool {name} {link_failures[name]}"))
            else:
                tools.append(linked.get(name, tool))
        for gone in set(self._listings) - {folder.path for folder, _ in stated}:
            del self._listings[gone]
        return (Discovery(tuple(tools), tuple(shadowed), tuple(failures), tuple(skipped),
                          tuple(folder for folder, _ in stated)), seen_files)

    def _listed(self, folder: ToolDir, st: os.stat_result | None) -> tuple[Path, ...]:
        """The folder's tool files: none when it was not there, as listed before when its
        stat is the same, else listed now (and kept when its last change is settled)."""
        if st is None:
            self._listings.pop(folder.path, None)
            return ()
        key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, folder.source)
        listing = self._listings.get(folder.path)
        if listing is not None and listing.key == key:
            return listing.files
        started = self._now_ns()
        files, no_links = _tool_files(folder)
        if no_links and st.st_mtime_ns < started - LISTING_SETTLED_NS:
            self._listings[folder.path] = _Listing(key, tuple(files))
        else:  # changed too lately to tell a later change by its time: listed again next time
            self._listings.pop(folder.path, None)
        return tuple(files)

    def _settle(self, found: Discovery, seen_files: set[Path], sink: EventSink) -> Discovery:
        """Forget the files gone, report new failures, have a worker ready for Python tools."""
        for gone in set(self._files) - seen_files:
            del self._files[gone]
        self._report(list(found.failures), sink)
        if any(isinstance(tool, PythonTool) for tool in found.tools):
            self.workers.warm_up()  # their first call finds a worker process started
        return found

    @staticmethod
    def _key(path: Path, source: ToolSource, fingerprint: str) -> tuple[Any, ...]:
        """What a loaded file is kept under (`OSError` when it cannot be stat'ed)."""
        # A YAML tool's availability depends on the interpreters found on PATH.
        return (*_stat_key(path), source, fingerprint if path.suffix != ".py" else "",
                os.environ.get("PATH", "") if path.suffix != ".py" else "")

    def _lookup(self, path: Path, source: ToolSource,
                fingerprint: str) -> _Loaded | tuple[Any, ...]:
        """`path` as loaded before and unchanged since (or the error that it cannot be
        stat'ed); else the key it is to be kept under once read."""
        try:
            key = self._key(path, source, fingerprint)
        except OSError as exc:
            return _Loaded((), error=f"cannot be read: {exc.strerror}")
        cached = self._files.get(path)
        return cached if cached is not None and cached.key == key else key

    def _loaded(self, path: Path, source: ToolSource, settings: Settings,
                fingerprint: str, base: Path) -> _Loaded:
        """`path` as loaded before, unchanged since; `NotCached` when it must be read."""
        found = self._lookup(path, source, fingerprint)
        if not isinstance(found, _Loaded):
            raise NotCached(str(path))
        return found

    def _load(self, path: Path, source: ToolSource, settings: Settings,
              fingerprint: str, base: Path) -> _Loaded:
        """`path` as loaded before when unchanged, else read and loaded now."""
        found = self._lookup(path, source, fingerprint)
        if isinstance(found, _Loaded):
            return found
        loaded = _Loaded(found)
        if has_surrogate(path.name):
            loaded.error = "the file name is not valid UTF-8: rename it (tool names come from it)"
            self._files[path] = loaded
            return loaded
        try:
            limit = MAX_PYTHON_FILE_BYTES if path.suffix == ".py" else MAX_FILE_BYTES
            data = read_inside(path, base, max_bytes=limit)
        except (OSError, StateError) as exc:
            loaded.error = (f"not read: {exc}" if isinstance(exc, StateError)
                            else f"cannot be read: {exc.strerror}")
            self._files[path] = loaded
            return loaded
        try:
            if path.suffix == ".py":
                python_tools = load_python_file(path, source, data=data)
                for python_tool in python_tools:
                    python_tool.workers = self.workers
                    python_tool.settings = settings
                loaded.tools = list(python_tools)
            elif ((text := _utf8_or_none(data)) is not None
                  and (agent_tool := load_agent_tool(path, source=source, text=text)) is not None):
                loaded.tools = [agent_tool]
            else:
                shell = load_shell_tool(path, source=source, settings=settings, data=data)
                unavailable = shell.definition.unavailable_reason()
                if unavailable is None:
                    loaded.tools = [shell]
                else:
                    loaded.skipped = [Skipped(shell.name, path, source, unavailable)]
        except ShellToolError as exc:
            loaded.error = str(exc).removeprefix(f"{path}: ")
        except ToolDefinitionError as exc:
            loaded.error = str(exc).removeprefix(f"{path}: ")
        except (KeyboardInterrupt, GeneratorExit):
            raise
        except BaseException as exc:  # a tool file may raise anything, SystemExit included
            loaded.error = _failure_reason(exc, path)
        self._files[path] = loaded
        return loaded

    def _report(self, failures: list[LoadFailure], sink: EventSink) -> None:
        current = {f.file: f.reason for f in failures}
        for failure in failures:
            if self._reported.get(failure.file) == failure.reason:
                continue
            log.warning("tools.load_failed", file=str(failure.file), reason=failure.reason)
            sink.publish(ToolsLoadFailed(file=str(failure.file), reason=failure.reason))
        self._reported = current


def discover_tools(layout: SquadLayout, settings: Settings, sink: EventSink | None = None, *,
                   builtin_names: Iterable[str] = (),
                   discoverer: ToolDiscoverer | None = None) -> Discovery:
    """Find the custom tools for `layout` (blocking: call it through `anyio.to_thread`).

    A long-lived owner (the runtime) passes its own `discoverer`, so that unchanged files are
    not loaded again; without one, every file is loaded afresh."""
    return (discoverer or ToolDiscoverer()).discover(layout, settings, sink,
                                                     builtin_names=builtin_names)


def known_tools(layout: SquadLayout, settings: Settings, discoverer: ToolDiscoverer,
                sink: EventSink | None = None, *,
                builtin_names: Iterable[str] = ()) -> Discovery:
    """`discover_tools` from what `discoverer` has loaded already, without reading a file
    (`ToolDiscoverer.known`): the event loop may call it; `NotCached` when a file must be read."""
    return discoverer.known(layout, settings, sink, builtin_names=builtin_names)
