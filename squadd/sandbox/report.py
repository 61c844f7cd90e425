"""What the sandbox enforces here, in words: for `squadd doctor` (and its security report).

`enforcement(mode, network, max_processes, max_file_bytes)` names the mechanism a call would
run under and what it does and does not hold, or why no mechanism can run.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field

from squadd.errors import SandboxError
from squadd.sandbox import bwrap, cgroup, landlock
from squadd.sandbox.core import mechanism_for, unavailable
from squadd.sandbox.policy import Mechanism, Mode


@dataclass(frozen=True)
class Enforcement:
    """The mechanism in use (None: none can run) and what it holds."""

    mechanism: Mechanism | None
    summary: str
    lines: list[str] = field(default_factory=list)


def _bwrap_version() -> str:
    program = bwrap.bwrap_path()
    if program is None:
        return "not installed"
    try:
        done = subprocess.run([program, "--version"], capture_output=True, text=True,
                              timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "present"
    return done.stdout.strip() or "present"


def enforcement(mode: Mode, *, network: str, max_processes: int,
                max_file_bytes: int) -> Enforcement:
    """What `sandbox.mode = mode` gives a call on this machine (blocking: it may probe)."""
    version = landlock.abi()
    found = [f"bwrap: {unavailable('bwrap') or 'available'} ({_bwrap_version()})",
             "landlock: " + (f"ABI {version}" if version else
                             unavailable("landlock") or "unavailable")]
    group = cgroup.parent()
    limit = (f"processes per call: at most {max_processes} (pids cgroup under {group})"
             if group is not None else
             f"processes per call: RLIMIT_NPROC {max_processes} (inside bwrap's user namespace; "
             "not enforced for root without a writable pids cgroup)")
    try:
        mechanism = mechanism_for(mode)
    except SandboxError as exc:
        return Enforcement(None, str(exc), found)
    files = f"file size: at most {max_file_bytes >> 20} MB (RLIMIT_FSIZE)"
    if mechanism == "bwrap":
        return Enforcement(mechanism, "bwrap: commands run confined", [
            "filesystem: read-only except the worktree (its .git read-only), a private /tmp "
            "and sandbox.writable; deny_read paths hidden",
            f"network: {'allowed' if network == 'on' else 'unshared (no network at all)'} "
            "(per agent: [agents.NAME] network)",
            "processes: own PID namespace (no signal reaches the daemon or another session); "
            "everything dies with the call; all capabilities dropped; new session",
            limit, files, *found])
    if mechanism == "landlock":
        net = ("allowed" if network == "on" else
               "TCP connect and bind denied" if version >= 4 else
               "NOT restricted (Landlock ABI < 4)")
        signals = ("signals and abstract sockets scoped to the call" if version >= 6 else
                   "signals NOT scoped (Landlock ABI < 6): the daemon can be signalled")
        return Enforcement(mechanism, f"landlock (ABI {version}): commands run confined", [
            "filesystem: writes only to the worktree, a private temp dir and "
            "sandbox.writable; deny_read paths unreadable",
            f"network: {net}; UDP is not covered", f"processes: {signals}; the launcher "
            "reaps whatever the call leaves behind", limit, files, *found])
    if mechanism == "seatbelt":
        return Enforcement(mechanism, "seatbelt (sandbox-exec): commands run confined "
                           "(untested by squadd's own tests)", [
                               "filesystem: writes only to the worktree (not its .git), a "
                               "private temp dir and sandbox.writable; deny_read unreadable",
                               f"network: {'allowed' if network == 'on' else 'denied'}",
                               "processes: signals only within the call's sandbox; no process "
                               "limit; leftovers stopped by the process-group sweep", files])
    return Enforcement(mechanism, 'sandbox.mode = "off": commands run unconfined (logged at '
                       "each call)", [
                           "nothing confines reads, writes, the network or signals",
                           "leftover processes are still killed when a call ends "
                           f"({'its cgroup' if group is not None else 'the reaper'})",
                           *found, f"prlimit: {shutil.which('prlimit') or 'missing'}"])
