"""The daemon's runtime, fully wired: the provider from the settings, the invoker with the
project's variables and secrets and the approval broker, and the custom tools discovered at
each session start (`.squad/tools/`, the user's tools, `tools.extra_dirs`).
"""

from __future__ import annotations

from typing import Any

import anyio.from_thread

from squadd.config import Settings
from squadd.providers.factory import make_provider
from squadd.runtime.events import BaseEvent, EventBus
from squadd.runtime.runtime import SquadRuntime, retry_publisher
from squadd.state.layout import SquadLayout
from squadd.tools.base import Tool
from squadd.tools.custom.approvals import ApprovalBroker
from squadd.tools.custom.discovery import discover_tools
from squadd.tools.custom.variables import SquadVariables
from squadd.tools.invoke import ToolInvoker


class LoopSink:
    """Publishes to the bus from a worker thread by handing the event to the event loop
    (the bus is not thread-safe); on the loop's own thread it publishes directly."""

    def __init__(self, bus: EventBus):
        self.bus = bus

    def publish(self, event: BaseEvent) -> None:
        try:
            anyio.from_thread.run_sync(self.bus.publish, event)
        except RuntimeError:  # not in a worker thread: we are on the loop already
            self.bus.publish(event)


def build_runtime(layout: SquadLayout, settings: Settings) -> SquadRuntime:
    """The runtime `squadd serve` runs (not started: `async with` it)."""
    bus = EventBus(buffer=settings.daemon.event_buffer)
    provider = make_provider(settings.provider, on_retry=retry_publisher(bus), cwd=layout.repo)
    invoker = ToolInvoker(layout, settings, bus, variables=SquadVariables(layout, settings),
                          approvals=ApprovalBroker(settings, bus))
    sink = LoopSink(bus)
    runtime: SquadRuntime | None = None

    def custom_tools() -> list[Tool[Any]]:
        builtins = runtime.tools.names if runtime is not None else ()
        return list(discover_tools(layout, settings, sink, builtin_names=builtins).tools)

    runtime = SquadRuntime(layout, settings, provider, bus=bus, invoker=invoker,
                           extra_tools=custom_tools, owns_provider=True)
    return runtime
