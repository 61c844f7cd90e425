"""Fixtures for runtime tests: a real squad dir with three agents (lead, fenster, hockney)."""

from __future__ import annotations

from pathlib import Path

import pytest

from squadd.state.layout import SquadLayout
from tests.runtime.scripted import make_squad


@pytest.fixture
def layout(tmp_path: Path) -> SquadLayout:
    return make_squad(tmp_path / "repo")


@pytest.fixture
def squad(layout: SquadLayout) -> SquadLayout:
    """The runtime tests' squad (`layout`), in place of the root conftest's bare one."""
    return layout
