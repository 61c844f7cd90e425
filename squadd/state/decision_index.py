"""The Scribe's index of decisions.md: one hash per entry, so a duplicate check costs what the new
entries cost, not what the file weighs.

File layout: a header naming the decisions.md it covers (inode, size, mtime, a digest of the last
4 KB, fence state), then sorted 16-byte entry hashes (binary-searched through mmap), then unsorted
hashes appended since the last sort. A stale or damaged index is rebuilt from decisions.md; when
decisions.md only grew, just the new tail is parsed.
"""

from __future__ import annotations

import bisect
import hashlib
import mmap
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from squadd.fsio import atomic_write
from squadd.state.decisions import parse_entries
from squadd.state.layout import SquadLayout

_MAGIC = b"SQDIDX01"
_HEADER = struct.Struct("<8sQQq16sQQ8s")
_RECORD = 16
_TAIL_PROBE = 4096
MAX_UNSORTED = 4096
"""Hashes appended unsorted before the index is rewritten sorted (amortizes the rewrite)."""


def normalize_entry(text: str) -> str:
    """An entry with whitespace and line endings made irrelevant: runs of them become one space."""
    return " ".join(text.split())


def entry_digest(text: str) -> bytes:
    """The 16-byte hash that identifies an entry for the duplicate check."""
    return hashlib.blake2b(normalize_entry(text).encode("utf-8"), digest_size=_RECORD).digest()


def fence_parity(text: str) -> int:
    """1 when `text` leaves a ``` code fence open (the rule parse_entries uses), else 0."""
    return sum(1 for line in text.split("\n") if line.lstrip().startswith("```")) % 2


@dataclass(frozen=True)
class _Covered:
    """The state of decisions.md that the index describes."""

    inode: int
    size: int
    mtime_ns: int
    tail: bytes
    open_fence: int

    @classmethod
    def of(cls, fd: int | None, open_fence: int) -> _Covered:
        if fd is None:
            return cls(0, 0, 0, b"\0" * _RECORD, open_fence)
        stat = os.fstat(fd)
        return cls(stat.st_ino, stat.st_size, stat.st_mtime_ns, _tail_digest(fd, stat.st_size),
                   open_fence)

    def header(self, sorted_count: int) -> bytes:
        body = _HEADER.pack(_MAGIC, self.inode, self.size, self.mtime_ns, self.tail,
                            sorted_count, self.open_fence, b"\0" * 8)
        checksum = hashlib.blake2b(body[:-8], digest_size=8).digest()
        return body[:-8] + checksum


def _tail_digest(fd: int, size: int) -> bytes:
    start = max(0, size - _TAIL_PROBE)
    return hashlib.blake2b(os.pread(fd, size - start, start), digest_size=_RECORD).digest()


def _open_decisions(layout: SquadLayout) -> int | None:
    """decisions.md opened through the stays-inside reader (a directory, a FIFO or a link out
    of the repository is a `StateError` naming it); None when there is none yet."""
    try:
        return layout.open_file(layout.decisions_md)
    except FileNotFoundError:
        return None


def _read_all(fd: int) -> str:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0).decode("utf-8", errors="replace")


class _SortedView:
    """The sorted hash records of an mmap, as a sequence `bisect` can search."""

    def __init__(self, buffer: mmap.mmap, count: int):
        self._buffer = buffer
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: int) -> bytes:
        offset = _HEADER.size + i * _RECORD
        return self._buffer[offset:offset + _RECORD]


class DecisionIndex:
    """Entry hashes of decisions.md. Open it with `DecisionIndex.open` under the Scribe lock."""

    def __init__(self, layout: SquadLayout, *, writable: bool):
        self._layout = layout
        self._path = layout.decisions_index
        self._writable = writable
        self._map: mmap.mmap | None = None
        self._sorted: _SortedView | None = None
        self._sorted_count = 0
        self._unsorted: set[bytes] = set()
        self._unsorted_records = 0
        self._covered = _Covered(0, 0, 0, b"\0" * _RECORD, 0)
        self.rebuilt = False
        """True when this open had to re-parse the whole of decisions.md."""

    @classmethod
    def open(cls, layout: SquadLayout, *, writable: bool = True) -> DecisionIndex:
        """Load the index, catching it up with decisions.md (or rebuilding it) first.

        With `writable=False` (a dry run) nothing is written: a stale index is rebuilt in memory.
        """
        index = cls(layout, writable=writable)
        if not index._load_current():
            index.rebuild()
        return index

    def __contains__(self, digest: object) -> bool:
        if digest in self._unsorted:
            return True
        if self._sorted is None or not isinstance(digest, bytes):
            return False
        at = bisect.bisect_left(self._sorted, digest)
        return at < len(self._sorted) and self._sorted[at] == digest

    def __len__(self) -> int:
        return self._sorted_count + len(self._unsorted)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
            self._sorted = None

    def __enter__(self) -> DecisionIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def rebuild(self) -> None:
        """Hash every entry of decisions.md afresh and (when writable) save the index sorted."""
        fd = _open_decisions(self._layout)
        try:
            text = _read_all(fd) if fd is not None else ""
            covered = _Covered.of(fd, fence_parity(text))
        finally:
            if fd is not None:
                os.close(fd)
        digests = {entry_digest(entry.text) for entry in parse_entries(text).entries}
        self._replace(covered, digests)
        self.rebuilt = True

    def record_append(self, digests: Iterable[bytes], appended: str) -> None:
        """Add the hashes of entries just appended (and fsynced) to decisions.md as `appended`."""
        new = list(digests)
        self._unsorted.update(new)
        fd = _open_decisions(self._layout)
        try:
            covered = _Covered.of(fd, self._covered.open_fence ^ fence_parity(appended))
        finally:
            if fd is not None:
                os.close(fd)
        self._covered = covered
        if not self._writable:
            return
        if self._unsorted_records + len(new) > MAX_UNSORTED:
            self._replace(covered, self._all_digests())
            return
        self._append_records(new, covered)

    def _all_digests(self) -> set[bytes]:
        out = set(self._unsorted)
        if self._sorted is not None:
            out.update(self._sorted[i] for i in range(len(self._sorted)))
        return out

    def _append_records(self, digests: list[bytes], covered: _Covered) -> None:
        fd = os.open(self._path, os.O_RDWR)
        try:
            end = os.fstat(fd).st_size
            whole = _HEADER.size + (end - _HEADER.size) // _RECORD * _RECORD
            payload = b"".join(digests)
            written = 0
            while written < len(payload):
                written += os.pwrite(fd, payload[written:], whole + written)
            os.fsync(fd)
            # The header goes last: until it lands, the old one still describes decisions.md
            # truthfully, and the extra hashes are of entries that decisions.md already holds.
            os.pwrite(fd, covered.header(self._sorted_count), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._unsorted_records += len(digests)

    def _replace(self, covered: _Covered, digests: set[bytes]) -> None:
        self.close()
        records = sorted(digests)
        self._covered = covered
        self._unsorted = set()
        self._unsorted_records = 0
        self._sorted_count = len(records)
        if not self._writable:
            self._unsorted = set(records)
            self._sorted_count = 0
            return
        atomic_write(self._path, covered.header(len(records)) + b"".join(records))
        self._map_sorted()

    def _map_sorted(self) -> None:
        if self._sorted_count == 0:
            return
        with open(self._path, "rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        self._sorted = _SortedView(self._map, self._sorted_count)

    def _load_current(self) -> bool:
        """Load the saved index if it describes decisions.md, catching up on appends; else False."""
        try:
            raw_header = self._read_header()
        except (FileNotFoundError, ValueError):
            return False
        covered, sorted_count = raw_header
        fd = _open_decisions(self._layout)
        try:
            now = os.fstat(fd) if fd is not None else None
            same = (now is None and covered.size == 0 and covered.inode == 0) or (
                now is not None and (now.st_ino, now.st_size, now.st_mtime_ns)
                == (covered.inode, covered.size, covered.mtime_ns)
            )
            suffix: str | None = None
            if not same:
                if (now is None or now.st_ino != covered.inode or now.st_size <= covered.size
                        or covered.open_fence or fd is None
                        or _tail_digest(fd, covered.size) != covered.tail):
                    return False
                suffix = os.pread(fd, now.st_size - covered.size, covered.size).decode(
                    "utf-8", errors="replace")
        finally:
            if fd is not None:
                os.close(fd)
        new: list[bytes] = []
        if suffix is not None:
            parsed = parse_entries(suffix)
            if parsed.preamble.strip() and covered.size > 0:
                return False  # the last entry was extended in place: its hash is stale
            new = [entry_digest(entry.text) for entry in parsed.entries]
        self._covered = covered
        self._sorted_count = sorted_count
        self._load_records()
        if suffix is not None:
            self.record_append(new, suffix)
        return True

    def _read_header(self) -> tuple[_Covered, int]:
        with open(self._path, "rb") as handle:
            head = handle.read(_HEADER.size)
            size = os.fstat(handle.fileno()).st_size
        if len(head) < _HEADER.size:
            raise ValueError("short index header")
        magic, inode, dsize, mtime_ns, tail, sorted_count, flags, checksum = _HEADER.unpack(head)
        expected = hashlib.blake2b(head[:-8], digest_size=8).digest()
        if magic != _MAGIC or checksum != expected:
            raise ValueError("bad index header")
        if _HEADER.size + sorted_count * _RECORD > size:
            raise ValueError("index shorter than its sorted records")
        return _Covered(inode, dsize, mtime_ns, tail, int(flags & 1)), sorted_count

    def _load_records(self) -> None:
        self._map_sorted()
        with open(self._path, "rb") as handle:
            handle.seek(_HEADER.size + self._sorted_count * _RECORD)
            rest = handle.read()
        whole = len(rest) // _RECORD * _RECORD
        self._unsorted = {rest[i:i + _RECORD] for i in range(0, whole, _RECORD)}
        self._unsorted_records = whole // _RECORD

