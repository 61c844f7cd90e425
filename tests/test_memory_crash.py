"""SIGKILL at each step of compacting histories and archiving decisions, in a real Scribe process:
the crash point is chosen by `SQUADD_CRASH_AT`, never by a sleep. The next pass finishes the
step, and every entry of every shape is then exactly once, whole, in the live file or the
archive, with the newest live."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys

import pytest

from squadd.config import ScribeSettings, Settings
from squadd.scribe import merge_inbox
from squadd.state.crashpoint import ENV
from squadd.state.decisions import parse_entries
from squadd.state.layout import SquadLayout
from squadd.state.learnings import learnings
from squadd.state.scaffold import templates_dir
from squadd.state.team import add_agent
from tests._helpers import REPO_ROOT
from tests.state.memory_fixtures import (
    BULLETS_OLDEST,
    DECISIONS_H2,
    DECISIONS_H3,
    grown_history,
)

TODAY = dt.date(2026, 6, 30)
SETTINGS = Settings(scribe=ScribeSettings(archive_soft_bytes=4096, archive_hard_bytes=10**9,
                                          history_compact_bytes=4096))
CHILD = """
import datetime as dt, sys
from pathlib import Path
from squadd.config import ScribeSettings, Settings
from squadd.scribe import merge_inbox
from squadd.state.layout import SquadLayout
settings = Settings(scribe=ScribeSettings(archive_soft_bytes=4096, archive_hard_bytes=10**9,
                                          history_compact_bytes=4096))
merge_inbox(SquadLayout.at(Path(sys.argv[1])), settings, today=dt.date(2026, 6, 30))
"""

POINTS = [
    "intent-saved-history-archive.md", "append-torn-history-archive.md", "history-archived",
    "history-rewritten", "history-archived:2", "intent-saved-decisions-archive.md",
    "append-torn-decisions-archive.md", "decisions-archived", "decisions-rewritten",
]


def recent(n: int) -> str:
    return (f"### 2026-06-{n:02}: Recent choice {n}\n\n**By:** Tern\n\n"
            f"{'Recent reasons. ' * 20}\n\n#### Files Updated\n\n- src/recent_{n}.c\n")


def team(layout: SquadLayout) -> tuple[dict[str, list[str]], list[str]]:
    """Histories and decisions in every shape, all over their limits; what each holds."""
    for name in ("tern", "wren"):
        add_agent(layout, name, "Engineer", templates=templates_dir())
    histories = {
        "tern": grown_history(40, blocks=True, newest_first=True),
        "wren": BULLETS_OLDEST + "".join(
            f"- **[process]** 2026-0{1 + i // 28}-{1 + i % 28:02}: Step {i:03} of the "
            f"rollout checklist, checked twice.\n" for i in range(60)),
    }
    for name, text in histories.items():
        layout.history(name).write_text(text, encoding="utf-8")
    decisions = (DECISIONS_H3 + "\n" + DECISIONS_H2.split("\n", 2)[2] + "\n"
                 + "\n".join(recent(n) for n in range(1, 12)))
    layout.decisions_md.write_text(decisions, encoding="utf-8")
    return ({name: learnings(text) for name, text in histories.items()},
            [e.text.rstrip("\n") for e in parse_entries(decisions).entries
             if e.kind == "decision"])


def run_until_killed(layout: SquadLayout, point: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), ENV: point}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(layout.root)], env=env,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode


def both(path_live: str, path_archive: str, layout: SquadLayout) -> str:
    archive = layout.root / path_archive
    return ((layout.root / path_live).read_text(encoding="utf-8") + "\n"
            + (archive.read_text(encoding="utf-8") if archive.exists() else ""))


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS)
def test_a_kill_at_each_step_loses_splits_and_doubles_nothing(
    squad: SquadLayout, point: str,
) -> None:
    entries, decisions = team(squad)

    assert run_until_killed(squad, point) == -signal.SIGKILL  # it died exactly there
    journal = squad.run_dir / "journal"
    assert journal.is_dir() and any(journal.iterdir())  # with a step half done

    report = merge_inbox(squad, SETTINGS, today=TODAY)

    assert report.recovered and "finished an interrupted" in " ".join(report.recovered)
    for name, texts in entries.items():
        combined = both(f"agents/{name}/history.md", f"agents/{name}/history-archive.md", squad)
        for text in texts:
            assert combined.count(text) == 1, (name, text[:60])
    assert learnings(squad.history("tern").read_text())[0] == entries["tern"][0]
    assert learnings(squad.history("wren").read_text())[-1] == entries["wren"][-1]
    combined = both("decisions.md", "decisions-archive.md", squad)
    for text in decisions:
        assert combined.count(text) == 1, text[:60]
    live = [e.title for e in parse_entries(squad.decisions_md.read_text()).entries]
    assert "Recent choice 11" in live
    assert squad.decisions_archive.exists() and squad.history_archive("tern").exists()
    assert list(journal.iterdir()) == []
