"""The soak's invariants about the built-in workspace tools: what the agents' `write`, `edit`,
`read`, `grep`, `find` and `bash` calls (`tests.support.chaos_workspace`) left in the repository,
what they saw, how the calls a daemon stop cut off were reported, and that nothing outside the
repository changed. Each reads the run's transcripts and files and returns a `Check`.

The daemon's stops are the wall-clock moments each stopped daemon was known to be gone: a
transcript record stamped before one was written by a daemon that lived then; a result stamped
after it was written by a later one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from squadd.runtime.conversation import INTERRUPTED_TOOL_TEXT, NOT_STARTED_TOOL_TEXT
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import Transcript
from tests.reliability.invariants import Check
from tests.support.chaos_workspace import (
    ESCAPE_LINK,
    FILE_RE,
    WORKSPACE_FOLDER,
    scene_file,
    task_of_call,
)

OBSERVERS = ("read", "grep", "find", "bash")
_TEMP_RE = re.compile(r"^\.(?P<target>.+)\.[0-9a-f]+\.tmp$")
_READ_LINE_RE = re.compile(r"^ *\d+\t(.*)$")
_BASH_OK = "\n[exit code 0]"

State = str | None
"""A file's content, or None when it does not exist."""


@dataclass(frozen=True)
class Call:
    """One tool call of a transcript and what answered it."""

    session_id: str
    call_id: str
    name: str
    arguments: dict[str, Any] | None
    """None when the model sent arguments that are not a JSON object."""
    called_at: dt.datetime
    answer: str | None = None
    """The tool result's text; None when no result was recorded."""
    result_type: str | None = None
    answered_at: dt.datetime | None = None

    @property
    def outcome(self) -> str:
        """"success", "failure", "stand-in" (a stop cut it off: effect unknown), "not-run" (a
        stop came before it started) or "none" (no result)."""
        if self.answer is None:
            return "none"
        if self.result_type is None and self.answer == INTERRUPTED_TOOL_TEXT:
            return "stand-in"
        if self.result_type is None and self.answer == NOT_STARTED_TOOL_TEXT:
            return "not-run"
        return "success" if self.result_type == "success" else "failure"

    @property
    def where(self) -> str:
        return f"{self.name} call {self.call_id} (session {self.session_id})"


def _when(record: Mapping[str, Any]) -> dt.datetime:
    return dt.datetime.fromisoformat(str(record.get("ts")))


def calls_of(session_id: str, transcript: Transcript) -> list[Call]:
    """The transcript's tool calls in the order they were made, each with its result."""
    calls: list[Call] = []
    pending: dict[str, int] = {}
    for record in transcript.records:
        message = record.get("message") if record.get("kind") == "message" else None
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                arguments = call.get("arguments")
                pending[str(call.get("id"))] = len(calls)
                calls.append(Call(session_id, str(call.get("id")), str(call.get("name")),
                                  arguments if isinstance(arguments, dict) else None,
                                  _when(record)))
        elif message.get("role") == "tool":
            index = pending.pop(str(message.get("tool_call_id")), None)
            if index is not None:
                calls[index] = dataclasses.replace(
                    calls[index], answer=str(message.get("content") or ""),
                    result_type=record.get("result_type"), answered_at=_when(record))
    return calls


def _stop_within(stops: Sequence[dt.datetime], start: dt.datetime,
                 end: dt.datetime | None) -> dt.datetime | None:
    """The first stop after `start` and before `end` (None: before ever)."""
    return next((s for s in sorted(stops) if s > start and (end is None or s < end)), None)


def calls_cut_reported(transcripts: Mapping[str, Transcript], stops: Sequence[dt.datetime],
                       tools: Iterable[str] | None = ("bash",)) -> Check:
    """Every call of `tools` (None: of any tool) that a daemon stop cut off (made by the daemon
    that stopped, with no result written before it was gone) is answered by the interruption's
    stand-in, or its session ended interrupted; and every stand-in answers a call a stop cut
    off."""
    names = None if tools is None else set(tools)
    which = "tool" if names is None else "/".join(sorted(names))
    check = Check(f"every {which} call a stop cut off is reported interrupted")
    cut: Counter[str] = Counter()
    for session_id, transcript in sorted(transcripts.items()):
        for call in calls_of(session_id, transcript):
            if names is not None and call.name not in names:
                continue
            check.checked += 1
            stop = _stop_within(stops, call.called_at, call.answered_at)
            if stop is not None:
                cut[call.name] += 1
                if call.outcome == "none" and transcript.last_state != "interrupted":
                    check.failures.append(f"{call.where} was cut off by the stop at "
                                          f"{stop:%H:%M:%S.%f} and never answered, though the "
                                          f"session ended {transcript.last_state}")
                elif call.outcome not in ("stand-in", "not-run", "none"):
                    check.failures.append(
                        f"{call.where} was cut off by the stop at {stop:%H:%M:%S.%f}, but its "
                        f"result, written after it, says {call.outcome}: "
                        f"{(call.answer or '')[:120]!r}")
            elif call.outcome in ("stand-in", "not-run"):
                check.failures.append(f"{call.where} is reported interrupted, but no stop "
                                      "happened between the call and its result")
    check.notes = {"cut_by_stops": dict(sorted(cut.items())), "stops": len(stops)}
    return check


# What the workspace calls may have left, replayed from the transcripts.

def _apply_edit(state: State, old: str, new: str) -> str | None:
    """The content an exact, unique replacement leaves; None when it cannot apply."""
    if state is None or not old or state.count(old) != 1:
        return None
    return state.replace(old, new, 1)


def _read_content(text: str) -> State:
    """The file content a successful `read` shows (numbered lines), or a description of what
    it showed instead."""
    if text.endswith(" is empty"):
        return ""
    lines = [_READ_LINE_RE.match(line) for line in text.split("\n")]
    if all(lines):
        return "".join(f"{m.group(1)}\n" for m in lines if m)
    return f"<read output {text[:80]!r}>"


def _bash_content(text: str) -> State:
    """The file content a successful `cat F; wc -l < F` shows, or a description of what it
    showed instead."""
    content, _, count = text.removesuffix(_BASH_OK).rpartition("\n")
    content += "\n"
    if not text.endswith(_BASH_OK) or count.strip() != str(content.count("\n")):
        return f"<bash output {text[:80]!r}>"
    return content


def _possible(call: Call, path: str, states: set[State]) -> set[State]:
    """Of `states`, those a successful observing call's answer agrees with."""
    text = call.answer or ""
    if call.name == "read":
        return {s for s in states if s == _read_content(text)}
    if call.name == "bash":
        return {s for s in states if s == _bash_content(text)}
    if call.name == "find":
        listed = text.strip() == path
        return {s for s in states if (s is not None) == listed}
    hits = [line.split(":", 2)[2] + "\n" for line in text.split("\n")
            if line.startswith(f"{path}:") and line.count(":") >= 2]
    return {s for s in states if (s is not None and bool(hits) and all(h in s for h in hits))
            or (not hits and (s is None or "edited" not in s))}


@dataclass
class _File:
    """One file's possible contents after the calls made so far."""

    states: set[State] = field(default_factory=lambda: {None})
    cut_writer: bool = False


def _replay(calls: list[Call], files: dict[str, _File], failures: list[str]) -> int:
    """Play one session's workspace calls on `files`; violations go to `failures`. How many
    calls were checked."""
    checked = 0
    for call in calls:
        task = task_of_call(call.call_id)
        if task is None or call.name not in ("write", "edit", *OBSERVERS):
            continue
        args = call.arguments or {}
        path = str(args.get("path", "")) if call.name in ("write", "edit", "read") \
            else scene_file(task)
        if path.startswith(("../", ESCAPE_LINK + "/")):
            continue  # outside_untouched checks these
        checked += 1
        if call.call_id.startswith(f"{task}-x") and call.outcome == "success":
            failures.append(f"{call.where} had invalid arguments ({args or 'not an object'}) "
                            "and succeeded")
            continue
        file = files.setdefault(path, _File())
        outcome = call.outcome
        if outcome == "none":
            outcome = "stand-in"  # the session ended interrupted: the call's effect is unknown
        if call.name in OBSERVERS:
            if outcome == "success":
                _observe(call, path, file, failures)
            continue
        if call.name == "write":
            after: set[State] = {str(args.get("content"))}
        else:
            after = {s for s in (_apply_edit(state, str(args.get("old", "")),
                                             str(args.get("new", "")))
                                 for state in file.states) if s is not None}
            if outcome == "success" and not after:
                failures.append(f"{call.where} succeeded, but {path} could only hold "
                                f"{_shown(file.states)}, where its old text is not once")
        if outcome == "success":
            file.states = after or file.states
        elif outcome == "stand-in":  # it may or may not have taken effect
            file.cut_writer = True
            file.states |= after
    return checked


def _observe(call: Call, path: str, file: _File, failures: list[str]) -> None:
    matching = _possible(call, path, file.states)
    if not matching:
        failures.append(f"{call.where} answered {(call.answer or '')[:160]!r}, but {path} "
                        f"could only hold {_shown(file.states)}")
        return
    file.states = matching


def _shown(states: Iterable[State]) -> str:
    return " or ".join(sorted("absent" if s is None else repr(s)[:100] for s in states))


def workspace_files_whole(layout: SquadLayout, transcripts: Mapping[str, Transcript]) -> Check:
    """Replaying every session's workspace calls: each file holds one content its calls could
    have left whole (a finished `edit` leaves exactly the edited text; a call a stop cut off
    leaves the content before or after it, never a torn one); every read, grep, find and bash
    saw a content the file could hold then; no temp file is left beside a file whose writes all
    finished, and no other file is there."""
    check = Check("every workspace file is whole, as its calls left it; every read saw it so")
    files: dict[str, _File] = {}
    for session_id, transcript in sorted(transcripts.items()):
        session_files: dict[str, _File] = {}
        check.checked += _replay(calls_of(session_id, transcript), session_files,
                                 check.failures)
        for path, file in session_files.items():
            known = files.setdefault(path, _File(states=set()))
            known.states |= file.states  # another session on the same task: either may be last
            known.cut_writer |= file.cut_writer
    folder = layout.repo / WORKSPACE_FOLDER
    entries = sorted(folder.iterdir()) if folder.is_dir() else []
    temps = []
    for entry in entries:
        relative = f"{WORKSPACE_FOLDER}/{entry.name}"
        temp = _TEMP_RE.match(entry.name)
        if temp is not None:
            target = f"{WORKSPACE_FOLDER}/{temp.group('target')}"
            if target in files and files[target].cut_writer:
                temps.append(relative)
            else:
                check.failures.append(f"{relative} is a temp file left beside {target}, though "
                                      "no write or edit of it was cut off by a stop")
        elif FILE_RE.match(entry.name) is None or not entry.is_file():
            check.failures.append(f"{relative} is not a file any call wrote")
        elif relative not in files:
            check.failures.append(f"{relative} is there, but no transcript has a call on it")
    edited = 0
    for path, file in sorted(files.items()):
        found = layout.repo / path
        actual: State = found.read_text(encoding="utf-8", errors="replace") \
            if found.is_file() else None
        if actual not in file.states:
            check.failures.append(f"{path} holds {_shown({actual})}, but its calls could only "
                                  f"leave {_shown(file.states)}")
        edited += actual is not None and "edited" in actual
    if check.checked == 0:
        check.failures.append("no workspace tool call was seen: the check proved nothing (is "
                              "Behaviour.workspace zero?)")
    check.notes = {"files": len(files), "edited": edited, "temp_files_left_by_stops": temps[:20]}
    return check


# Nothing outside the repository changes.

Snapshot = dict[str, tuple[str, int, int, str]]
"""Relative path -> (kind, size, mtime_ns, sha256) of everything under a folder."""


def snapshot(root: Path, *, skip: Iterable[str] = ()) -> Snapshot:
    """What is under `root` (symlinks not followed), leaving out the top-level names `skip`.
    A folder's time is part of it: a file made and removed again still shows."""
    left_out = set(skip)
    found: Snapshot = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if relative.parts[0] in left_out:
            continue
        info = path.lstat()
        kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if kind == "file" else ""
        found[str(relative)] = (kind, info.st_size, info.st_mtime_ns, digest)
    return found


def outside_untouched(before: Snapshot, after: Snapshot,
                      transcripts: Mapping[str, Transcript]) -> Check:
    """The folder around the repository is as it was (no file made, changed or removed, not
    even for a moment: folder times count), and every write or edit aimed outside failed."""
    check = Check("nothing outside the repository was written; every escape was refused")
    for name in sorted(set(before) | set(after)):
        check.checked += 1
        if name not in after:
            check.failures.append(f"{name} (outside the repository) was removed")
        elif name not in before:
            check.failures.append(f"{name} (outside the repository) was made during the run")
        elif before[name] != after[name]:
            check.failures.append(f"{name} (outside the repository) changed during the run")
    escapes = 0
    for session_id, transcript in sorted(transcripts.items()):
        for call in calls_of(session_id, transcript):
            path = str((call.arguments or {}).get("path", ""))
            if call.name not in ("write", "edit") or \
                    not path.startswith(("../", ESCAPE_LINK + "/")):
                continue
            escapes += 1
            check.checked += 1
            if call.outcome == "success":
                check.failures.append(f"{call.where} to {path} (outside the repository) "
                                      f"succeeded: {(call.answer or '')[:120]!r}")
    if escapes == 0:
        check.failures.append("no write or edit aimed outside the repository was seen: the "
                              "check proved nothing (is Behaviour.escape zero?)")
    check.notes = {"escape_calls": escapes}
    return check
