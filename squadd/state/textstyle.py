"""How a memory file is written byte for byte: its BOM, its dominant line ending, its stray `\\r`,
trailing whitespace and final newline, and `restyle`, which gives a rewritten text back those
bytes everywhere but on the lines meant to change.

Writers work on `plain` text (no BOM, `\\r\\n` read as `\\n`; a stray `\\r` stays where it is)
and hand the result to `restyle` with the file's text as it was read.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

BOM = "\ufeff"
_LINE_RE = re.compile(r"[^\n]*\n|[^\n]+$")


@dataclass(frozen=True)
class TextStyle:
    bom: bool
    eol: str
    """The dominant line ending: "\\r\\n" when most lines end so, else "\\n"."""


def detect(text: str) -> TextStyle:
    """The style of `text` as read from disk (a file with no line ending yet is LF)."""
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    return TextStyle(bom=text.startswith(BOM), eol="\r\n" if crlf > lf else "\n")


def file_style(path: Path, default: TextStyle | None = None) -> TextStyle:
    """The style of the file at `path` (from its first 64 KiB); `default` (LF, no BOM, unless
    given) when it is missing or empty."""
    try:
        with path.open("rb") as handle:
            head = handle.read(65536)
    except FileNotFoundError:
        head = b""
    if not head:
        return default or TextStyle(bom=False, eol="\n")
    return detect(head.decode("utf-8", "replace"))


def plain(text: str) -> str:
    """`text` without its BOM and with every `\\r\\n` read as `\\n` (stray `\\r` kept)."""
    return text.removeprefix(BOM).replace("\r\n", "\n")


def in_style(text: str, style: TextStyle) -> str:
    """Plain `text` written in `style`: each `\\n` as the dominant ending, the BOM restored."""
    body = text.replace("\n", style.eol) if style.eol != "\n" else text
    return (BOM if style.bom else "") + body


def _lines(text: str) -> list[str]:
    return _LINE_RE.findall(text)


def restyle(original: str, new_plain: str) -> str:
    """`new_plain` (plain text derived from `original`, the file as read) written back so that
    every line it keeps from `original` is byte for byte as it was (its own line ending, stray
    `\\r`, trailing whitespace, a missing final newline), and each new line takes the file's
    dominant line ending. The BOM stays as it was."""
    style = detect(original)
    old_raw = _lines(original.removeprefix(BOM))
    old_plain = [line.replace("\r\n", "\n") for line in old_raw]
    new = _lines(new_plain)
    # Compare lines without their ending, so that a kept last line that gains a newline (an
    # entry appended after it) still counts as kept.
    matcher = difflib.SequenceMatcher(None, [x.rstrip("\n") for x in old_plain],
                                      [x.rstrip("\n") for x in new], autojunk=False)
    out: list[str] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                old, fresh = old_raw[i1 + k], new[j1 + k]
                if fresh.endswith("\n") == old.endswith("\n"):
                    out.append(old)
                elif fresh.endswith("\n"):
                    out.append(old + style.eol)
                else:
                    out.append(old.removesuffix("\n").removesuffix("\r"))
        else:
            out.extend(in_style(line, TextStyle(bom=False, eol=style.eol))
                       for line in new[j1:j2])
    return (BOM if style.bom else "") + "".join(out)
