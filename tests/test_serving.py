"""The serving loop: what the daemon, a worker and the benchmarks run on."""

from __future__ import annotations

import asyncio

import uvloop

from squadd.serving import run_serving


def test_run_serving_runs_the_function_on_uvloop_and_returns_its_result() -> None:
    async def loop_of(tag: str) -> tuple[str, type]:
        await asyncio.sleep(0)
        return tag, type(asyncio.get_running_loop())

    assert run_serving(loop_of, "x") == ("x", uvloop.Loop)
