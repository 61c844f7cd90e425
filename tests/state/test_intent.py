"""Write-ahead append intents: a torn append is finished, a whole one is never repeated."""

from __future__ import annotations

import os

from squadd.state.intent import (
    append_with_intent,
    clear_intent,
    finish_append,
    intent_file,
    pending_intent,
)
from squadd.state.layout import SquadLayout


def test_an_intent_is_saved_before_the_append_and_cleared_after(squad: SquadLayout) -> None:
    target = squad.root / "log.md"
    target.write_bytes(b"start\n")

    intent = append_with_intent(squad, target, b"more\n", {"k": [1]})

    assert target.read_bytes() == b"start\nmore\n"
    loaded = pending_intent(squad, target)
    assert loaded is not None and loaded.start == 6 and loaded.meta == {"k": [1]}
    clear_intent(intent)
    assert pending_intent(squad, target) is None
    assert not intent_file(squad, target).exists()


def test_a_torn_append_is_finished_exactly(squad: SquadLayout) -> None:
    target = squad.root / "log.md"
    target.write_bytes(b"start\n")
    append_with_intent(squad, target, b"0123456789\n")
    os.truncate(target, 6 + 4)  # the kill landed after four bytes

    intent = pending_intent(squad, target)
    assert intent is not None
    assert finish_append(intent) == "finished"
    assert target.read_bytes() == b"start\n0123456789\n"
    assert finish_append(intent) == "complete"
    assert target.read_bytes() == b"start\n0123456789\n"


def test_an_append_that_never_started_is_made_whole(squad: SquadLayout) -> None:
    target = squad.root / "new.md"
    append_with_intent(squad, target, b"all of it\n")
    target.unlink()

    intent = pending_intent(squad, target)
    assert intent is not None and finish_append(intent) == "finished"
    assert target.read_bytes() == b"all of it\n"


def test_an_intent_for_a_file_that_changed_since_is_stale_and_writes_nothing(
    squad: SquadLayout,
) -> None:
    target = squad.root / "log.md"
    target.write_bytes(b"start\n")
    append_with_intent(squad, target, b"appended\n")
    target.write_bytes(b"start\nsomething else entirely\n")

    intent = pending_intent(squad, target)
    assert intent is not None and finish_append(intent) == "stale"
    assert target.read_bytes() == b"start\nsomething else entirely\n"


def test_a_damaged_intent_file_is_discarded(squad: SquadLayout) -> None:
    target = squad.root / "log.md"
    append_with_intent(squad, target, b"x\n")
    path = intent_file(squad, target)
    path.write_bytes(path.read_bytes()[:-1] + b"y")

    assert pending_intent(squad, target) is None
    assert not path.exists()


def test_an_intent_without_its_offset_is_discarded_not_raised(squad: SquadLayout) -> None:
    import hashlib
    import json

    target = squad.root / "log.md"
    path = intent_file(squad, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"entry\n"
    header = {"magic": "squadd-append-intent-1", "length": len(data),
              "sha256": hashlib.sha256(data).hexdigest()}  # hand-edited: no start, no inode
    path.write_bytes(json.dumps(header).encode() + b"\n" + data)

    assert pending_intent(squad, target) is None
    assert not path.exists()


def test_an_intent_is_one_frame_of_the_durability_logs_format(squad: SquadLayout) -> None:
    from squadd.state.journal.format import decode

    target = squad.root / "log.md"
    target.write_bytes(b"start\n")
    append_with_intent(squad, target, b"more\n", {"k": 1})

    [frame] = list(decode(intent_file(squad, target).read_bytes()))
    assert (frame.where, frame.start, frame.data) == ("log.md", 6, b"more\n")
    assert frame.extra["meta"] == {"k": 1} and frame.extra["inode"] == target.stat().st_ino


def test_an_intent_an_older_version_left_is_still_finished(squad: SquadLayout) -> None:
    import hashlib
    import json

    target = squad.root / "log.md"
    target.write_bytes(b"start\nmo")  # the kill landed two bytes into the append
    data = b"more\n"
    header = {"magic": "squadd-append-intent-1", "target": "log.md", "start": 6,
              "inode": target.stat().st_ino, "length": len(data),
              "sha256": hashlib.sha256(data).hexdigest(), "meta": {"k": 2}}
    path = intent_file(squad, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(json.dumps(header).encode() + b"\n" + data)

    intent = pending_intent(squad, target)
    assert intent is not None and intent.meta == {"k": 2}
    assert finish_append(intent) == "finished"
    assert target.read_bytes() == b"start\nmore\n"


def test_an_intent_naming_another_file_is_discarded(squad: SquadLayout) -> None:
    one, other = squad.root / "one.md", squad.root / "other.md"
    append_with_intent(squad, one, b"x\n")
    intent_file(squad, other).write_bytes(intent_file(squad, one).read_bytes())

    assert pending_intent(squad, other) is None
    assert not other.exists()
