"""One client process of the scale benchmark: routes through the daemon's socket API.

It opens an `AsyncDaemonClient` on the repository's daemon, sends `--warmup` routes, prints
`ready` and waits for a line on stdin; then it sends `--routes` routes, never more than
`--in-flight` at once (each one waits for its answer: `POST /v1/route`), prints one JSON line
(`routes`, `failures`, `first_failure`, `elapsed_s`) and waits for stdin to close before it
exits, so that whoever measures its CPU time finds it still there.

    .venv/bin/python scripts/bench/_scale_client.py REPO --routes 80 --in-flight 10
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

AGENTS = ("fenster", "hockney", "keaton", "mcmanus")


async def send_routes(repo: Path, tag: str, routes: int, in_flight: int,
                      failures: list[str]) -> None:
    from squadd.daemon.client import AsyncDaemonClient
    from squadd.state.layout import SquadLayout

    numbers = iter(range(routes))
    async with AsyncDaemonClient(SquadLayout.find(repo), timeout=600.0) as client:
        async def keep_one_going() -> None:
            for n in numbers:
                result = await client.route(f"job {tag}-{n}", AGENTS[n % len(AGENTS)])
                if not result.get("ok"):
                    failures.append(str(result.get("message") or result.get("error")))

        async with anyio.create_task_group() as tg:
            for _ in range(min(in_flight, routes)):
                tg.start_soon(keep_one_going)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("repo", type=Path)
    parser.add_argument("--tag", default="c")
    parser.add_argument("--routes", type=int, required=True)
    parser.add_argument("--in-flight", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=0)
    args = parser.parse_args()
    from squadd.serving import run_serving

    warm: list[str] = []
    if args.warmup:
        run_serving(send_routes, args.repo, f"{args.tag}-warm", args.warmup, args.in_flight,
                    warm)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    failures: list[str] = []
    started = time.perf_counter()
    run_serving(send_routes, args.repo, args.tag, args.routes, args.in_flight, failures)
    elapsed = time.perf_counter() - started
    print(json.dumps({"routes": args.routes, "failures": len(failures) + len(warm),
                      "first_failure": (warm + failures)[:1], "elapsed_s": elapsed}),
          flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
