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
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import itertools
import json
import os
import re
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from squadd.fsio import (
    PRIVATE_FILE,
    atomic_write,
    fsync_dir,
    libc_function,
    private_dir,
    write_all,
)
from squadd.statcache import NotCached
from squadd.state.layout import SquadLayout

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


SPARES_DIRNAME = ".spares"
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

    def keep(self, text: str, *, cached_only: bool = False) -> str:
        """The digest naming `text`'s file, made durable first if this process has not seen it
        (blocking; with `cached_only` a prompt not seen yet raises `NotCached` instead)."""
        with self._lock:
            digest = self._known.pop(text, None)
            if digest is not None:
                self._known[text] = digest  # now the newest
                return digest
        if cached_only:
            raise NotCached("a system prompt this process has not kept yet")
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


class SpareFiles:
    """Empty files made ahead of time, so a new session's first write is an append.

    Creating and syncing a new file is the costliest step of a session's first write (on a
    long-used ext4, creating one can take a millisecond of the kernel's time). A background
    task (`refill`) creates spares in `run/transcripts/.spares/` and makes them durable with
    one folder sync; a writer that needs a new transcript, or a new orchestration-log entry,
    moves one into place instead (made durable by the same folder sync the write needs
    anyway). Several processes may
    share the folder. A spare moves to its target with one `renameat2(RENAME_NOREPLACE)`, which
    never replaces a transcript another writer made; where that call is missing, a spare is
    claimed by a rename within `.spares/` (one taker wins), then hard-linked to its target.
    """

    def __init__(self, sessions_dir: Path):
        self.folder = sessions_dir / SPARES_DIRNAME
        self._names: deque[str] = deque()
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._adopted = False
        self.usable = True
        """False once the file system refused a hard link: `refill` then makes none."""

    def __len__(self) -> int:
        return len(self._names)

    def refill(self, target: int) -> int:
        """Create spares until `target` are known (blocking); return how many were made."""
        if not self.usable:
            return 0
        private_dir(self.folder)
        if not self._adopted:  # spares an earlier process made and never used
            self._adopted = True
            with self._lock:
                self._names.extend(entry.name for entry in os.scandir(self.folder)
                                   if _is_spare(entry))
        made: list[str] = []
        stem = f"{os.getpid()}-{secrets.token_hex(4)}"
        while len(self._names) + len(made) < target:
            name = f"{stem}-{next(self._counter)}"
            fd = os.open(self.folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
            os.close(fd)
            made.append(name)
        if made:
            fsync_dir(self.folder)  # the new (empty) files are durable before anyone takes one
            with self._lock:
                self._names.extend(made)
        return len(made)

    def take_into(self, target: Path) -> bool:
        """Make a spare the new file `target`; False when none is left, `target` exists (an
        existing file is never replaced), or its folder is missing or on another file
        system."""
        while True:
            with self._lock:
                if not self._names:
                    return False
                name = self._names.popleft()
            spare = self.folder / name
            moved = _rename_noreplace(spare, target)
            if moved is True:
                return True
            if moved == "taken" and not os.path.lexists(spare):
                continue  # another process took it
            if moved in ("taken", "exists", "elsewhere"):  # the spare stays for another file
                with self._lock:
                    self._names.appendleft(name)
                return False
            claimed = self.folder / (name + _TAKEN)
            try:
                spare.rename(claimed)
            except FileNotFoundError:
                continue  # another process took it
            try:
                os.link(claimed, target)
            except (FileExistsError, FileNotFoundError):
                return False
            except OSError as exc:
                if exc.errno == errno.EXDEV:  # another file system: this target only
                    return False
                # a file system without hard links: spares cannot help here
                self.usable = False
                with self._lock:
                    self._names.clear()
                return False
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(claimed)
            return True


def open_new(target: Path, flags: int, spares: SpareFiles | None, *,
             mode: int = PRIVATE_FILE) -> int:
    """Open `target` as a new file with `flags` and `mode`: a spare moved into place when one
    is left, else one created here (and its folder, private for a private file, if missing).
    `FileExistsError` when `target` exists: a new file never replaces one."""
    if spares is not None and spares.take_into(target):
        fd = os.open(target, flags)
        if mode != PRIVATE_FILE:  # spares are made private
            os.fchmod(fd, mode)
        return fd
    try:
        return os.open(target, flags | os.O_CREAT | os.O_EXCL, mode)
    except FileNotFoundError:
        if mode & 0o077:
            target.parent.mkdir(parents=True, exist_ok=True)
        else:
            private_dir(target.parent)
        return os.open(target, flags | os.O_CREAT | os.O_EXCL, mode)


_RENAMEAT2 = libc_function("renameat2", ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                           ctypes.c_char_p, ctypes.c_uint)
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def _rename_noreplace(source: Path, target: Path) -> bool | str:
    """Move `source` to `target` in one step unless `target` exists (Linux renameat2).

    True when moved; "taken" when `source` (or `target`'s folder) is missing; "exists" when
    `target` exists; "elsewhere" when `target` is on another file system; False when the
    system cannot do it (no renameat2, or a file system without RENAME_NOREPLACE).
    """
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target),
                  _RENAME_NOREPLACE) == 0:
        return True
    code = ctypes.get_errno()
    if code == errno.ENOENT:
        return "taken"
    if code == errno.EEXIST:
        return "exists"
    if code == errno.EXDEV:
        return "elsewhere"
    return False


_TAKEN = ".taken"
"""Suffix of a spare claimed by a writer; one left by a crash mid-take is never adopted."""


def _is_spare(entry: os.DirEntry[str]) -> bool:
    if entry.name.endswith(_TAKEN) or not entry.is_file(follow_symlinks=False):
        return False
    st = entry.stat(follow_symlinks=False)
    return st.st_size == 0 and st.st_nlink == 1


_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW
"""A transcript is never a link: one at its name is refused (`ELOOP`), not followed. A new
session's path (`SquadLayout.new_transcript`) relies on it: only its folder is checked."""


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

    def add(self, kind: str, **fields: Any) -> None:
        record = {"kind": kind, "ts": now_iso(), **fields}
        self._pending.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))

    def system_fields(self, text: str, *, cached_only: bool = False) -> dict[str, Any]:
        """The fields of a system message's record (for `add("message", ...)`): the digest of
        its text, kept once in `prompts`, else the text itself. Blocking: the first time a text
        is seen its file is written and synced; with `cached_only` that raises `NotCached`
        instead, before anything is added."""
        if self.prompts is None:
            return {"message": {"role": "system", "content": text}}
        return {"message": {"role": "system"},
                "prompt": self.prompts.keep(text, cached_only=cached_only)}

    @property
    def pending(self) -> int:
        return len(self._pending)

    def ends_clean(self) -> None:
        """Tell the writer the file ends with a whole line (its caller wrote all of it), so
        its first append need not read the file's last byte to check for a torn line."""
        self._needs_fence = False

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
        payload = "\n".join(taken) + "\n"
        fd, created, empty = self._open()
        try:
            if self._needs_fence is None:
                self._needs_fence = _ends_torn(self.path)
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


def _ends_torn(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except FileNotFoundError:
        return False


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
