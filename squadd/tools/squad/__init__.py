"""The five squad tools: route, decide, memory, status and skill.

`squad_tools` builds the ones that need only the squad dir; the runtime adds `squad_route` and
`squad_status`, which need the session pool.
"""

from __future__ import annotations

from typing import Any

from squadd.config import Settings
from squadd.state.layout import SquadLayout
from squadd.tools.base import Tool

SQUAD_TOOL_NAMES = ("squad_route", "squad_decide", "squad_memory", "squad_status", "squad_skill",
                    "squad_ask")
"""The five squad tools: a custom tool of the same name is shadowed wherever tools are listed."""


def file_tools(layout: SquadLayout, settings: Settings) -> list[Tool[Any]]:
    """`squad_decide`, `squad_memory` and `squad_skill` for this squad dir."""
    from squadd.tools.squad.decide import SquadDecide
    from squadd.tools.squad.memory import SquadMemory
    from squadd.tools.squad.skill import SquadSkill

    return [SquadDecide(layout, settings), SquadMemory(layout, settings),
            SquadSkill(layout, settings)]
