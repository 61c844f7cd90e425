"""`edit`: replace an exact string in a file and return the unified diff of the change.

`old` must match exactly once (or `replace_all`); when it is absent or ambiguous the call fails
with the candidate line numbers, so the model can read them and try again. Edits to one file run
one at a time (the tool set's `FileLocks`), and the file is replaced atomically.
"""

from __future__ import annotations

import difflib

import anyio
from pydantic import BaseModel, ConfigDict, Field

from squadd.tools.base import ToolContext, ToolResult
from squadd.tools.builtin.common import (
    WorkspaceTool,
    is_binary,
    read_regular,
    write_regular,
)
from squadd.tools.builtin.confine import Parts, PathRefused, Workspace, shown

MAX_CANDIDATES = 10


class EditArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="The file, relative to the workspace")
    old: str = Field(min_length=1, description="The exact text to replace (whitespace counts)")
    new: str = Field(description="The text to put in its place")
    replace_all: bool = Field(False, description="Replace every occurrence, not just one")


def _lines_of(text: str, indexes: list[int]) -> list[int]:
    """The line number of each of `indexes` (ascending), counted in one pass over `text`."""
    numbers: list[int] = []
    line, counted = 1, 0
    for index in indexes:
        line += text.count("\n", counted, index)
        counted = index
        numbers.append(line)
    return numbers


def _occurrences(text: str, old: str) -> list[int]:
    found: list[int] = []
    start = text.find(old)
    while start >= 0:
        found.append(start)
        start = text.find(old, start + len(old))
    return found


def _numbers(numbers: list[int]) -> str:
    shown_numbers = ", ".join(str(n) for n in numbers[:MAX_CANDIDATES])
    more = len(numbers) - MAX_CANDIDATES
    return shown_numbers + (f" and {more} more" if more > 0 else "")


def _absent(text: str, old: str, where: str) -> str:
    first = next((line for line in old.split("\n") if line.strip()), old)
    squeezed = " ".join(first.split())
    candidates = [number for number, line in enumerate(text.split("\n"), start=1)
                  if squeezed and squeezed in " ".join(line.split())]
    if candidates:
        return (f"old was not found in {where}. Lines whose text matches its first line "
                f"({first.strip()[:80]!r}) when spaces are ignored: {_numbers(candidates)}. "
                "Read those lines and copy old exactly, spaces, tabs and line breaks included.")
    return (f"old was not found in {where}, and no line contains its first line "
            f"({first.strip()[:80]!r}) even ignoring spaces: read the file again and copy old "
            "exactly.")


def diff_of(before: str, after: str, where: str) -> str:
    lines = difflib.unified_diff(before.splitlines(keepends=True),
                                 after.splitlines(keepends=True),
                                 fromfile=f"a/{where}", tofile=f"b/{where}", n=3)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)


class Edit(WorkspaceTool[EditArgs]):
    name = "edit"
    label = "Edit"
    description = (
        "Replace exact text in a file of the workspace. old must match the file exactly "
        "(whitespace and line breaks included) and only once, unless replace_all is true; "
        "include a few surrounding lines to make it unique. Returns the diff."
    )
    args_model = EditArgs

    async def approval_reason(self, args: EditArgs, ctx: ToolContext) -> str | None:
        return await self.protected_reason(args.path, ctx)

    async def run(self, args: EditArgs, ctx: ToolContext) -> ToolResult:
        if args.old == args.new:
            return ToolResult.failure("edit refused: old and new are the same text")
        workspace = self.workspace(ctx)
        try:
            parts = workspace.writable(args.path, self.limits)
            async with self.locks.hold(workspace, parts):
                return await anyio.to_thread.run_sync(self._edit, workspace, parts, args)
        except PathRefused as exc:
            return ToolResult.failure(f"edit refused: {exc}")

    def _edit(self, workspace: Workspace, parts: Parts, args: EditArgs) -> ToolResult:
        where = shown(parts)
        data, mode = read_regular(workspace, parts, self.limits.max_read_bytes)
        if is_binary(data):
            return ToolResult.failure(f"edit refused: {where} is a binary file")
        try:
            before = data.decode("utf-8")
        except UnicodeDecodeError:
            return ToolResult.failure(f"edit refused: {where} is not UTF-8 text; edit changes "
                                      "UTF-8 files only (write can replace it whole)")
        old, new = args.old, args.new
        found = _occurrences(before, old)
        if not found and "\r\n" in before and "\n" in old and "\r\n" not in old:
            # The model writes "\n"; the file ends its lines with "\r\n".
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
            found = _occurrences(before, old)
        if not found:
            return ToolResult.failure(_absent(before, args.old, where))
        if len(found) > 1 and not args.replace_all:
            lines = _lines_of(before, found)
            return ToolResult.failure(
                f"old matches {len(found)} times in {where} (at lines {_numbers(lines)}): "
                "add surrounding lines to old so it matches once, or pass replace_all=true "
                "to replace every one")
        after = before.replace(old, new) if args.replace_all else before.replace(old, new, 1)
        encoded = after.encode("utf-8")
        if len(encoded) > self.limits.max_write_bytes:
            return ToolResult.failure(
                f"edit refused: {where} would be {len(encoded)} bytes, over the limit of "
                f"{self.limits.max_write_bytes} (workspace_tools.max_write_bytes)")
        write_regular(workspace, parts, encoded, mode=mode)
        count = len(found) if args.replace_all else 1
        lines = _lines_of(before, found[:count])
        plural = "" if count == 1 else "s"
        return ToolResult.success(
            f"edited {where}: replaced {count} occurrence{plural} (line{plural} "
            f"{_numbers(lines)})\n{diff_of(before, after, where)}",
            path=where, replaced=count)
