"""Which settings a running daemon applies at once when its files change, and which wait for a
restart: the live sections, and the comparison of two loaded `Settings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squadd.config.models import Settings

LIVE_SECTIONS = ("workspace", "tools", "scribe", "pool", "budget", "pricing")
"""The sections a running daemon applies when its settings files change (`squadd reload`,
SIGHUP, or the file watcher); a change anywhere else waits for a restart."""


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and dotted.count(".") < 2:
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def changed_settings(running: Settings, loaded: Settings) -> list[str]:
    """The dotted keys (`provider.kind`, `agents.lead.model`) whose values differ, sorted."""
    old, new = _flatten(running.model_dump()), _flatten(loaded.model_dump())
    return sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))


def is_live(key: str) -> bool:
    """Whether a change of the dotted `key` applies without a restart (`LIVE_SECTIONS`)."""
    return key.split(".", 1)[0] in LIVE_SECTIONS


def with_live_sections(running: Settings, loaded: Settings) -> Settings:
    """`running` with its live sections (`LIVE_SECTIONS`) taken from `loaded`: the settings a
    daemon runs with after a reload whose other changes wait for a restart."""
    return running.model_copy(update={name: getattr(loaded, name) for name in LIVE_SECTIONS})
