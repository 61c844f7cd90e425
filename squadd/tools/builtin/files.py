"""`read` and `write`: a file's text with line numbers, page by page; a file replaced whole.

`read` refuses binary files and files over `workspace_tools.max_read_bytes`; `write` is atomic
(temp file, fsync, rename), makes missing folders inside the workspace, and is refused on
`.git/`, `.squad/run/` and (by default) `.squad/`.
"""

from __future__ import annotations

import anyio
from pydantic import BaseModel, ConfigDict, Field

from squadd.tools.base import ToolContext, ToolResult
from squadd.tools.builtin.common import (
    WorkspaceTool,
    is_binary,
    read_regular,
    write_regular,
)
from squadd.tools.builtin.confine import PathRefused, Workspace, shown

NOTE_ROOM_LINES = 2
NOTE_ROOM_BYTES = 512
"""Room left in the model's view for the note after a page."""


class ReadArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="The file, relative to the workspace")
    offset: int | None = Field(None, ge=1, description="First line to show (1-based)")
    limit: int | None = Field(None, ge=1, description="Most lines to show")


class WriteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="The file, relative to the workspace")
    content: str = Field(description="The whole new content of the file")


def cut_line(line: str, max_chars: int) -> str:
    if len(line) <= max_chars:
        return line
    return f"{line[:max_chars]}… [{len(line) - max_chars} more characters]"


class Read(WorkspaceTool[ReadArgs]):
    name = "read"
    label = "Read"
    description = (
        "Read a text file of the workspace. Lines come numbered (number, tab, line). Long files "
        "come a page at a time: pass offset (first line, 1-based) and limit (how many lines) "
        "to read on. Binary files are refused."
    )
    args_model = ReadArgs

    async def run(self, args: ReadArgs, ctx: ToolContext) -> ToolResult:
        workspace = self.workspace(ctx)
        try:
            return await anyio.to_thread.run_sync(self._read, workspace, args)
        except PathRefused as exc:
            return ToolResult.failure(f"read refused: {exc}")

    def _read(self, workspace: Workspace, args: ReadArgs) -> ToolResult:
        parts = workspace.resolve(args.path)
        data, _ = read_regular(workspace, parts, self.limits.max_read_bytes)
        where = shown(parts)
        if is_binary(data):
            return ToolResult.failure(
                f"{where} is a binary file ({len(data)} bytes): read shows text only")
        try:
            text = data.decode("utf-8")
            note = ""
        except UnicodeDecodeError as exc:
            text = data.decode("utf-8", errors="replace")
            note = (f"[{where} is not valid UTF-8 (first bad byte at offset {exc.start}); "
                    "bad bytes are shown as \ufffd]\n")
        if not text:
            return ToolResult.success(f"{where} is empty", path=where, total_lines=0)
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        total = len(lines)
        first = args.offset or 1
        if first > total:
            return ToolResult.failure(
                f"offset {first} is past the end of {where}, which has {total} lines")
        # A page fits the model's view whole, with room for the note: paged, never spilled.
        room_lines = max(1, self.settings.tools.max_output_lines - NOTE_ROOM_LINES)
        room_bytes = max(256, self.settings.tools.max_output_bytes - NOTE_ROOM_BYTES)
        last = min(total, first + min(args.limit or room_lines, room_lines) - 1)
        width = len(str(last))
        shown_lines: list[str] = []
        used = 0
        for number in range(first, last + 1):
            line = f"{number:>{width}}\t" + cut_line(lines[number - 1].rstrip("\r"),
                                                     self.limits.max_line_chars)
            used += len(line.encode("utf-8")) + 1
            if shown_lines and used > room_bytes:
                last = number - 1
                break
            shown_lines.append(line)
        body = "\n".join(shown_lines)
        if last < total:
            body += (f"\n[lines {first}-{last} of {total}; call read with offset={last + 1} "
                     "to read on]")
        return ToolResult.success(note + body, path=where, first_line=first, last_line=last,
                                  total_lines=total)


class Write(WorkspaceTool[WriteArgs]):
    name = "write"
    label = "Write"
    description = (
        "Write a file of the workspace whole: it is created, or replaced atomically. Missing "
        "folders are made. Prefer edit for changing part of an existing file."
    )
    args_model = WriteArgs

    async def approval_reason(self, args: WriteArgs, ctx: ToolContext) -> str | None:
        return await self.protected_reason(args.path, ctx)

    async def run(self, args: WriteArgs, ctx: ToolContext) -> ToolResult:
        data = args.content.encode("utf-8")
        if len(data) > self.limits.max_write_bytes:
            return ToolResult.failure(
                f"write refused: the content is {len(data)} bytes, over the limit of "
                f"{self.limits.max_write_bytes} per call (workspace_tools.max_write_bytes)")
        workspace = self.workspace(ctx)
        try:
            parts = workspace.writable(args.path, self.limits)
            async with self.locks.hold(workspace, parts):
                created = await anyio.to_thread.run_sync(write_regular, workspace, parts, data)
        except PathRefused as exc:
            return ToolResult.failure(f"write refused: {exc}")
        where = shown(parts)
        lines = args.content.count("\n") + (0 if args.content.endswith("\n") or
                                            not args.content else 1)
        verb = "created" if created else "replaced"
        return ToolResult.success(f"{verb} {where}: {len(data)} bytes, {lines} lines",
                                  path=where, bytes=len(data), created=created)
