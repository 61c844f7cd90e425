"""`confine`: the one way a command is put in the sandbox; `mechanism_for`: which one runs here.

    confined = confine(policy, ["bash", "-c", "make test"], env)
    try:
        run(confined.argv, env=confined.env, cwd=policy.cwd)  # any runner
    finally:
        confined.close()  # kills what is left of the call, removes its cgroup and temp dir

`confined.record` is what the call ran under, for its result and the transcript. With
`mode = "off"` the command still runs under the launcher's reaper, so nothing it starts
outlives it; only with a mechanism is it confined.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from squadd.errors import SandboxError
from squadd.sandbox import bwrap, cgroup, landlock, launcher, seatbelt
from squadd.sandbox.policy import Mechanism, Mode, SandboxPolicy

log = structlog.get_logger("squadd.sandbox")

LAUNCHER = Path(__file__).with_name("launcher.py")
OFF_HINT = ('set sandbox.mode = "off" in .squad/config.toml to run commands unconfined '
            "(an explicit choice, logged at each call)")


def unavailable(mechanism: Mechanism) -> str | None:
    """None when `mechanism` works here, else why not."""
    if mechanism == "bwrap":
        return bwrap.probe()
    if mechanism == "landlock":
        if not sys.platform.startswith("linux"):
            return "Landlock is Linux only"
        return None if landlock.abi() >= 1 else \
            "Landlock is not enabled in this kernel (no 'landlock' in the LSM list)"
    if mechanism == "seatbelt":
        return seatbelt.unavailable()
    return None


@functools.cache
def mechanism_for(mode: Mode) -> Mechanism:
    """The mechanism `mode` runs commands under here; `SandboxError` (saying why, and naming
    `sandbox.mode = "off"`) when it has none."""
    if mode == "off":
        return "off"
    wanted: tuple[Mechanism, ...]
    if mode == "auto":
        wanted = ("seatbelt",) if sys.platform == "darwin" else ("bwrap", "landlock")
    else:
        wanted = (mode,)
    reasons = []
    for mechanism in wanted:
        why = unavailable(mechanism)
        if why is None:
            return mechanism
        reasons.append(f"{mechanism}: {why}")
    raise SandboxError(f"no sandbox can run here (sandbox.mode = {mode!r}; "
                       f"{'; '.join(reasons)}): install bubblewrap, or {OFF_HINT}")


@dataclass
class Confined:
    """One command, ready to start inside its sandbox; `close()` once it has ended."""

    argv: list[str]
    env: dict[str, str]
    mechanism: Mechanism
    record: dict[str, Any]
    cgroup: Path | None = None
    temp: Path | None = None
    guarded: dict[Path, bytes] = field(default_factory=dict)
    """Read-only files a Landlock rule cannot protect (a worktree's `.git` file): put back as
    they were once the call has ended."""
    _closed: bool = field(default=False, repr=False)

    def close(self) -> list[str]:
        """Kill whatever of the call is still running (its cgroup's members), remove its
        cgroup and private temp dir; those killed, as "pid (name)"."""
        if self._closed:
            return []
        self._closed = True
        killed = cgroup.destroy(self.cgroup) if self.cgroup is not None else []
        if self.temp is not None:
            shutil.rmtree(self.temp, ignore_errors=True)
        for path, content in self.guarded.items():
            _restore(path, content)
        # Under bwrap the PID namespace ends with the call: what the cgroup still held is
        # the namespace winding down, not something the command left behind.
        return [] if self.mechanism == "bwrap" else killed


def _restore(path: Path, content: bytes) -> None:
    """Put `path` back to `content` if the call changed, replaced or removed it."""
    with contextlib.suppress(OSError):
        if path.is_file() and not path.is_symlink() and path.read_bytes() == content:
            return
    log.warning("sandbox.restored", path=str(path))
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        spare = path.with_name(f".{path.name}.squadd-restore")
        spare.write_bytes(content)
        spare.replace(path)


def _launcher(spec: dict[str, Any], argv: Sequence[str]) -> list[str]:
    return [sys.executable, "-I", "-S", str(LAUNCHER), *launcher.encode(spec), *argv]


def confine(policy: SandboxPolicy, argv: Sequence[str],
            env: Mapping[str, str]) -> Confined:
    """`argv` and `env` wrapped to run under `policy` (blocking: it may make a cgroup and a
    temp dir, and the first call probes the mechanisms). Raises `SandboxError`."""
    mechanism = mechanism_for(policy.mode)
    record = policy.describe(mechanism)
    # RLIMIT_NPROC holds per call inside bwrap's user namespace, and the launcher reaps what a
    # Landlock call leaves: a cgroup (moving a process into one can cost tens of ms) is made
    # only where the kernel exempts the user from RLIMIT_NPROC (root), or to find what an
    # unconfined call leaves behind.
    group = cgroup.create(policy.max_processes) \
        if mechanism == "off" or os.geteuid() == 0 else None
    if group is not None:
        record["process_limit"] = "cgroup"
    elif mechanism == "off" or os.geteuid() == 0:  # the kernel exempts root from the rlimit
        record["process_limit"] = "none"
    else:
        record["process_limit"] = "rlimit"
    env = dict(env)
    try:
        if mechanism == "bwrap":
            inner = ["prlimit", f"--fsize={policy.max_file_bytes}"]
            if group is None:
                inner.append(f"--nproc={policy.max_processes}")
            wrapped = bwrap.bwrap_argv(policy, argv, program=bwrap.bwrap_path() or "bwrap",
                                       inner_prefix=[*inner, "--"]
                                       if shutil.which("prlimit") else ())
            if group is not None:
                wrapped = ["sh", "-c", 'echo $$ > "$0" && exec "$@"',
                           str(group / "cgroup.procs"), *wrapped]
            env["TMPDIR"] = "/tmp"
            return Confined(wrapped, env, mechanism, record, group)
        if mechanism == "seatbelt":  # untested: macOS (docs/sandbox.md)
            box = Path(tempfile.mkdtemp(prefix="squadd-sandbox-"))
            env["TMPDIR"] = str(box)
            return Confined(seatbelt.seatbelt_argv(policy, argv, box), env, mechanism, record,
                            group, box)
        temp: Path | None = None
        spec: dict[str, Any] = {"cgroup": str(group / "cgroup.procs") if group else None}
        if mechanism == "landlock":
            temp = Path(tempfile.mkdtemp(prefix="squadd-sandbox-"))
            spec["landlock"] = landlock.landlock_spec(policy, temp)
            spec["fsize"] = policy.max_file_bytes
            if group is None:
                spec["nproc"] = landlock.user_processes() + policy.max_processes
            env["TMPDIR"] = str(temp)
            record["landlock_abi"] = landlock.abi()
            guarded = {path: path.read_bytes() for path in policy.read_only
                       if path.is_file() and not path.is_symlink()}
            return Confined(_launcher(spec, argv), env, mechanism, record, group, temp,
                            guarded)
        else:
            log.warning("sandbox.off", argv0=str(argv[0]) if argv else "",
                        setting='sandbox.mode = "off"')
            if group is not None:  # the cgroup finds what the call leaves behind
                return Confined(["sh", "-c", 'echo $$ > "$0" && exec "$@"',
                                 str(group / "cgroup.procs"), *argv], env, mechanism, record,
                                group)
        return Confined(_launcher(spec, argv), env, mechanism, record, group, temp)
    except BaseException:
        if group is not None:
            with contextlib.suppress(OSError):
                cgroup.destroy(group)
        raise
