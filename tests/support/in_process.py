"""The daemon's HTTP API in this process: the runtime `squadd serve` builds, its Starlette app,
and an httpx client whose transport calls the app directly (no socket, no subprocess).

    async with api_in_process(layout, model_url) as (client, context):
        assert (await client.get("/v1/health")).json()["ok"]

Lifecycle, signals and the socket are tested against a real process (`DaemonProcess`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from squadd.config import Settings
from squadd.daemon.app import create_app
from squadd.daemon.requests import DaemonContext
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import SquadLayout


def settings_for(model_url: str) -> Settings:
    """As `squadd serve --provider openai --base-url URL --model test-model`, no retries."""
    return Settings.model_validate({"provider": {
        "kind": "openai", "base_url": model_url, "model": "test-model", "max_attempts": 1}})


@asynccontextmanager
async def api_in_process(layout: SquadLayout, model_url: str
                         ) -> AsyncIterator[tuple[httpx.AsyncClient, DaemonContext]]:
    stops: list[str] = []
    runtime = SquadRuntime.from_settings(layout, settings_for(model_url))
    async with runtime:
        context = DaemonContext(runtime=runtime, request_stop=stops.append)
        transport = httpx.ASGITransport(app=create_app(context))
        async with httpx.AsyncClient(transport=transport, base_url="http://squadd",
                                     timeout=30) as client:
            yield client, context


