"""`find` and `grep`: files by glob, lines by regex, over the files `listing` says are visible.

Both engines of `grep` search the same list of files in the same order with the same rules
(binary files skipped, files over `workspace_tools.max_read_bytes` skipped, lines split on
"\\n"), so `rg` and the Python fallback give the same results; `rg` is only faster. Every line
`rg` reports is read back through the confined walk before it is shown. Both engines match in
linear time: the fallback runs the pattern in the same kind of engine as `rg` (no
backtracking), so no pattern can keep a thread busy for long; a pattern that needs
backtracking (look-around, backreferences, atomic groups, ...) is refused, naming the construct.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream
from pydantic import BaseModel, ConfigDict, Field

from squadd.errors import UntrustedInputError
from squadd.tools.base import CancelSignal, ToolContext, ToolResult
from squadd.tools.builtin.common import WorkspaceTool, is_binary
from squadd.tools.builtin.confine import Parts, PathRefused, Workspace, read_fd, shown
from squadd.tools.builtin.files import cut_line
from squadd.tools.builtin.listing import Listing, glob_matches, glob_regex, list_files
from squadd.untrusted import linear_pattern, nonlinear_construct

RG_BATCH = 1000
"""Files per `rg` run (their names go on its command line)."""


class FindArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(min_length=1, description=(
        "Glob: '*.py' matches names at any depth; 'src/**/test_*.py' matches paths under path"))
    path: str | None = Field(None, description="Folder to search (default: the workspace)")


class GrepArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(min_length=1, description="Regular expression to search for")
    path: str | None = Field(None, description="Folder or file to search (default: all)")
    glob: str | None = Field(None, description="Only files matching this glob, e.g. '*.py'")
    ignore_case: bool = Field(False, description="Match without regard to case")


class Find(WorkspaceTool[FindArgs]):
    name = "find"
    label = "Find"
    description = (
        "Find files of the workspace by glob pattern, respecting .gitignore. Returns paths "
        "relative to the workspace, sorted."
    )
    args_model = FindArgs

    async def run(self, args: FindArgs, ctx: ToolContext) -> ToolResult:
        workspace = self.workspace(ctx)
        try:
            glob_regex(args.pattern.strip("/"))
            base = workspace.resolve(args.path or ".")
            listing = await list_files(workspace, base)
        except PathRefused as exc:
            return ToolResult.failure(f"find refused: {exc}")
        except UntrustedInputError as exc:
            return ToolResult.failure(f"find: the glob {args.pattern!r} cannot be used: {exc}")
        found = [shown(parts) for parts, _ in listing.files
                 if glob_matches(args.pattern, listing.relative(parts))]
        limit = self.limits.max_matches
        if not found:
            return ToolResult.success(f"no files match {args.pattern} in {shown(base)}",
                                      matches=0)
        text = "\n".join(found[:limit])
        if len(found) > limit:
            text += (f"\n[{len(found) - limit} more files match: showing the first {limit} "
                     "(workspace_tools.max_matches); narrow the pattern or path]")
        return ToolResult.success(text, matches=len(found))


class Matcher(Protocol):
    def search(self, text: str) -> object:
        """Truthy when the pattern matches somewhere in `text`."""


@dataclass
class Search:
    """One grep call's question and what it has found so far."""

    regex: Matcher
    limit: int
    max_line_chars: int
    matches: list[tuple[Parts, int, str]] = field(default_factory=list)
    cancel: CancelSignal = field(default_factory=CancelSignal)
    """Set when the call ends (its timeout, the session's cancellation): the search stops."""

    @property
    def full(self) -> bool:
        return len(self.matches) > self.limit


class Grep(WorkspaceTool[GrepArgs]):
    name = "grep"
    label = "Grep"
    description = (
        "Search the files of the workspace for a regular expression, respecting .gitignore. "
        "Returns file:line:text for each matching line. Narrow it with path and glob."
    )
    args_model = GrepArgs

    def engine(self) -> str:
        choice = self.limits.grep
        if choice == "auto":
            return "rg" if shutil.which("rg") else "python"
        return choice

    async def run(self, args: GrepArgs, ctx: ToolContext) -> ToolResult:
        try:  # linear time in either engine: a model's pattern must not stall a thread
            regex = linear_pattern(("(?i)" if args.ignore_case else "") + args.pattern)
        except UntrustedInputError as exc:
            if nonlinear_construct(args.pattern) is not None:
                return ToolResult.failure(f"grep refused: {exc}")
            return ToolResult.failure(f"grep: {args.pattern!r} is not a valid regular "
                                      f"expression: {exc}")
        workspace = self.workspace(ctx)
        try:
            if args.glob is not None:
                glob_regex(args.glob.strip("/"))
            base = workspace.resolve(args.path or ".")
            listing = await list_files(workspace, base)
        except PathRefused as exc:
            return ToolResult.failure(f"grep refused: {exc}")
        except UntrustedInputError as exc:
            return ToolResult.failure(f"grep: the glob {args.glob!r} cannot be used: {exc}")
        files = [(parts, size) for parts, size in listing.files
                 if args.glob is None or glob_matches(args.glob, listing.relative(parts))]
        searched = [parts for parts, size in files if size <= self.limits.max_read_bytes]
        skipped = len(files) - len(searched)
        search = Search(regex, self.limits.max_matches,
                        self.limits.max_line_chars, cancel=ctx.cancel)
        engine = self.engine()
        if engine == "rg" and not await _rg_search(workspace, searched, args, search,
                                                   self.limits.max_read_bytes):
            engine = "python"  # rg could not parse the pattern; the linear engine could
            search.matches.clear()
        if engine == "python":
            # Given up on when the call ends: the thread then stops at its next line.
            await anyio.to_thread.run_sync(_python_search, workspace, searched, search,
                                           abandon_on_cancel=True)
        return _report(args, base, listing, search, skipped, engine,
                       self.limits.max_read_bytes)


def _report(args: GrepArgs, base: Parts, listing: Listing, search: Search, skipped: int,
            engine: str, max_bytes: int) -> ToolResult:
    shown_matches = search.matches[:search.limit]
    lines = [f"{shown(parts)}:{number}:{cut_line(text, search.max_line_chars)}"
             for parts, number, text in shown_matches]
    if search.full:
        lines.append(f"[more than {search.limit} matches: showing the first {search.limit} "
                     "(workspace_tools.max_matches); narrow the pattern, path or glob]")
    if skipped:
        lines.append(f"[{skipped} files over {max_bytes} bytes "
                     "(workspace_tools.max_read_bytes) were not searched]")
    if not shown_matches:
        lines.insert(0, f"no matches for {args.pattern!r} in {shown(base)}")
    return ToolResult.success("\n".join(lines), matches=len(shown_matches),
                              truncated=search.full, engine=engine, listing=listing.source)


def _line_text(raw: bytes) -> str:
    return raw.rstrip(b"\r").decode("utf-8", errors="replace")


def _python_search(workspace: Workspace, files: list[Parts], search: Search) -> None:
    for parts in files:
        if search.cancel.cancelled:
            return
        try:
            fd, info = workspace.open_file(parts)
        except PathRefused:
            continue  # changed since it was listed
        try:
            data = read_fd(fd, info.st_size)
        finally:
            os.close(fd)
        if is_binary(data):
            continue
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        for number, raw in enumerate(lines, start=1):
            if search.cancel.cancelled:
                return
            if search.regex.search(raw.decode("utf-8", errors="replace")):
                search.matches.append((parts, number, _line_text(raw)))
                if search.full:
                    return


async def _rg_search(workspace: Workspace, files: list[Parts], args: GrepArgs,
                     search: Search, max_bytes: int) -> bool:
    """Search `files` with rg, batch by batch; False when rg refuses the pattern."""
    for start in range(0, len(files), RG_BATCH):
        batch = files[start:start + RG_BATCH]
        ok = await _rg_batch(workspace, batch, args, search, max_bytes)
        if not ok:
            return False
        if search.full:
            return True
    return True


async def _rg_batch(workspace: Workspace, batch: list[Parts], args: GrepArgs,
                    search: Search, max_bytes: int) -> bool:
    # --no-messages: a file gone since the listing would cost a line on stderr, which is read
    # only at the end; enough of them would fill the pipe and stall rg. Pattern errors still show.
    command = ["rg", "--json", "--text", "--no-config", "--no-ignore", "--hidden",
               "--no-follow", "--no-messages", "--max-count", str(search.limit + 1)]
    if args.ignore_case:
        command.append("--ignore-case")
    command += ["-e", args.pattern, "--", *(shown(parts) for parts in batch)]
    order = {shown(parts): index for index, parts in enumerate(batch)}
    found: list[tuple[int, int, str]] = []
    process = await anyio.open_process(command, cwd=workspace.root, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout is not None and process.stderr is not None
        stream = BufferedByteReceiveStream(process.stdout)
        while True:
            try:
                line = await stream.receive_until(b"\n", 64 << 20)
            except (anyio.EndOfStream, anyio.IncompleteRead):
                break
            hit = _rg_match(json.loads(line), order)
            if hit is not None:
                found.append(hit)
        errors = b""
        if await process.wait() == 2:  # an error: a bad pattern, or files it could not read
            with contextlib.suppress(anyio.EndOfStream):
                errors = await process.stderr.receive()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()
    if b"regex parse error" in errors or b"error parsing" in errors:
        return False
    found.sort()
    kept = await anyio.to_thread.run_sync(confirmed, workspace, batch, found, max_bytes)
    for index, number, text in kept:
        search.matches.append((batch[index], number, text))
        if search.full:
            break
    return True


def confirmed(workspace: Workspace, batch: list[Parts], found: list[tuple[int, int, str]],
              max_bytes: int) -> list[tuple[int, int, str]]:
    """The matches rg reported that the file, opened through the confined walk, still holds.

    rg opens files by name; a file swapped for a symlink meanwhile would lead it outside. Every
    line shown is therefore one read back through a checked descriptor (which is also where
    binary files are told apart, only for the files that matched)."""
    kept: list[tuple[int, int, str]] = []
    lines: list[bytes] = []
    current = -1
    for index, number, text in found:
        if index != current:
            current = index
            try:
                fd, info = workspace.open_file(batch[index])
            except PathRefused:
                lines = []
                continue
            try:
                data = read_fd(fd, min(info.st_size, max_bytes))
            finally:
                os.close(fd)
            # rg searched it as text; binary files are left out, as the Python search does.
            lines = [] if is_binary(data) else data.split(b"\n")
        if 0 < number <= len(lines) and _line_text(lines[number - 1]) == text:
            kept.append((index, number, text))
    return kept


def _rg_match(event: dict[str, Any], order: dict[str, int]) -> tuple[int, int, str] | None:
    if event.get("type") != "match":
        return None
    data = event["data"]
    path = data["path"].get("text") or os.fsdecode(base64.b64decode(data["path"]["bytes"]))
    lines = data["lines"]
    raw = lines["text"].encode("utf-8") if "text" in lines else base64.b64decode(lines["bytes"])
    index = order.get(path.removeprefix("./"))
    if index is None:
        return None
    return index, int(data["line_number"]), _line_text(raw.removesuffix(b"\n"))
