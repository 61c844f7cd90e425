"""Run one session's create, commit and land in a child process (killed at a chosen point).

Usage: python crash_driver.py SQUAD_DIR SESSION_ID [spare]. The kill point is chosen by the
parent through SQUADD_KILL_POINT. With `spare`, a spare worktree is made first and the session
takes it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from squadd.config import load_settings
from squadd.contracts.events import NullSink
from squadd.state.layout import SquadLayout
from squadd.workspaces import Workspaces


async def main(squad_dir: str, session_id: str, mode: str) -> None:
    layout = SquadLayout.at(Path(squad_dir))
    settings = load_settings(layout.root, overrides={"workspace": {
        "isolation": "worktree", "spares": 1 if mode == "spare" else 0}})
    spaces = Workspaces(layout, settings, NullSink())
    if mode == "spare":
        assert await spaces.refill_spares() == 1
    record = await spaces.open(session_id, "lead")
    assert record is not None
    (Path(record.path) / "app.txt").write_text("one\nTWO\nthree\n")
    (Path(record.path) / "added.txt").write_text("added\n")
    await spaces.close(record, title="crash test work")
    result = await spaces.land(session_id)
    assert result.ok, result.message


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
