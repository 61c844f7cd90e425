"""Squad's casting state: `casting/registry.json` (every agent cast, by lower-case name) and
`casting/history.json` (the casts made), kept in the shape Squad's CLI writes when
`squadd agent add` adds an agent to a team that has them.

squadd never creates these files: a team without them (a squadd-made one) has no casting.
Each file is rewritten under its lock and atomically, in its own line ending, BOM and final
newline, with only the new agent's lines added.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from squadd.errors import StateError
from squadd.fsio import atomic_write, file_lock
from squadd.state.layout import SquadLayout
from squadd.state.textstyle import plain, restyle

UNIVERSE = "squadd"
"""The casting universe of an agent `squadd agent add` made (Squad's presets write
`preset:{name}`)."""


def squad_timestamp(now: dt.datetime) -> str:
    """`now` as JavaScript's `Date.toISOString()` writes it: `2026-03-01T09:30:00.000Z`."""
    return now.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _dump(data: Any) -> str:
    """JSON as Squad writes it: `JSON.stringify(data, null, 2)` and a newline."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _load(path: Path, raw: str) -> dict[str, Any]:
    try:
        data = json.loads(plain(raw))
    except json.JSONDecodeError as exc:
        raise StateError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}): "
                         "fix it or restore it from git, then add the agent again") from None
    if not isinstance(data, dict):
        raise StateError(f"{path} holds {type(data).__name__}, not an object: restore it from git")
    return data


def _update(layout: SquadLayout, path: Path, change: Callable[[dict[str, Any]], bool]) -> bool:
    """Apply `change` (whether it changed the data) to the JSON file at `path`, under its lock,
    keeping its bytes; False when the file is missing or nothing changed."""
    with file_lock(layout.lock_for(path)):
        try:
            raw = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return False
        except UnicodeDecodeError:
            raise StateError(f"{path} is not UTF-8: re-save it as UTF-8") from None
        data = _load(path, raw)
        if not change(data):
            return False
        atomic_write(path, restyle(raw, _dump(data)))
        return True


def register_agent(layout: SquadLayout, name: str, display: str,
                   now: dt.datetime | None = None) -> list[Path]:
    """Add agent `name` (shown as `display`) to the registry and a cast snapshot to the history,
    where the team has them; return the files changed."""
    stamp = squad_timestamp(now or dt.datetime.now(dt.UTC))
    key = name.lower()
    changed: list[Path] = []

    def add_to_registry(data: dict[str, Any]) -> bool:
        agents = data.setdefault("agents", {})
        if not isinstance(agents, dict):
            raise StateError(f"{layout.casting_registry}: 'agents' is not an object")
        if key in agents:
            return False
        agents[key] = {"created_at": stamp, "persistent_name": display, "universe": UNIVERSE,
                       "status": "active"}
        return True

    def add_to_history(data: dict[str, Any]) -> bool:
        snapshots = data.setdefault("assignment_cast_snapshots", {})
        usage = data.setdefault("universe_usage_history", [])
        if not isinstance(snapshots, dict) or not isinstance(usage, list):
            raise StateError(f"{layout.casting_history}: 'assignment_cast_snapshots' must be an "
                             "object and 'universe_usage_history' a list")
        snapshots[f"squadd-agent-add-{stamp}"] = {"created_at": stamp, "agents": [key],
                                                  "universe": UNIVERSE}
        usage.append({"universe": UNIVERSE, "used_at": stamp})
        return True

    if _update(layout, layout.casting_registry, add_to_registry):
        changed.append(layout.casting_registry)
        if _update(layout, layout.casting_history, add_to_history):
            changed.append(layout.casting_history)
    return changed
