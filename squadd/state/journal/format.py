"""The durability log's record format: one frame per append, as every write-ahead record in
squadd holds it (a runtime's group-commit journal, and a team file's append intent).

A frame is a JSON header line naming the file (its path in the squad), the offset the bytes
end at, their length and their CRC-32 (and, for an intent, what else its caller must know to
finish it), then the bytes themselves as they are and a newline. The length and the checksum
let a reader tell a whole frame from a torn one and find the next header after it.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Frame:
    """One whole append read back: the file it names (as written: replay checks it), the
    offset its bytes end at, the bytes, and the header's other fields."""

    where: object
    end: object
    data: bytes
    extra: dict[str, Any]

    @property
    def start(self) -> int:
        """The offset the bytes begin at (`end` is checked to be an int first)."""
        assert isinstance(self.end, int)
        return self.end - len(self.data)


def where_in(root: str, path: Path) -> str:
    """`path` as a frame names it: relative to the squad's root (`root` ends with a separator)."""
    text = str(path)
    return text[len(root):] if text.startswith(root) else os.path.relpath(text, root[:-1])


def encode(where: str, end: int, data: bytes, extra: dict[str, Any] | None = None) -> bytes:
    """The frame of `data` appended to `where` so that it ends at `end`. The bytes go in as
    they are (a JSON string would escape them all a second time)."""
    header = (f'{{"t":{json.dumps(where, ensure_ascii=False)},"end":{end},'
              f'"n":{len(data)},"crc":{zlib.crc32(data)}')
    if extra:
        header += "," + json.dumps(extra, ensure_ascii=False)[1:-1]
    return b"".join(((header + "}\n").encode("utf-8"), data, b"\n"))


def decode(blob: bytes) -> Iterator[Frame]:
    """Each whole frame in `blob`, in order.

    A frame whose bytes are short or fail their checksum (a torn write, with the fence the
    next write put after it) is skipped, and reading goes on at the next line. A line of the
    form older versions wrote, ``{"t": ..., "end": ..., "data": "<the bytes as text>"}``, is
    read too, so a journal such a version left is still replayed."""
    position = 0
    while position < len(blob):
        newline = blob.find(b"\n", position)
        if newline < 0:
            newline = len(blob)
        try:
            header = json.loads(blob[position:newline])
        except (ValueError, UnicodeDecodeError):
            header = None
        position = newline + 1
        if not isinstance(header, dict) or "t" not in header or "end" not in header:
            continue  # a torn header, or a line of a torn frame's bytes
        if "data" in header:
            if isinstance(header["data"], str):
                yield Frame(header["t"], header["end"], header["data"].encode("utf-8"), {})
            continue
        length, crc = header.pop("n", None), header.pop("crc", None)
        if not isinstance(length, int) or not isinstance(crc, int) or length < 0:
            continue
        data = blob[position:position + length]
        if len(data) == length and blob[position + length:position + length + 1] == b"\n" \
                and zlib.crc32(data) == crc:
            where, end = header.pop("t"), header.pop("end")
            yield Frame(where, end, data, header)
            position += length + 1
