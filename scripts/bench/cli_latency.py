"""Benchmark: the wall time of `squadd status` against a running daemon, as a person types it.

It makes a squad in a temp repo, starts `squadd serve` (the `replay` provider, so no network),
routes a few tasks so the table has rows, then times `--runs` runs of the installed `squadd`
console script (the one in this venv) from fork to exit, each run followed by one run of
`python -c pass` (the interpreter's own start-up, on the same machine at the same moment). Prints
`cli_latency p50_ms=… p90_ms=… max_ms=… python_p50_ms=… ratio_vs_python=…` as its last line.
Targets: p50 <= 150 ms, ratio_vs_python <= 3. squadd's bytecode is compiled first, as a wheel
install has it.

With `--compare-httpx`, each run also times the same request made through httpx in a fresh
interpreter (import httpx, one GET /v1/sessions over the socket, print the JSON): what
`squadd status` would cost if its blocking client used httpx instead of `http.client`. Its
p50 is printed as `httpx_p50_ms=…`.

    .venv/bin/python scripts/bench/cli_latency.py [--runs 30] [--compare-httpx]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import squadd
from squadd.daemon.client import DaemonClient
from squadd.errors import DaemonError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_folder, make_squad, percentile

ROUTES = 5
HTTPX_STATUS = """import json, sys
import httpx
with httpx.Client(transport=httpx.HTTPTransport(uds=sys.argv[1])) as client:
    print(json.dumps(client.get("http://squadd/v1/sessions", params={"all": "0"}).json()))
"""


def squadd_script() -> Path:
    """The `squadd` console script beside this Python, checked to be the one this checkout's
    pyproject.toml makes (one an older install wrote starts another way in)."""
    script = Path(sys.executable).parent / "squadd"
    if not script.exists():
        sys.exit(f"no squadd console script beside {sys.executable}: pip install -e . first")
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    entry = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["scripts"]["squadd"]
    module, _, function = entry.partition(":")
    if f"from {module} import {function}" not in script.read_text(encoding="utf-8"):
        sys.exit(f"{script} was written by an older install of squadd (it does not call "
                 f"{entry}): run 'pip install -e .' with {sys.executable} again")
    return script


def compile_bytecode() -> None:
    """Write squadd's bytecode first, as installing a wheel does. An editable install run with
    PYTHONDONTWRITEBYTECODE set never caches it, and then every run recompiles each module it
    imports (about 25 ms here): a cost no installed user pays."""
    package = Path(squadd.__file__).resolve().parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)],
                   check=True, stdout=subprocess.DEVNULL)


def start_daemon(repo: Path, replay: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQUADD_")}
    daemon = subprocess.Popen(
        [str(squadd_script()), "serve", "--provider", "replay", "--replay-file", str(replay),
         "--log-level", "warning"],
        cwd=repo, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    with DaemonClient.find(repo) as client:
        while True:
            try:
                if client.health()["pid"] == daemon.pid:
                    return daemon
            except DaemonError:
                pass
            if daemon.poll() is not None or time.monotonic() > deadline:
                daemon.kill()
                sys.exit("the daemon did not start")
            time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--compare-httpx", action="store_true")
    args = parser.parse_args()
    compile_bytecode()
    with bench_folder("squadd-cli-bench-") as tmp:
        repo = Path(tmp) / "repo"
        layout = make_squad(repo)
        replay = Path(tmp) / "replay.json"
        replay.write_text(json.dumps({"default": [{"text": "done"}]}), encoding="utf-8")
        daemon = start_daemon(repo, replay)
        try:
            with DaemonClient(layout) as client:
                for index in range(ROUTES):
                    client.route(f"warm-up task {index}", "fenster")
            command = [str(squadd_script()), "status"]
            through_httpx = [sys.executable, "-c", HTTPX_STATUS, str(layout.socket)]
            timings, pythons, httpxs = [], [], []
            for _ in range(args.runs):
                started = time.perf_counter()
                done = subprocess.run(command, cwd=repo, capture_output=True, check=False)
                timings.append((time.perf_counter() - started) * 1000)
                if done.returncode != 0:
                    sys.exit(f"squadd status failed: {done.stderr.decode()}")
                started = time.perf_counter()
                subprocess.run([sys.executable, "-c", "pass"], cwd=repo, check=True)
                pythons.append((time.perf_counter() - started) * 1000)
                if args.compare_httpx:
                    started = time.perf_counter()
                    subprocess.run(through_httpx, cwd=repo, check=True, capture_output=True)
                    httpxs.append((time.perf_counter() - started) * 1000)
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(10)
    ordered = sorted(timings)
    print(f"runs={len(ordered)} rows={ROUTES} command='squadd status'")
    p50, python_p50 = statistics.median(ordered), statistics.median(pythons)
    print(f"cli_latency p50_ms={p50:.1f} p90_ms={percentile(ordered, 0.9):.1f} "
          f"max_ms={ordered[-1]:.1f} python_p50_ms={python_p50:.1f} "
          f"ratio_vs_python={p50 / python_p50:.2f}"
          + (f" httpx_p50_ms={statistics.median(httpxs):.1f}" if httpxs else ""))


if __name__ == "__main__":
    main()
