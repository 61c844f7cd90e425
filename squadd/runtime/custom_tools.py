"""The custom tools a runtime's sessions get: those on disk now (`.squad/tools/`, the user's,
`tools.extra_dirs`), found again at each session start, their agent tools bound to route
through the runtime as `squad_route` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from squadd.config import Settings
from squadd.contracts.routes import SquadService
from squadd.runtime.events import EventBus
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolSet

if TYPE_CHECKING:
    from squadd.tools.discovery import ToolDiscoverer


class ToolOwner(SquadService, Protocol):
    """The runtime the tools belong to (its agent tools route through it): its built-in
    tools' names and its current settings (a reload may change them)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def tools(self) -> ToolSet: ...


class CustomTools:
    """The custom tools on disk now (`CachedTools`: a session start on the loop asks for them
    `cached()`, a thread when a file must be read)."""

    def __init__(self, owner: ToolOwner, layout: SquadLayout, bus: EventBus,
                 discoverer: ToolDiscoverer):
        self.owner = owner
        self.layout = layout
        self.bus = bus
        self.discoverer = discoverer

    def __call__(self) -> ToolSet:
        from squadd.tools.discovery import discover_tools

        return self._bound(discover_tools(
            self.layout, self.owner.settings, self.bus, builtin_names=self.owner.tools.names,
            discoverer=self.discoverer).toolset())

    def cached(self) -> ToolSet:
        """The same tools when no tool file must be read to find them, else `NotCached`."""
        from squadd.tools.discovery import known_tools

        return self._bound(known_tools(
            self.layout, self.owner.settings, self.discoverer, self.bus,
            builtin_names=self.owner.tools.names).toolset())

    def _bound(self, found: ToolSet) -> ToolSet:
        from squadd.tools.yaml import bind_agent_tools

        # Agent tools route through this runtime, as squad_route does.
        return ToolSet(bind_agent_tools(found, self.owner), found.unavailable)
