"""Argument names of the shipped Squad SDK, accepted beside PRD 2's in each squad tool's model.

Each tool has ONE pydantic model whose fields carry PRD 2's names; the SDK's names are
validation aliases (`AliasChoices`) and its extra fields are hidden from the JSON schema
(`SkipJsonSchema`). Models see one clear shape (PRD 2's), while prompts and clients written for
Squad's own tools work unchanged. Giving both names of one field is refused, as is anything
unknown. The aliases:

| tool | PRD 2 | Squad SDK |
|---|---|---|
| squad_decide | title, agentName | summary, author; references (list, shown in the body) |
| squad_memory | agentName, learning | agent, content; section (learnings, updates, sessions) |
| squad_skill | action | operation; confidence (low, medium, high; written to front matter) |
| squad_status | (filters) | status (a session state, or `completed`), verbose |
| squad_route | priority normal, urgent | low and normal -> normal; high and critical -> urgent |
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices

from squadd.contracts.names import is_safe_name, safe_name
from squadd.errors import StateError
from squadd.state.charters import team_members
from squadd.state.layout import SquadLayout
from squadd.state.members import folder_for, plain_words


def alias(name: str, sdk_name: str) -> AliasChoices:
    """Accept the field as `name` (PRD 2, shown in the schema) or `sdk_name` (Squad SDK)."""
    return AliasChoices(name, sdk_name)


def refuse_both(data: Any, *pairs: tuple[str, str]) -> Any:
    """For a `model_validator(mode="before")`: a clear error when both names of a field are
    given (pydantic alone would call the second one an unknown input)."""
    if isinstance(data, dict):
        for name, sdk_name in pairs:
            if name in data and sdk_name in data:
                raise ValueError(f"give {name!r} or its Squad SDK name {sdk_name!r}, not both")
    return data


def agent_folder(layout: SquadLayout, name: str) -> tuple[str, str]:
    """The agent folder and team.md display name for `name` as a caller wrote it (`EECOM`,
    `Fenster`, `eecom`); blocking (reads team.md). `StateError` when no folder can be made."""
    members = team_members(layout)
    wanted = plain_words(name)
    for member in members.values():
        if wanted in (plain_words(member.display_name), plain_words(member.folder)):
            return member.folder, member.display_name
    lowered = name.strip().lower()
    folder = lowered if is_safe_name(lowered) else folder_for(name)
    if folder is None:
        safe_name(name)  # raises, showing the naming rule
        raise StateError(f"{name!r} names no agent: use the agent's name as team.md lists it")
    listed = members.get(folder)
    return folder, listed.display_name if listed else folder
