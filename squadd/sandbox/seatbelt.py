"""The Seatbelt mechanism (macOS `sandbox-exec`): the same `SandboxPolicy` as an SBPL profile.

Untested: the tests run on Linux. Reads are allowed but for `deny_read`; writes only beneath
the writable folders (their `.git` denied), the temp dir and the terminal devices; the network
denied unless allowed; signals only to processes in the same sandbox. Nothing like a PID
namespace exists there: what a call leaves running is stopped by the process-group runner and
its sweep, as without a sandbox.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from squadd.sandbox.policy import SandboxPolicy

SANDBOX_EXEC = "/usr/bin/sandbox-exec"


def unavailable() -> str | None:
    """None when `sandbox-exec` can run here, else why not."""
    if sys.platform != "darwin":
        return "Seatbelt is macOS only"
    if shutil.which("sandbox-exec") is None and not Path(SANDBOX_EXEC).exists():
        return "sandbox-exec is missing"
    return None


def _quote(path: Path) -> str:
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _rule(path: Path) -> str:
    return f"(subpath {_quote(path)})" if path.is_dir() else f"(literal {_quote(path)})"


def profile(policy: SandboxPolicy, temp: Path) -> str:
    """The SBPL profile for `policy`, with `temp` as the private temp dir."""
    lines = ["(version 1)", "(deny default)", "(allow process-exec)", "(allow process-fork)",
             "(allow signal (target same-sandbox))", "(allow sysctl-read)",
             "(allow mach-lookup)", "(allow ipc-posix-shm)", "(allow file-read*)"]
    denied = [path for path in policy.deny_read if path.exists()]
    if denied:
        lines.append("(deny file-read* " + " ".join(_rule(p) for p in denied) + ")")
    writable = [p for p in (*policy.writable, temp) if p.is_dir()]
    lines.append("(allow file-write* " + " ".join(_rule(p) for p in writable)
                 + ' (literal "/dev/null") (regex #"^/dev/tty"))')
    protected = [p for p in policy.read_only if p.exists()]
    if protected:
        lines.append("(deny file-write* " + " ".join(_rule(p) for p in protected) + ")")
    lines.append("(allow network*)" if policy.network else
                 '(allow network* (local unix-socket))')
    return "\n".join(lines) + "\n"


def seatbelt_argv(policy: SandboxPolicy, argv: Sequence[str], temp: Path) -> list[str]:
    return [SANDBOX_EXEC, "-p", profile(policy, temp), *argv]
