"""Command output, streamed: redacted on the way, written to a file, and only its head kept.

A shell tool's output never sits in memory whole: each command's output streams through a
`StreamRedactor` into a part file, keeping the first bytes for the model. `assemble` joins the
parts into the call's spill file (`tool-output/{session}/{call}.txt`) when the model can't see
all of it; `model_view` is what a shell tool (or `bash`) shows the model of its output.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import anyio

from squadd.config import ToolsSettings
from squadd.errors import InvalidNameError
from squadd.fsio import fsync_dir, open_private
from squadd.state.layout import SquadLayout, safe_id
from squadd.tools.truncate import Cut, cut, truncation_note

COPY_CHUNK = 1 << 20


def part_id(value: str, kind: str) -> str:
    """`value` (a session or call id) as a part of an output file's name: itself when it is a
    safe name, else a digest of it."""
    try:
        return safe_id(value, kind=kind)
    except InvalidNameError:
        return "id-" + hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()[:24]


class StreamRedactor:
    """Replaces secret values in a byte stream, even when a value is split between chunks."""

    def __init__(self, secrets: Mapping[str, str]):
        self._secrets = sorted(
            ((value.encode("utf-8"), f"[secret:{name}]".encode()) for name, value in
             secrets.items() if value), key=lambda item: -len(item[0]))
        self._keep = max((len(value) for value, _ in self._secrets), default=1) - 1
        self._pending = b""

    def feed(self, data: bytes) -> bytes:
        if not self._secrets:
            return data
        return self._scan(self._pending + data, final=False)

    def flush(self) -> bytes:
        if not self._secrets:
            return b""
        return self._scan(self._pending, final=True)

    def _scan(self, buffer: bytes, *, final: bool) -> bytes:
        # Bytes from `safe` on might be the start of a secret that the next chunk completes.
        safe = len(buffer) if final else max(0, len(buffer) - self._keep)
        out: list[bytes] = []
        position = 0
        while True:
            best: tuple[int, bytes, bytes] | None = None
            for value, marker in self._secrets:
                found = buffer.find(value, position)
                if found >= 0 and (best is None or found < best[0]):
                    best = (found, value, marker)
            if best is None or best[0] >= safe:
                break
            found, value, marker = best
            out.append(buffer[position:found])
            out.append(marker)
            position = found + len(value)
        end = max(position, safe)
        out.append(buffer[position:end])
        self._pending = buffer[end:]
        return b"".join(out)


class OutputSink:
    """One command's output: streamed to `path`, redacted, its head kept (`head_bytes`)."""

    def __init__(self, path: Path, secrets: Mapping[str, str], head_bytes: int):
        self.path = path
        self.head_bytes = head_bytes
        self._redactor = StreamRedactor(secrets)
        self._head = bytearray()
        self.total_bytes = 0
        self.total_lines = 0
        self._last_byte = b""
        self._file: BinaryIO | None = None

    async def open(self) -> None:
        self._file = await anyio.to_thread.run_sync(open_private, self.path, "wb")

    async def write(self, data: bytes) -> None:
        await self._put(self._redactor.feed(data))

    async def note(self, text: str) -> None:
        """A line of squadd's own (a retry, a fallback) in the output."""
        await self._put(self._redactor.flush())
        prefix = b"" if not self.total_bytes or self._last_byte == b"\n" else b"\n"
        await self._put(prefix + text.encode("utf-8") + b"\n")

    async def _put(self, data: bytes) -> None:
        if not data:
            return
        if len(self._head) < self.head_bytes:
            self._head += data[: self.head_bytes - len(self._head)]
        self.total_bytes += len(data)
        self.total_lines += data.count(b"\n")
        self._last_byte = data[-1:]
        handle = self._file
        if handle is not None:
            await anyio.to_thread.run_sync(handle.write, data)

    async def close(self) -> None:
        await self._put(self._redactor.flush())
        handle, self._file = self._file, None
        if handle is not None:
            await anyio.to_thread.run_sync(_close_synced, handle)

    @property
    def lines(self) -> int:
        """Lines, counting a last line without a newline."""
        return self.total_lines + (1 if self.total_bytes and self._last_byte != b"\n" else 0)

    @property
    def complete(self) -> bool:
        return self.total_bytes <= len(self._head)

    def head_text(self) -> str:
        return bytes(self._head).decode("utf-8", errors="replace") if self.complete else \
            bytes(self._head).decode("utf-8", errors="ignore")

    def discard(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _close_synced(handle: BinaryIO) -> None:
    try:
        handle.flush()
        os.fsync(handle.fileno())
    finally:
        handle.close()


@dataclass(frozen=True)
class Block:
    """A piece of the combined output: a header line of squadd's, and/or a command's output."""

    header: str | None = None
    sink: OutputSink | None = None


def _joined(blocks: Sequence[Block]) -> bool:
    """Whether blocks are joined with headers and newlines (not one bare command's output)."""
    return not (len(blocks) == 1 and blocks[0].header is None)


def _open_last_line(sink: OutputSink) -> bool:
    return sink.lines > sink.total_lines


def render(blocks: Sequence[Block]) -> tuple[str, bool, int, int]:
    """(head text of all blocks, complete?, total bytes, total lines) of the combined output."""
    joined = _joined(blocks)
    parts: list[str] = []
    complete = True
    total_bytes = total_lines = 0
    for block in blocks:
        if block.header is not None:
            line = block.header + "\n"
            parts.append(line)
            total_bytes += len(line.encode("utf-8"))
            total_lines += 1
        sink = block.sink
        if sink is not None:
            text = sink.head_text()
            complete = complete and sink.complete
            total_bytes += sink.total_bytes
            total_lines += sink.lines
            if joined and _open_last_line(sink):
                total_bytes += 1
                if sink.complete:
                    text += "\n"
            parts.append(text)
    return "".join(parts), complete, total_bytes, total_lines


def assemble(blocks: Sequence[Block], target: Path, scratch: Path) -> None:
    """Write the combined output to `target`, streaming each part file through `scratch`."""
    if not _joined(blocks) and blocks[0].sink is not None:
        os.replace(blocks[0].sink.path, target)
        fsync_dir(target.parent)
        return
    with open_private(scratch, "wb") as out:
        for block in blocks:
            if block.header is not None:
                out.write(block.header.encode("utf-8") + b"\n")
            sink = block.sink
            if sink is not None and sink.total_bytes:
                with sink.path.open("rb") as source:
                    shutil.copyfileobj(source, out, COPY_CHUNK)
                if _open_last_line(sink):
                    out.write(b"\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(scratch, target)
    fsync_dir(target.parent)


def view_of(text: str, complete: bool, total_bytes: int, total_lines: int, *,
            max_lines: int, max_bytes: int) -> tuple[str, Cut]:
    """The model's view of the combined head and the numbers of what was cut."""
    piece = cut(text, max_lines=max_lines, max_bytes=max_bytes)
    if complete and not piece.truncated:
        return text, piece
    return piece.text, Cut(piece.text, True, total_lines, total_bytes, piece.kept_lines,
                           piece.kept_bytes)


STATUS_ROOM_LINES = 4
STATUS_ROOM_BYTES = 512
"""Room kept within the output limits for the status line a tool adds after its output."""


async def model_view(blocks: Sequence[Block], layout: SquadLayout, session_id: str,
                     call_id: str, limits: ToolsSettings) -> tuple[str, Path | None]:
    """What the model sees of `blocks`: their head within the output limits (less room for a
    status line). When that is not all of it, the whole is assembled into the call's spill file
    and a note names it; that file's path comes back too (else None)."""
    text, complete, total_bytes, total_lines = render(blocks)
    view, piece = view_of(text, complete, total_bytes, total_lines,
                          max_lines=max(1, limits.max_output_lines - STATUS_ROOM_LINES),
                          max_bytes=max(256, limits.max_output_bytes - STATUS_ROOM_BYTES))
    if not piece.truncated:
        return view, None
    final = layout.tool_output(session_id, call_id)
    scratch = layout.tool_output_part(session_id, call_id, "all")
    await anyio.to_thread.run_sync(assemble, blocks, final, scratch)
    return view + truncation_note(piece, final, layout), final
