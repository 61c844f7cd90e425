"""Output limits: cut a tool's text to what the model may see, and spill the whole to a file.

The model sees the head of the output (at most `max_lines` lines and `max_bytes` bytes) and a
note naming `.squad/tool-output/{session}/{call}.txt`, where the full output was written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from squadd.fsio import atomic_write
from squadd.state.layout import SquadLayout


@dataclass(frozen=True)
class Cut:
    """The head of some text and how much of it was left out."""

    text: str
    truncated: bool
    total_lines: int
    total_bytes: int
    kept_lines: int
    kept_bytes: int


def cut(text: str, *, max_lines: int, max_bytes: int) -> Cut:
    """Keep the first lines of `text` within both limits, never splitting a UTF-8 character."""
    data = text.encode("utf-8")
    total_bytes = len(data)
    total_lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if total_bytes <= max_bytes and total_lines <= max_lines:
        return Cut(text, False, total_lines, total_bytes, total_lines, total_bytes)
    end = len(data)
    # Stop after max_lines newlines.
    position = -1
    for _ in range(max_lines):
        position = data.find(b"\n", position + 1)
        if position < 0:
            break
    if position >= 0:
        end = position + 1
    end = min(end, max_bytes)
    head = data[:end].decode("utf-8", errors="ignore")
    kept_bytes = len(head.encode("utf-8"))
    kept_lines = head.count("\n") + (0 if head.endswith("\n") or not head else 1)
    return Cut(head, True, total_lines, total_bytes, kept_lines, kept_bytes)


def spill(layout: SquadLayout, session_id: str, call_id: str, text: str) -> Path:
    """Write the full output of a call to its tool-output file and return the path."""
    path = layout.tool_output(session_id, call_id)
    atomic_write(path, text)
    return path


def truncation_note(piece: Cut, path: Path, layout: SquadLayout) -> str:
    shown = path.relative_to(layout.repo) if layout.repo in path.parents else path
    return (
        f"\n[output truncated: showing {piece.kept_lines} of {piece.total_lines} lines, "
        f"{piece.kept_bytes} of {piece.total_bytes} bytes. The full output is in {shown}; "
        "read it with a file tool or narrow the command.]"
    )

