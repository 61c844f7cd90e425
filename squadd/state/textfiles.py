"""Which of the team's memory files cannot be read as text: the files the Scribe and the prompt
read (decisions, inbox, team, routing, charters, histories), each checked for UTF-8.

The Scribe skips such a file and goes on with the others; `squadd doctor` names each one with
the offset of its first bad byte, so a person can fix it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from squadd.state.charters import roster
from squadd.state.layout import SquadLayout

MAX_CHECKED_BYTES = 8 * 1024 * 1024
"""Bytes read of each file: enough for any memory file; bounds what a huge file costs."""


@dataclass(frozen=True)
class BadTextFile:
    path: str
    """Relative to the squad dir."""
    reason: str


def memory_files(layout: SquadLayout) -> Iterator[Path]:
    """The memory files that exist, in a stable order."""
    yield from (layout.team_md, layout.routing_md, layout.decisions_md, layout.decisions_archive)
    for member in roster(layout):
        yield from (layout.charter(member.name), layout.history(member.name),
                    layout.history_archive(member.name))
    try:
        inbox = sorted(layout.inbox_dir.iterdir())
    except FileNotFoundError:
        inbox = []
    yield from (path for path in inbox if not path.name.startswith("."))


def not_utf8_reason(data: bytes) -> str:
    """Why `data` is not UTF-8 text ("" when it is)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start >= len(data) - 3 and len(data) == MAX_CHECKED_BYTES:
            return ""  # cut inside a character by the read limit
        return f"not valid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}"
    return ""


def bad_text_files(layout: SquadLayout) -> list[BadTextFile]:
    """Every memory file that is not UTF-8, with where its first bad byte is."""
    bad: list[BadTextFile] = []
    for path in memory_files(layout):
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_CHECKED_BYTES)
        except (FileNotFoundError, IsADirectoryError):
            continue
        except OSError as exc:
            bad.append(BadTextFile(str(path.relative_to(layout.root)),
                                   f"unreadable: {exc.strerror}"))
            continue
        reason = not_utf8_reason(data)
        if reason:
            bad.append(BadTextFile(str(path.relative_to(layout.root)), reason))
    return bad
