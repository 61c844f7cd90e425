"""Benchmark: the client's CPU for one Redis command and one five-command transaction.

A real `redis-server` (in a temp folder, on a free port); the client made by
`squadd.cluster.connection.connect` (commands packed by hiredis) against redis-py's own
connection class with the same settings (the peer),
on uvloop as `squadd serve` runs. 8 tasks at once send `--commands` EXPIREs in all, then
`--commands / 3` transactions of SET, RPUSH, EXPIRE, XACK, XDEL (the shape of the request
server's answer); the rounds alternate the two clients. CPU is this process's (user + system),
so the server's is not in it.

Prints, as its last line:
    redis_command squadd_command_us=… redis_py_command_us=… command_ratio=…
        squadd_transaction_us=… redis_py_transaction_us=… transaction_ratio=…
(medians over the rounds; a ratio is squadd's over redis-py's, in the same round.)

    .venv/bin/python scripts/bench/redis_command.py [--commands 12000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import uvloop
from redis.asyncio.connection import Connection

from scripts.bench._common import cpu_s
from squadd.cluster.connection import connect
from tests.support.redis_server import RedisServer

TASKS = 8


async def one_round(url: str, *, stock: bool, commands: int) -> tuple[float, float]:
    """(µs a command, µs a transaction) of CPU for one client."""
    client = connect(url)
    if stock:
        client.connection_pool.connection_class = Connection
    try:
        await client.set("k", "v")

        async def expires(n: int) -> None:
            for _ in range(n):
                await client.expire("k", 100)

        async def transactions(n: int) -> None:
            for _ in range(n):
                async with client.pipeline(transaction=True) as pipe:
                    pipe.set("a", "b", ex=10)
                    pipe.rpush("l", "x")
                    pipe.expire("l", 10)
                    pipe.xack("s", "g", "1-1")
                    pipe.xdel("s", "1-1")
                    await pipe.execute()

        each = commands // TASKS
        started = cpu_s()
        await asyncio.gather(*(expires(each) for _ in range(TASKS)))
        command_us = (cpu_s() - started) / (each * TASKS) * 1e6
        each_tx = max(1, commands // 3 // TASKS)
        started = cpu_s()
        await asyncio.gather(*(transactions(each_tx) for _ in range(TASKS)))
        transaction_us = (cpu_s() - started) / (each_tx * TASKS) * 1e6
        await client.delete("k", "a", "l")
        return command_us, transaction_us
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=12000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ours: list[tuple[float, float]] = []
    peer: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="squadd-bench-redis-") as root, \
            RedisServer(Path(root) / "redis") as server:
        for n in range(args.rounds):
            order = [(False, ours), (True, peer)]
            for stock, into in order if n % 2 == 0 else order[::-1]:
                into.append(uvloop.run(one_round(server.url, stock=stock,
                                                 commands=args.commands)))
            print(f"round {n}: squadd {ours[-1][0]:.1f} / {ours[-1][1]:.1f} us, "
                  f"redis-py {peer[-1][0]:.1f} / {peer[-1][1]:.1f} us (command / transaction)",
                  flush=True)

    def median(values: list[float]) -> float:
        return statistics.median(values)

    command_ratio = median([a[0] / b[0] for a, b in zip(ours, peer, strict=True)])
    transaction_ratio = median([a[1] / b[1] for a, b in zip(ours, peer, strict=True)])
    print(f"redis_command squadd_command_us={median([o[0] for o in ours]):.1f} "
          f"redis_py_command_us={median([p[0] for p in peer]):.1f} "
          f"command_ratio={command_ratio:.3f} "
          f"squadd_transaction_us={median([o[1] for o in ours]):.1f} "
          f"redis_py_transaction_us={median([p[1] for p in peer]):.1f} "
          f"transaction_ratio={transaction_ratio:.3f}")


if __name__ == "__main__":
    main()
