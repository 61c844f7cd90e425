"""Helpers for tests: running many real processes at once, and snapshots of a folder."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

_BARRIER_PRELUDE = """
import os, sys, time
from pathlib import Path
_barrier = Path(sys.argv[1])
(_barrier / f"ready-{os.getpid()}").touch()
_deadline = time.monotonic() + 60
while not (_barrier / "go").exists():
    if time.monotonic() > _deadline:
        sys.exit("barrier: no go signal within 60 s")
    time.sleep(0.001)
"""


@dataclass(frozen=True)
class ProcessResult:
    index: int
    returncode: int
    stdout: str
    stderr: str


def run_together(code: str, count: int, barrier: Path, *, timeout: float = 120.0
                 ) -> list[ProcessResult]:
    """Start `count` Python processes running `code`, release them at once, and wait for all.

    Each process waits at a barrier (a file) until every one of them has started, so they really
    contend. Inside `code`, `INDEX` is the process's number (0 .. count-1).
    """
    barrier.mkdir(parents=True, exist_ok=True)
    script = _BARRIER_PRELUDE + "INDEX = int(sys.argv[2])\n" + textwrap.dedent(code)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(barrier), str(index)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for index in range(count)
    ]
    try:
        deadline = time.monotonic() + timeout
        while len(list(barrier.glob("ready-*"))) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(list(barrier.glob('ready-*')))} of {count} "
                                   "processes reached the barrier")
            if any(proc.poll() not in (None, 0) for proc in procs):
                break  # one died before the barrier: collect its error below
            time.sleep(0.01)
        (barrier / "go").touch()
        results = []
        for index, proc in enumerate(procs):
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append(ProcessResult(index, proc.returncode, stdout, stderr))
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under `root` (relative path -> sha256 and mtime), and every folder."""
    state: dict[str, tuple[str, int]] = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        if path.is_symlink():
            state[relative] = ("symlink:" + str(path.readlink()), 0)
        elif path.is_dir():
            state[relative] = ("dir", 0)
        else:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            state[relative] = (digest, path.stat().st_mtime_ns)
    return state
