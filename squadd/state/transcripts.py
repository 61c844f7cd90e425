"""Session transcripts: `.squad/run/transcripts/{id}.jsonl`, one JSON record a line, append + fsync.

(`sessions/` belongs to Squad, which commits it; transcripts an older squadd wrote there are
still listed, read and continued in place.)

Records are ``meta`` (who, what task), ``message`` (every system, user, assistant and tool
message), and ``state`` (completed, error, interrupted, ...). A torn last line from a crash is
ignored on read and fenced off by a newline on the next append, so no earlier line is ever lost.

A system prompt is most of a new session's bytes and the same for many sessions, so it is kept
once, in `.prompts/{digest}.txt` beside the transcripts (`PromptFiles`), made durable before any
record names it; the system message's record holds its digest (``"prompt"``) instead of its text,
and reading puts the text back. A transcript in the older `sessions/` folder keeps its prompts
inline.

Every record of one transcript, from the route's acceptance to the session's end, goes through
one `TranscriptSink`: the file sink (`FileSink`: appended here, made durable by the group commit)
or, in a cluster worker, the sink that forwards them to the coordinator
(`squadd.worker.session.ForwardingSink`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from squadd.fsio import atomic_write, fsync_dir, private_dir, write_all
from squadd.state.layout import SquadLayout
from squadd.state.spare_files import SPARES_DIRNAME as SPARES_DIRNAME
from squadd.state.spare_files import SpareFiles as SpareFiles
from squadd.state.spare_files import open_new as open_new

_SECOND: tuple[int, str] = (0, "")
"""The last second `now_iso` wrote, and its text (one tuple: replaced whole, never changed)."""


def now_iso() -> str:
    """The time now in UTC, as `datetime.isoformat(timespec="milliseconds")` writes it
    (`2026-11-27T09:58:33.265+00:00`). Every record has one, so the text up to the second is
    made once a second."""
    global _SECOND
    now = time.time()
    second = int(now)
    known = _SECOND
    if known[0] != second:
        known = _SECOND = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{known[1]}.{int((now - second) * 1000):03d}+00:00"


PROMPTS_DIRNAME = ".prompts"
_DIGEST_RE = re.compile(r"^[0-9a-f]{32}$")
LOST_PROMPT_TEXT = ("(squadd: this system prompt's file, .prompts/{digest}.txt, is missing "
                    "or damaged)")
"""A system message's text when the file its record names is gone or does not hold the text
its digest names; the record is also marked ``"prompt_lost": true``."""


class PromptFiles:
    """System prompts kept once each, by digest, for the transcripts in one folder.

    `keep` makes a prompt's file durable (once: a temp file, fsync, rename, folder fsync)
    before it returns the digest a record may name, so a record is never durable before the
    text it points at. A file is named by its content's digest and checked against it, so any
    number of writers and processes may share the folder, and a damaged file is written anew.
    """

    KNOWN = 64
    """Prompts remembered as durable by text, newest last (a few agents' current prompts)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def kept(self, text: str) -> bool:
        """Whether this process has made `text`'s file durable already (then `keep` costs no
        I/O, and the event loop may call it)."""
        with self._lock:
            return text in self._known

    def keep(self, text: str) -> str:
        """The digest naming `text`'s file, made durable first if this process has not seen it
        (blocking, unless `kept`)."""
        with self._lock:
            digest = self._known.pop(text, None)
            if digest is not None:
                self._known[text] = digest  # now the newest
                return digest
        digest = prompt_digest(text)
        path = self.folder / f"{digest}.txt"
        try:
            whole = _load_prompt(path, digest) == text  # read from disk, not the readers' cache
        except (OSError, ValueError):
            whole = False
        if whole:  # another writer made it: its folder entry may not be synced yet
            fsync_dir(self.folder)
        else:  # none yet, or a damaged one
            private_dir(self.folder)
            atomic_write(path, text)
        with self._lock:
            self._known[text] = digest
            while len(self._known) > self.KNOWN:
                del self._known[next(iter(self._known))]
        return digest


def prompt_digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def _load_prompt(path: Path, digest: str) -> str:
    """The text of a prompt's file, checked against its digest (`ValueError` if it is not the
    text the digest names, `OSError` if it cannot be read)."""
    text = path.read_text(encoding="utf-8")
    if prompt_digest(text) != digest:
        raise ValueError(f"{path} does not hold the text its name's digest names")
    return text


_cached_prompt = functools.lru_cache(maxsize=32)(_load_prompt)
"""`_load_prompt` for readers: a checked text never changes (a failure is not cached)."""


def _with_prompt(record: dict[str, Any], folder: Path) -> dict[str, Any]:
    """`record` with the text of the system prompt it names (`"prompt"`) put back in its
    message (blocking); marked ``"prompt_lost"`` with a note as its text when the file is
    gone or damaged, or the digest is not one (so never a path outside `folder`)."""
    message = record.get("message")
    if not isinstance(message, dict) or "content" in message:
        return record
    digest = record["prompt"]
    try:
        if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
            raise ValueError(f"{digest!r} is not a prompt's digest")
        return {**record, "message": {**message,
                                      "content": _cached_prompt(folder / f"{digest}.txt", digest)}}
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        note = LOST_PROMPT_TEXT.format(digest=str(digest)[:40])
        return {**record, "prompt_lost": True, "message": {**message, "content": note}}


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
"""Compact JSON from one encoder (`json.dumps` given any option makes one on every call)."""

_APPEND_FLAGS = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW
"""A transcript is never a link: one at its name is refused (`ELOOP`), not followed. A new
session's path (`SquadLayout.new_transcript`) relies on it: only its folder is checked.
Read as well as written: a writer's first append to a file it did not make reads the file's
last byte through the same descriptor (`_ends_torn`)."""


class TranscriptWriter:
    """Buffers records and appends them to the transcript with one write and one fsync."""

    def __init__(self, path: Path, spares: SpareFiles | None = None,
                 prompts: PromptFiles | None = None, *, new: bool = False):
        self.path = path
        self._new = new
        """The file is not expected to exist yet: the first append makes it at once, without
        first trying to open one (a file found there all the same is appended to)."""
        self.spares = spares
        """The owner's files made ahead; a new transcript takes one when it can."""
        self.prompts = prompts if prompts is not None and \
            prompts.folder == path.parent / PROMPTS_DIRNAME else None
        """Where system prompts are kept once (None: a system message's text is inline)."""
        self._pending: list[str] = []
        self._needs_fence: bool | None = None
        self.written = 0
        """Records handed to the file so far (appended, or on their way)."""

    def add(self, kind: str, **fields: Any) -> None:
        record = {"kind": kind, "ts": now_iso(), **fields}
        self._pending.append(_encode(record))

    def system_fields(self, text: str) -> dict[str, Any]:
        """The fields of a system message's record (for `add("message", ...)`): the digest of
        its text, kept once in `prompts`, else the text itself. Blocking the first time a text
        is seen (its file is written and synced; see `PromptFiles.kept`)."""
        if self.prompts is None:
            return {"message": {"role": "system", "content": text}}
        return {"message": {"role": "system"}, "prompt": self.prompts.keep(text)}

    @property
    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> None:
        """Append what is pending and fsync it (call in a worker thread from async code)."""
        self._write(sync=True)

    def append_unsynced(self) -> Appended | None:
        """Append what is pending without syncing it (blocking), for a group commit that makes
        it durable (see `squadd.state.journal`); what was written, or None when nothing was."""
        return self._write(sync=False)

    def _write(self, *, sync: bool) -> Appended | None:
        if not self._pending:
            return None
        # Taken so that records the session adds meanwhile (on the loop, while a group
        # commit's thread appends) stay for the next append: each list operation is atomic.
        taken = self._pending[:]
        del self._pending[:len(taken)]
        self.written += len(taken)
        payload = "\n".join(taken) + "\n"
        fd, created, empty = self._open()
        try:
            if self._needs_fence is None:
                self._needs_fence = _ends_torn(fd)
            if self._needs_fence:
                payload = "\n" + payload
                self._needs_fence = False
            data = payload.encode("utf-8")
            try:
                write_all(fd, data)
            except OSError:  # part of a line may be on disk: the next append checks for it
                self._needs_fence = None
                raise
            # O_APPEND: the end of what was just written (a file made empty here ends there)
            end = len(data) if empty else os.lseek(fd, 0, os.SEEK_CUR)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if created and sync:
            fsync_dir(self.path.parent)
        return Appended(self.path, end, data, created)

    def _open(self) -> tuple[int, bool, bool]:
        """The transcript's fd for appending; whether this writer's first append made it (or
        found it made by another writer since it looked); and whether it is empty, made here
        just now (nobody else appends to a new session's file)."""
        flags = _APPEND_FLAGS
        if not self._new:
            try:
                return os.open(self.path, flags), False, False
            except FileNotFoundError:
                pass
        self._new = False
        spares = self.spares if self.spares is not None and \
            self.spares.folder.parent == self.path.parent else None
        try:
            fd = open_new(self.path, flags, spares)
        except FileExistsError:  # another writer made it meanwhile: append to theirs
            return os.open(self.path, flags), True, False
        self._needs_fence = False
        return fd, True, True


@dataclass(frozen=True)
class Appended:
    """Records a writer appended: the file, the offset their last byte ends at, the bytes."""

    path: Path
    end: int
    data: bytes
    created: bool


def _ends_torn(fd: int) -> bool:
    """Whether the open file ends in the middle of a line (a write cut short by a crash or a
    full disk): its last byte, read through the descriptor the append goes through."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


class Riding(Protocol):
    """Records on their way to being durable while the session goes on (`send_ahead`)."""

    async def finished(self) -> None:
        """Wait until they are durable (what writing them raised, when they could not be)."""
        ...


class TranscriptSink(Protocol):
    """Where every record of one transcript goes, from the route's acceptance to the session's
    end. Records are added (no I/O) and made durable together: `flush` from a worker thread,
    `commit` from the event loop, or `send_ahead` while a model request is out."""

    def add(self, kind: str, **fields: Any) -> None:
        """Buffer one record (`meta`, `message`, `state`, ...), stamped with the time."""
        ...

    def system_fields(self, text: str) -> dict[str, Any]:
        """The fields of a system message's record (blocking the first time a prompt is kept
        by digest: see `TranscriptWriter.system_fields`)."""
        ...

    @property
    def pending(self) -> int:
        """How many records are not durable yet."""
        ...

    @property
    def written(self) -> int:
        """How many records were handed on so far (appended, sent, or on their way)."""
        ...

    def flush(self) -> None:
        """Make every record added so far durable (blocking: from a worker thread)."""
        ...

    async def commit(self) -> None:
        """Make every record added so far durable (from the event loop; callers shield it)."""
        ...

    async def send_ahead(self, on_error: Callable[[], None]) -> Riding:
        """Start making the records added so far durable and return before they are:
        `on_error` is called (on the loop) as soon as writing them has failed."""
        ...


class Committer(Protocol):
    """How a file sink's records are made durable from the event loop: the runtime's group
    commit (`squadd.state.journal.GroupCommit`, which syncs a writer by itself when it is not
    running)."""

    async def commit(self, writer: TranscriptWriter) -> None: ...

    def begin(self, writer: TranscriptWriter, *,
              on_error: Callable[[], None] | None = None) -> Any: ...

    async def finish(self, pending: Any) -> None: ...


class FileSink:
    """The file sink: a transcript's records appended to its file (`TranscriptWriter`) and
    made durable with other sessions' in the group commit's batches."""

    def __init__(self, writer: TranscriptWriter, commits: Committer):
        self.writer = writer
        self._commits = commits

    @property
    def path(self) -> Path:
        return self.writer.path

    def add(self, kind: str, **fields: Any) -> None:
        self.writer.add(kind, **fields)

    def system_fields(self, text: str) -> dict[str, Any]:
        return self.writer.system_fields(text)

    @property
    def pending(self) -> int:
        return self.writer.pending

    @property
    def written(self) -> int:
        return self.writer.written

    def flush(self) -> None:
        self.writer.flush()

    async def commit(self) -> None:
        if self.writer.pending:
            await self._commits.commit(self.writer)

    async def send_ahead(self, on_error: Callable[[], None]) -> Riding:
        return _Begun(self._commits, self._commits.begin(self.writer, on_error=on_error))


class _Begun:
    """Records a file sink handed to the group commit's next batch."""

    def __init__(self, commits: Committer, pending: Any):
        self._commits = commits
        self._pending = pending

    async def finished(self) -> None:
        await self._commits.finish(self._pending)


class FileSinks:
    """Makes each transcript's one file sink: the transcript sink factory of a runtime."""

    def __init__(self, layout: SquadLayout, commits: Committer, spares: SpareFiles,
                 prompts: PromptFiles):
        self.layout = layout
        self.commits = commits
        self.spares = spares
        self.prompts = prompts

    def new(self, session_id: str) -> FileSink:
        """A new session's sink: its file does not exist yet (the layout checks its folder
        only, a few stats: the event loop may call it)."""
        return FileSink(TranscriptWriter(self.layout.new_transcript(session_id), self.spares,
                                         self.prompts, new=True), self.commits)

    def existing(self, session_id: str, path: Path | None = None) -> FileSink:
        """The sink of a session whose transcript exists (here or in the older folder), or
        at `path`, found and checked through the layout before."""
        return FileSink(TranscriptWriter(path or self.layout.transcript(session_id),
                                         self.spares, self.prompts), self.commits)


@dataclass
class Transcript:
    """A parsed transcript: its meta record, its messages and its state changes."""

    session_id: str
    meta: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    states: list[dict[str, Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    torn_lines: int = 0
    lost_prompt: bool = False
    """A system prompt its records name by digest could not be read back (see `PromptFiles`)."""

    @property
    def last_state(self) -> str | None:
        return self.states[-1]["state"] if self.states else None

    @property
    def final_answer(self) -> str | None:
        for state in reversed(self.states):
            if state.get("state") == "completed":
                answer = state.get("answer")
                return str(answer) if answer is not None else None
        return None


def read_transcript(path: Path) -> Transcript:
    """Parse a transcript, skipping a torn (unparseable) line left by a crash."""
    session_id = path.name.removesuffix(".jsonl")
    transcript = Transcript(session_id=session_id)
    prompts = path.parent / PROMPTS_DIRNAME
    with path.open("rb") as handle:
        for raw in handle:
            line = raw.strip()
            if not line:
                continue
            record = _record(line, prompts)
            if record is None:
                transcript.torn_lines += 1
                continue
            transcript.records.append(record)
            kind = record.get("kind")
            if kind == "meta":
                transcript.meta.update(record)
            elif kind == "message" and isinstance(record.get("message"), dict):
                transcript.messages.append(record["message"])
                transcript.lost_prompt = transcript.lost_prompt or "prompt_lost" in record
            elif kind == "state":
                transcript.states.append(record)
    return transcript


def _record(line: bytes, prompts: Path) -> dict[str, Any] | None:
    """The record a transcript line holds, its system prompt's text put back from `prompts`;
    None for a torn or foreign line."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict):
        return None
    return _with_prompt(record, prompts) if "prompt" in record else record


def read_tail(path: Path, count: int) -> tuple[list[dict[str, Any]], int]:
    """The last `count` records of a transcript, and how many lines it holds in all (blocking).
    Only the kept lines are parsed, so showing the end of a long transcript costs a read of
    it, not a parse; a torn line counts in the total but is not shown."""
    kept: deque[bytes] = deque(maxlen=max(count, 0))
    total = 0
    with path.open("rb") as handle:
        for raw in handle:
            line = raw.strip()
            if line:
                total += 1
                kept.append(line)
    prompts = path.parent / PROMPTS_DIRNAME
    records = [record for line in kept if (record := _record(line, prompts)) is not None]
    return records, total


def list_transcripts(layout: SquadLayout) -> list[Path]:
    """Transcript files, oldest first: `run/transcripts/`, and the older `sessions/` ones that
    have no newer copy (only `*.jsonl` files there: Squad's own session files are left alone)."""
    files: dict[str, Path] = {}
    for folder in (layout.transcripts_dir, layout.legacy_transcripts_dir):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if path.suffix == ".jsonl" and path.is_file():
                files.setdefault(path.name, path)
    return sorted(files.values(), key=lambda p: (p.stat().st_mtime_ns, p.name))
