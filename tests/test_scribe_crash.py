"""kill -9 at random instants: a Scribe pass in a real subprocess, killed mid-merge and mid-archive,
then run again. Every decision ends up exactly once and no inbox file is lost."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from squadd.config import ScribeSettings, Settings, load_settings
from squadd.scribe import merge_inbox
from squadd.state.decisions import format_entry, parse_decisions
from squadd.state.intent import intent_file
from squadd.state.layout import SquadLayout
from tests._helpers import REPO_ROOT

KILLS = 30
TODAY = dt.date(2025, 6, 30)

CHILD = """
import datetime as dt, sys, time
from pathlib import Path
from squadd.config import load_settings
from squadd.scribe import merge_inbox
from squadd.state.layout import SquadLayout
layout = SquadLayout.at(Path(sys.argv[1]))
settings = load_settings(layout.root)
print(time.monotonic(), "ready", flush=True)
merge_inbox(layout, settings, batch_files=int(sys.argv[2]), today=dt.date(2025, 6, 30))
print("done", flush=True)
"""


def run_and_kill(layout: SquadLayout, delay: float, batch_files: int) -> bool:
    """Start a Scribe pass in a subprocess and SIGKILL it `delay` s in; True if it was killed."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(layout.root), str(batch_files)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.endswith(" ready\n"), proc.stderr.read() if proc.stderr else line
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        return proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def run_to_the_end(layout: SquadLayout) -> float:
    """Run a pass in a subprocess to its end; return the seconds from "ready" to "done"."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-c", CHILD + "print(time.monotonic())",
                           str(layout.root), "4"],
                          capture_output=True, text=True, env=env, timeout=60, check=True)
    words = proc.stdout.split()  # "<t0> ready", "done", "<t1>"
    return float(words[-1]) - float(words[0])


def inbox_left(layout: SquadLayout) -> list[str]:
    return [p.name for p in layout.inbox_dir.iterdir() if not p.name.startswith(".")]


def put(layout: SquadLayout, name: str, text: str, mtime: float) -> None:
    path = layout.inbox_dir / name
    path.write_text(text, encoding="utf-8")
    os.utime(path, (mtime, mtime))


@pytest.mark.slow
def test_merging_five_hundred_files_killed_at_thirty_random_points_loses_and_doubles_nothing(
    squad: SquadLayout,
) -> None:
    rng = random.Random(5)
    start = time.time() - 3600
    expected = []
    for i in range(500):
        title = f"Decision {i:03}"
        expected.append(title)
        body = f"Decision {i} body. " * rng.randint(1, 40)
        text = format_entry(title=title, body=body, agent="lead", category="general",
                            date=TODAY)
        if i % 50 == 7:  # a few files also repeat an earlier decision
            text += "\n" + format_entry(title="Decision 000", body="Decision 0 body. ",
                                        agent="lead", category="general", date=TODAY)
        put(squad, f"lead-d{i:03}.md", text, start + i / 1000)
    # Decision 000's body must match the repeats exactly for them to be duplicates.
    put(squad, "lead-d000.md", format_entry(title="Decision 000", body="Decision 0 body. ",
                                            agent="lead", category="general", date=TODAY),
        start)

    # Keep the archive gate out of this test: decisions.md alone must hold every decision.
    squad.config_toml.write_text("[scribe]\narchive_soft_bytes = 1000000000\n"
                                 "archive_hard_bytes = 1000000000\n")
    killed_mid_work = 0
    for _ in range(KILLS):
        before = len(inbox_left(squad))
        if run_and_kill(squad, rng.uniform(0.0, 0.015), batch_files=5) and before and \
                len(inbox_left(squad)) > 0:
            killed_mid_work += 1

    merge_inbox(squad, load_settings(squad.root), today=TODAY)

    titles = Counter(e.title for e in parse_decisions(squad.decisions_md).entries)
    assert [t for t in expected if titles[t] != 1] == []
    assert sum(titles[t] for t in expected) == 500
    assert inbox_left(squad) == []
    assert not squad.rejected_dir.exists() or list(squad.rejected_dir.iterdir()) == []
    assert killed_mid_work >= 20, f"only {killed_mid_work} kills landed while work was left"
    assert [p.name for p in squad.root.glob(".*.tmp")] == []
    assert [p.name for p in (squad.run_dir / "journal").iterdir()] == []


@pytest.mark.slow
def test_archiving_killed_at_thirty_random_points_keeps_every_entry_exactly_once(
    squad: SquadLayout,
) -> None:
    rng = random.Random(7)
    start = time.time() - 3600
    no_archive = Settings(scribe=ScribeSettings(archive_soft_bytes=10**12,
                                                archive_hard_bytes=10**12))
    expected: list[str] = []
    mid_archive = 0
    window = 0.0
    for round_ in range(KILLS + 1):
        for i in range(20):
            title = f"R{round_:02} decision {i:02}"
            expected.append(title)
            day = TODAY - dt.timedelta(days=40 + rng.randint(0, 400))
            body = f"{title} reasons. " * rng.randint(40, 80)
            put(squad, f"lead-{round_:02}-{i:02}.md",
                format_entry(title=title, body=body, agent="lead", category="general",
                             date=day),
                start + round_ + i / 100)
        # Merge without archiving, so that the killed pass has only the archive step to do.
        merge_inbox(squad, no_archive, today=TODAY)
        if round_ == 0:
            window = run_to_the_end(squad)  # how long an archive pass takes here
            continue
        run_and_kill(squad, rng.uniform(0.0, window), batch_files=4)
        if intent_file(squad, squad.decisions_archive).exists():
            mid_archive += 1

    merge_inbox(squad, load_settings(squad.root), today=TODAY)

    current = Counter(e.title for e in parse_decisions(squad.decisions_md).entries)
    archived = Counter(e.title for e in parse_decisions(squad.decisions_archive).entries)
    union = current + archived
    assert [t for t in expected if union[t] != 1] == []
    assert sum(archived.values()) >= 20 * KILLS
    assert mid_archive >= 5, f"only {mid_archive} kills landed inside the archive step"
