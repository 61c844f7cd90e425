"""kill -9 at chosen points: a Scribe pass in a real subprocess, killed mid-merge and mid-archive,
then run again. Every decision ends up exactly once and no inbox file is lost.

The kill points are chosen by the test, not by a timer: the child counts its durable file steps
(each `os.write`, `os.fsync`, `os.replace` and `os.unlink`) and SIGKILLs itself just before step N
(halfway through the bytes, when step N is a write, so appends are torn too). The same N kills at
the same step on any machine, however busy.
"""

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
MERGE_STEPS = 40
"""Kill points of the merge test are drawn from the first this many durable steps of a pass,
so that each killed pass has merged only a few batches and work is left for the next kills."""
TODAY = dt.date(2025, 6, 30)

CHILD = """
import datetime as dt, os, signal, sys, threading
from pathlib import Path
from squadd.config import load_settings
from squadd.scribe import merge_inbox
from squadd.state.layout import SquadLayout
layout = SquadLayout.at(Path(sys.argv[1]))
settings = load_settings(layout.root)
kill_at = int(sys.argv[3])
steps = 0
lock = threading.Lock()

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def step():
    global steps
    with lock:
        steps += 1
        return steps == kill_at

def counted(real):
    def wrapper(*args, **kwargs):
        if step():
            die()
        return real(*args, **kwargs)
    return wrapper

real_write = os.write
def write(fd, data):
    if step():
        half = len(data) // 2
        if half:
            real_write(fd, bytes(data)[:half])
        die()
    return real_write(fd, data)

os.write = write
os.fsync = counted(os.fsync)
os.replace = counted(os.replace)
os.unlink = counted(os.unlink)
merge_inbox(layout, settings, batch_files=int(sys.argv[2]), today=dt.date(2025, 6, 30))
print("done", steps, flush=True)
"""
"""argv: squad dir, batch size, the durable step to be killed before (0: never)."""


def run_child(layout: SquadLayout, batch_files: int, kill_at: int) -> tuple[bool, int]:
    """Run a Scribe pass in a subprocess, killed before durable step `kill_at` (0: never).

    Returns (killed, steps): whether SIGKILL ended it, and the steps a whole pass made.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(layout.root), str(batch_files),
                           str(kill_at)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    if done.returncode == -signal.SIGKILL:
        return True, 0
    assert done.returncode == 0, done.stderr
    words = done.stdout.splitlines()[-1].split()  # log lines may come before it
    assert words[0] == "done", done.stdout
    return False, int(words[1])


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
        killed, _ = run_child(squad, batch_files=5, kill_at=rng.randint(1, MERGE_STEPS))
        if killed and before and len(inbox_left(squad)) > 0:
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
    steps = 0
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
            killed, steps = run_child(squad, batch_files=4, kill_at=0)  # a whole archive pass
            assert not killed and steps > 0
            continue
        killed, _ = run_child(squad, batch_files=4, kill_at=rng.randint(1, steps))
        if killed and intent_file(squad, squad.decisions_archive).exists():
            mid_archive += 1

    merge_inbox(squad, load_settings(squad.root), today=TODAY)

    current = Counter(e.title for e in parse_decisions(squad.decisions_md).entries)
    archived = Counter(e.title for e in parse_decisions(squad.decisions_archive).entries)
    union = current + archived
    assert [t for t in expected if union[t] != 1] == []
    assert sum(archived.values()) >= 20 * KILLS
    assert mid_archive >= 10, f"only {mid_archive} kills landed inside the archive step"
