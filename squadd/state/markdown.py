"""Markdown lines as the team's memory files use them: ATX headings, ``` fences, and moving the
headings of a body below the level of the entry that holds it."""

from __future__ import annotations

import re


def heading_level(line: str) -> int:
    """1-6 for an ATX heading line (`### x`), else 0."""
    match = re.match(r"(#{1,6})[ \t]", line)
    return len(match.group(1)) if match else 0


def is_fence(line: str) -> bool:
    """A line that opens or closes a ``` code fence."""
    return line.lstrip().startswith("```")


def nest_body(text: str, level: int) -> str:
    """`text` made safe to sit under a heading of `level`: its headings outside fences move down
    so that the shallowest is one level deeper (at most 6), and a fence left open is closed."""
    lines = text.split("\n")
    fenced: list[bool] = []
    in_fence = False
    for line in lines:
        if is_fence(line):
            in_fence = not in_fence
            fenced.append(True)
        else:
            fenced.append(in_fence)
    levels = [heading_level(line) for line, f in zip(lines, fenced, strict=True) if not f]
    shallowest = min((n for n in levels if n), default=0)
    shift = max(0, level + 1 - shallowest) if shallowest else 0
    if shift:
        lines = ["#" * min(6, heading_level(line) + shift) + line.lstrip("#")
                 if not f and heading_level(line) else line
                 for line, f in zip(lines, fenced, strict=True)]
    if in_fence:
        lines.append("```")
    return "\n".join(lines)
