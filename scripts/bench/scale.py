"""Benchmark: routes served over the daemon's socket, one daemon against the cluster, and what
each process spends on a route.

Every part runs in its own process: an OpenAI-compatible model server (`_model_server.py`:
uvicorn, a listen backlog of 1024, every turn answered after `--delay-ms`), `--clients` client
processes (`_scale_client.py`: each keeps a bounded number of routes in flight through
`AsyncDaemonClient`, enough between them to keep every slot busy), and squadd itself: one
daemon (`squadd serve`) at 32 and at 64 slots, then a cluster (a real `redis-server` with its
append-only file synced on every write, as the tests run it; `squadd serve --cluster`; `squadd
worker` processes of `--worker-slots` slots each) at 1, 2, 4 and 8 workers. Every setup does
the same work: `--routes` one-turn routes after a warm-up, in a new squad of its own.

For each setup it prints routes/s, the fraction of the bound (slots / delay), the CPU time
(user + system, from /proc through psutil, children included) of each kind of process over
the measured routes divided by their number, and the Redis commands a route took (`INFO
commandstats`). Then the ratios of issue 39, in one run:
  - served: one daemon's CPU a route ÷ the in-process route's (`pool_throughput.py`, replay
    provider with the same delay and 32 slots, run here as a subprocess); and ÷ the same
    in-process route calling the model server over HTTP (what the socket API itself adds);
  - cluster: coordinator + workers a route ÷ the one daemon with the nearest slot count
    (also with Redis added);
  - coordinator: the coordinator's CPU a route ÷ that daemon's;
  - the coordinator's share of the cluster's squadd CPU, as workers are added.
CPU times are the figures to compare on a small, shared machine: throughput there is bound by
the cores, not by the slots. With `--rounds N` the setups run N times in turn (the order
reversed every other round), each ratio is taken within a round, and the last line gives each
figure's median over the rounds (and, for the ratios, the lowest and highest; the in-process
routes are measured in every round, first in one and last in the next): one daemon's
own CPU a route moves by a third between runs on a shared machine, and a ratio of figures
measured minutes apart moves with it. Every setup's files stay until the last round is done
(removing thousands of files makes the next setup's file creation slower).

Prints, as its last line:
    scale inprocess_cpu_ms=… daemon32_routes_per_s=… daemon32_fraction=… daemon32_cpu_ms=…
        served32_ratio=… … w8_cluster_ratio=… w8_coordinator_ratio=… w8_coordinator_share=…
Targets (issue 39): served ≤ 1.3; cluster ≤ 1.5; coordinator ≤ 1.0; share flat with workers.

    .venv/bin/python scripts/bench/scale.py [--quick] [--routes 640] [--delay-ms 200]
        [--clients 8] [--setups daemon32,daemon64,w1,w2,w4,w8] [--worker-slots 8]
        [--probe DIR] [--probe-with profile,syscalls] [--no-inprocess] [--rounds 1]
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
from _common import bench_folder, fmt, say
from _scale_fleet import Fleet, Measured, Setup, prepare_repo, start_model_server

HERE = Path(__file__).resolve().parent
KINDS = ("daemon", "coordinator", "workers", "redis", "model", "clients")
QUICK = {"routes": 128, "clients": 2}


def parse_setups(text: str, worker_slots: int) -> list[Setup]:
    setups: list[Setup] = []
    for name in (part.strip() for part in text.split(",") if part.strip()):
        if name.startswith("daemon"):
            setups.append(Setup(name, workers=0, slots=int(name.removeprefix("daemon"))))
        elif name.startswith("w"):
            setups.append(Setup(name, workers=int(name[1:]), slots=worker_slots))
        else:
            raise SystemExit(f"--setups: {name!r} is neither daemonN nor wN")
    return setups


def in_process_cpu_ms(routes: int, delay_ms: float, *, http: bool = False) -> float:
    """CPU ms a route through `SquadRuntime.route` in its own process, 32 slots, no peers:
    with the replay provider (`pool_throughput.py` as it stands), or (`http`) with the model
    server in a process of its own, called over HTTP as the served routes call it."""
    argv = [sys.executable, str(HERE / "pool_throughput.py"), "--routes", str(routes),
            "--concurrency", "32", "--delay-ms", str(delay_ms), "--no-peers"]
    model = None
    if http:
        model, port = start_model_server(delay_ms / 1000)
        argv += ["--base-url", f"http://127.0.0.1:{port}/v1"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    finally:
        if model is not None:
            model.kill()
            model.wait(timeout=10)
    last = (done.stdout.strip().splitlines() or [""])[-1]
    fields = dict(part.split("=", 1) for part in last.split()[1:] if "=" in part)
    if done.returncode != 0 or "cpu_ms_per_route" not in fields:
        say(f"! the in-process run failed (exit {done.returncode}): {done.stderr[-500:]}")
        return math.nan
    return float(fields["cpu_ms_per_route"])


def in_process_pair(routes: int, delay_ms: float) -> tuple[float, float]:
    """The in-process route's CPU ms with the replay provider and over HTTP, shown."""
    inprocess = in_process_cpu_ms(routes, delay_ms)
    http_inprocess = in_process_cpu_ms(routes, delay_ms, http=True)
    say(f"in-process route (pool_throughput.py, 32 slots): {inprocess:.2f} ms CPU a route "
        f"with the replay provider, {http_inprocess:.2f} ms with the model over HTTP")
    return inprocess, http_inprocess


def per_route(measured: Measured) -> dict[str, float]:
    return {kind: seconds * 1000 / measured.routes for kind, seconds in measured.cpu.items()}


def show(measured: Measured, bound: float) -> None:
    costs = per_route(measured)
    rate = measured.routes / measured.elapsed_s
    say(f"{measured.setup.name}: {measured.routes} routes, {rate:.1f} routes/s, "
        f"{rate / bound:.2f} of the bound {bound:.0f}/s; CPU ms a route: "
        + ", ".join(f"{kind} {costs[kind]:.2f}" for kind in KINDS if kind in costs)
        + f"; model turns a route {measured.completions / measured.routes:.2f}")
    if measured.loop_thread:
        say("  of which the event loop's thread: " + ", ".join(
            f"{kind} {seconds * 1000 / measured.routes:.2f}"
            for kind, seconds in measured.loop_thread.items()))
    if measured.redis_calls:
        top = sorted(measured.redis_calls.items(), key=lambda item: -item[1])
        say(f"  redis commands a route: {sum(measured.redis_calls.values()) / measured.routes:.1f}"
            " (" + ", ".join(f"{name} {calls / measured.routes:.2f}"
                             for name, calls in top[:12]) + ")")


def nearest_daemon(daemons: dict[int, Measured], slots: int) -> Measured | None:
    if not daemons:
        return None
    return daemons[min(daemons, key=lambda n: (abs(n - slots), -n))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"a small run ({QUICK['routes']} routes, {QUICK['clients']} "
                             "clients) for a machine with few cores")
    parser.add_argument("--routes", type=int, default=640,
                        help="routes measured in each setup (the same work for all)")
    parser.add_argument("--delay-ms", type=float, default=200.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--setups", default="daemon32,daemon64,w1,w2,w4,w8")
    parser.add_argument("--worker-slots", type=int, default=8)
    parser.add_argument("--probe", type=Path, default=None, metavar="DIR",
                        help="write, per setup and kind of squadd process, a cProfile of its "
                             "event loop's thread and its system calls a route (strace) over "
                             "the measured routes to DIR (the CPU times then include the "
                             "probes' cost)")
    parser.add_argument("--probe-with", default="profile,syscalls",
                        help="what --probe takes: profile, syscalls, or both (each alone "
                             "disturbs the run less)")
    parser.add_argument("--no-inprocess", action="store_true",
                        help="skip the in-process run the served ratio is measured against")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the setups this many times in turn and give the medians "
                             "of the figures and of the ratios taken within each round")
    args = parser.parse_args()
    if args.quick:
        args.routes = min(args.routes, QUICK["routes"])
        args.clients = min(args.clients, QUICK["clients"])
    setups = parse_setups(args.setups, args.worker_slots)
    delay_s = args.delay_ms / 1000
    say(f"{args.routes} routes a setup, {args.clients} client processes, a model turn "
        f"{args.delay_ms:g} ms")
    rounds: list[list[str]] = []
    with bench_folder() as kept:  # every setup's files stay until the last round is done
        for n in range(max(1, args.rounds)):
            # The in-process routes the served ratio divides by run in each round too: first
            # in one round, last in the next, as the setups' order is reversed.
            inprocess = http_inprocess = math.nan
            if n % 2 == 0 and not args.no_inprocess:
                inprocess, http_inprocess = in_process_pair(args.routes, args.delay_ms)
            results: list[Measured] = []
            for setup in setups if n % 2 == 0 else setups[::-1]:
                root = Path(tempfile.mkdtemp(prefix=f"{setup.name}-", dir=kept))
                with Fleet(root, setup, prepare_repo(root, setup, args.routes), delay_s,
                           probes=args.probe,
                           probe_with=frozenset(args.probe_with.split(","))) as fleet:
                    measured = fleet.measure(args.routes, args.clients)
                show(measured, setup.total_slots / delay_s)
                results.append(measured)
            if n % 2 == 1 and not args.no_inprocess:
                inprocess, http_inprocess = in_process_pair(args.routes, args.delay_ms)
            rounds.append(summary(results, inprocess, http_inprocess, delay_s))
            if args.rounds > 1:
                say(f"round {n}: " + " ".join(rounds[-1]))
    print("scale " + " ".join(medians(rounds)))


def medians(rounds: list[list[str]]) -> list[str]:
    """Each figure's median over the rounds (a ratio's lowest and highest too); a figure
    that is not a number is the first round's."""
    values: dict[str, list[str]] = {}
    for parts in rounds:
        for part in parts:
            key, _, value = part.partition("=")
            values.setdefault(key, []).append(value)
    out: list[str] = []
    for key, found in values.items():
        try:
            numbers = [float(v) for v in found]
        except ValueError:
            out.append(f"{key}={found[0]}")
            continue
        out.append(f"{key}={fmt(statistics.median(numbers))}")
        if len(rounds) > 1 and "ratio" in key:
            out += [f"{key}_min={fmt(min(numbers))}", f"{key}_max={fmt(max(numbers))}"]
    return out


def summary(results: list[Measured], inprocess: float, http_inprocess: float,
            delay_s: float) -> list[str]:
    parts = [f"inprocess_cpu_ms={fmt(inprocess)}",
             f"inprocess_http_cpu_ms={fmt(http_inprocess)}"]
    daemons = {m.setup.slots: m for m in results if m.setup.workers == 0}
    for measured in results:
        setup, costs = measured.setup, per_route(measured)
        rate = measured.routes / measured.elapsed_s
        key = setup.name
        parts += [f"{key}_routes_per_s={fmt(rate)}",
                  f"{key}_fraction={fmt(rate * delay_s / setup.total_slots)}"]
        if setup.workers == 0:
            parts += [f"{key}_cpu_ms={fmt(costs['daemon'])}",
                      f"served{setup.slots}_ratio={fmt(costs['daemon'] / inprocess)}",
                      f"served{setup.slots}_vs_http_inprocess="
                      f"{fmt(costs['daemon'] / http_inprocess)}"]
            continue
        squadd = costs["coordinator"] + costs["workers"]
        commands = sum(measured.redis_calls.values()) / measured.routes
        parts += [f"{key}_cpu_ms={fmt(squadd)}", f"{key}_coordinator_cpu_ms="
                  f"{fmt(costs['coordinator'])}", f"{key}_redis_cpu_ms={fmt(costs['redis'])}",
                  f"{key}_coordinator_share={fmt(costs['coordinator'] / squadd)}",
                  f"{key}_redis_commands={fmt(commands)}"]
        daemon = nearest_daemon(daemons, setup.total_slots)
        if daemon is not None:
            base = per_route(daemon)["daemon"]
            parts += [f"{key}_cluster_ratio={fmt(squadd / base)}",
                      f"{key}_cluster_ratio_with_redis={fmt((squadd + costs['redis']) / base)}",
                      f"{key}_coordinator_ratio={fmt(costs['coordinator'] / base)}",
                      f"{key}_vs=daemon{daemon.setup.slots}"]
    return parts


if __name__ == "__main__":
    main()
