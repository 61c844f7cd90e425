"""Inbox files with hostile names: a name that is not UTF-8 is rejected with a readable reason
(it used to stop every Scribe pass), and a name too long to take a `.reason` beside it is
shortened on the shelf."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from squadd.config import Settings
from squadd.contracts.events import BaseEvent, ScribeRejected
from squadd.scribe import merge_inbox
from squadd.state.inbox import MAX_REJECTED_NAME_BYTES, read_inbox_file, scan_inbox
from squadd.state.layout import SquadLayout

OLD = time.time() - 3600


class Sink:
    def __init__(self) -> None:
        self.events: list[BaseEvent] = []

    def publish(self, event: BaseEvent) -> None:
        self.events.append(event)


def _put(layout: SquadLayout, name: bytes, data: bytes) -> Path:
    layout.inbox_dir.mkdir(parents=True, exist_ok=True)
    path = layout.inbox_dir / os.fsdecode(name)
    path.write_bytes(data)
    os.utime(path, (OLD, OLD))
    return path


def test_a_name_that_is_not_utf8_is_refused_whatever_the_content(squad: SquadLayout) -> None:
    _put(squad, b"lead-caf\xe9.md", b"### A good entry\n\nbody\n")
    (found,) = scan_inbox(squad)
    outcome = read_inbox_file(found, max_bytes=1024)
    assert "file name is not valid UTF-8" in getattr(outcome, "reason", "")


def test_a_pass_with_a_badly_named_file_rejects_it_and_merges_the_rest(
        squad: SquadLayout) -> None:
    _put(squad, b"lead-caf\xe9.md", b"just text, no heading\n")
    _put(squad, b"lead-fine.md", b"### Fine\n\nmerged\n")
    sink = Sink()
    report = merge_inbox(squad, Settings(), sink)
    assert report.merged == 1 and "merged" in squad.decisions_md.read_text(encoding="utf-8")
    (rejected,) = report.rejected
    assert rejected.file == "lead-caf\ufffd.md"
    assert json.loads(report.model_dump_json())["rejected"][0]["file"] == "lead-caf\ufffd.md"
    shelf = squad.rejected_dir / os.fsdecode(b"lead-caf\xe9.md")
    assert shelf.is_file()
    reason = shelf.with_name(shelf.name + ".reason").read_text(encoding="utf-8")
    assert reason.startswith("lead-caf\ufffd.md: the file name is not valid UTF-8")
    assert [e.file for e in sink.events if isinstance(e, ScribeRejected)] == [rejected.file]
    assert merge_inbox(squad, Settings()).rejected == []  # the next pass is clean


def test_a_rejected_name_too_long_for_its_reason_file_is_shortened(squad: SquadLayout) -> None:
    long_name = b"lead-" + b"n" * 240 + b".md"  # 248 bytes: the name limit is 255
    _put(squad, long_name, b"\x00binary")
    _put(squad, long_name[:-3] + b"x.md", b"\x00binary too")
    report = merge_inbox(squad, Settings())
    assert len(report.rejected) == 2
    shelved = sorted(p.name for p in squad.rejected_dir.iterdir())
    names = [n for n in shelved if not n.endswith(".reason")]
    assert len(names) == 2 and len(set(names)) == 2
    for name in names:
        assert len(os.fsencode(name)) <= MAX_REJECTED_NAME_BYTES
        assert name.startswith("lead-nnnn") and name.endswith(".md")
        reason = (squad.rejected_dir / (name + ".reason")).read_text(encoding="utf-8")
        assert "NUL byte" in reason and reason.startswith("lead-" + "n" * 200)
    assert not any(squad.inbox_dir.glob("lead-*"))
