"""The bubblewrap mechanism: a private mount view, PID and network namespaces, no capabilities.

`bwrap_argv` turns a `SandboxPolicy` and a command into the `bwrap` command line: the whole
filesystem read-only, a private `/tmp`, the policy's writable folders bound writable again
(their `.git` read-only), `deny_read` paths hidden under an empty tmpfs (folders) or
`/dev/null` (files), a new PID namespace that dies with the call (`--unshare-pid`,
`--die-with-parent`), a new session (no terminal injection), every capability dropped (a
daemon run as root would otherwise keep `CAP_SYS_ADMIN` and could remount `/` writable), and
the network unshared unless the policy allows it.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from squadd.sandbox.policy import SandboxPolicy

PROBE_TIMEOUT_S = 10.0
PRIVATE_TMP = Path("/tmp")


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.cache
def probe() -> str | None:
    """None when bwrap can build a sandbox here, else why not (run once per process)."""
    program = bwrap_path()
    if program is None:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    try:
        done = subprocess.run(
            [program, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "--cap-drop",
             "ALL", "--die-with-parent", "--proc", "/proc", "--dev", "/dev", "true"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap cannot run: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
        return f"bwrap cannot make namespaces here ({why}); user namespaces may be disabled"
    return None


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def bwrap_argv(policy: SandboxPolicy, argv: Sequence[str], *, program: str = "bwrap",
               inner_prefix: Sequence[str] = ()) -> list[str]:
    """The `bwrap` command line that runs `argv` under `policy` (`inner_prefix` runs first
    inside, e.g. `prlimit`)."""
    out = [program, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
           "--tmpfs", str(PRIVATE_TMP), "--unshare-pid", "--unshare-ipc", "--unshare-uts",
           "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if not policy.network:
        out.append("--unshare-net")
    hidden_by_tmp = [PRIVATE_TMP]
    # The private /tmp hides what lives under it: bring back the read-only folders that must
    # stay visible (a repository under /tmp), then the writable ones.
    for path in policy.visible:
        if _exists(path) and _under(path, hidden_by_tmp) and not _under(path, policy.writable):
            out += ["--ro-bind", str(path), str(path)]
    for path in policy.writable:
        if path.is_dir():
            out += ["--bind", str(path), str(path)]
    for path in policy.read_only:
        if _exists(path) and not path.is_symlink():
            out += ["--ro-bind", str(path), str(path)]
    for path in policy.deny_read:
        if not path.exists():
            continue
        path = path.resolve()  # a link's target is what must be hidden
        if _under(path, hidden_by_tmp) and not _under(path, [*policy.visible,
                                                              *policy.writable]):
            continue  # already out of sight under the private /tmp
        if path.is_dir():
            out += ["--tmpfs", str(path), "--remount-ro", str(path)]
        else:
            out += ["--ro-bind", "/dev/null", str(path)]
    return [*out, "--", *inner_prefix, *argv]
