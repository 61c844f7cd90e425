"""Durable file primitives: atomic replace under a concurrent reader, appends, O_EXCL, locks."""

from __future__ import annotations

import errno
import os
import select
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from squadd.errors import LockTimeoutError
from squadd.fsio import (
    HAS_SYNCFS,
    append_fsync,
    atomic_write,
    atomic_write_at,
    create_exclusive,
    file_lock,
    read_text,
    sync_file_system,
)
from tests._helpers import REPO_ROOT

REWRITES = 1000
PAYLOAD_BYTES = 48 * 1024

_WRITER = """
import sys
from pathlib import Path
from squadd.fsio import atomic_write
path = Path(sys.argv[1])
for version in range(1, int(sys.argv[2]) + 1):
    tag = f"{version:06d}".encode()
    atomic_write(path, tag + b"\\n" + bytes([65 + version % 26]) * int(sys.argv[3]) + b"\\n" + tag)
"""


def _check_whole(data: bytes) -> int:
    """The version number of a complete payload; fails the test on a partial or mixed file."""
    assert len(data) == PAYLOAD_BYTES + 14, f"partial file: {len(data)} bytes"
    head, body, tail = data[:6], data[7:-7], data[-6:]
    assert head == tail, f"mixed file: starts as version {head!r}, ends as {tail!r}"
    version = int(head)
    assert body == bytes([65 + version % 26]) * PAYLOAD_BYTES, "body of another version"
    return version


@pytest.mark.slow
def test_reader_never_sees_a_partial_file_during_1000_atomic_rewrites(tmp_path: Path) -> None:
    path = tmp_path / "shared.md"
    atomic_write(path, b"000000\n" + b"A" * PAYLOAD_BYTES + b"\n000000")
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), str(REWRITES), str(PAYLOAD_BYTES)],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stderr=subprocess.PIPE, text=True,
    )
    seen: set[int] = set()
    reads = 0
    try:
        deadline = time.monotonic() + 120
        while writer.poll() is None:
            assert time.monotonic() < deadline, "the writer did not finish in 120 s"
            seen.add(_check_whole(path.read_bytes()))
            reads += 1
    finally:
        if writer.poll() is None:
            writer.kill()
        _, stderr = writer.communicate(timeout=10)
    assert writer.returncode == 0, stderr
    assert _check_whole(path.read_bytes()) == REWRITES
    # The reader really ran alongside the writer: it saw the file change many times.
    assert reads >= 50 and len(seen) >= 10, (reads, len(seen))
    assert [p.name for p in tmp_path.iterdir()] == ["shared.md"], "temp files left behind"


def test_atomic_write_replaces_content_and_sets_mode(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "file.txt"
    atomic_write(path, "first")
    atomic_write(path, "second", mode=0o600)
    assert path.read_text() == "second"
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["file.txt"]


def test_atomic_write_that_fails_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "file.txt"
    atomic_write(path, "old")
    with pytest.raises(TypeError):
        atomic_write(path, object())  # type: ignore[arg-type]
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.txt"]


def test_append_fsync_appends_in_order(tmp_path: Path) -> None:
    path = tmp_path / "log" / "events.jsonl"
    for index in range(5):
        append_fsync(path, f"{index}\n")
    assert path.read_text() == "0\n1\n2\n3\n4\n"


def test_create_exclusive_never_replaces_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "inbox" / "lead-x.md"
    assert create_exclusive(path, "mine") is True
    assert create_exclusive(path, "theirs") is False
    assert path.read_text() == "mine"


def test_read_text_returns_default_for_a_missing_file(tmp_path: Path) -> None:
    assert read_text(tmp_path / "nope.md", "fallback") == "fallback"


_HOLDER = """
import sys
from pathlib import Path
from squadd.fsio import file_lock
with file_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()  # until the test lets go (or is gone: end of file)
"""


def test_lock_held_by_another_process_times_out_with_a_clear_error(tmp_path: Path) -> None:
    lock = tmp_path / "run" / "locks" / "history.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(lock)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        said, _, _ = select.select([holder.stdout], [], [], 30)
        assert said and holder.stdout.readline() == "held\n", \
            "the lock holder never took the lock"
        started = time.monotonic()
        with pytest.raises(LockTimeoutError) as caught, file_lock(lock, timeout=0.3):
            pass
        waited = time.monotonic() - started
        assert waited >= 0.3
        assert str(lock) in str(caught.value) and "0.3s" in str(caught.value)
        holder.stdin.close()  # let go
        holder.wait(timeout=30)
        with file_lock(lock, timeout=5):
            pass  # free again once the holder is gone
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)
        holder.stdin.close()
        holder.stdout.close()


def test_lock_is_exclusive_between_two_holders_in_one_process(tmp_path: Path) -> None:
    lock = tmp_path / "a.lock"
    with file_lock(lock), pytest.raises(LockTimeoutError), file_lock(lock, timeout=0.05):
        pass
    with file_lock(lock, shared=True), file_lock(lock, shared=True, timeout=0.05):
        pass  # shared locks do not exclude each other


def test_atomic_write_at_writes_into_the_opened_folder_even_once_it_is_renamed(
        tmp_path: Path) -> None:
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "a.txt").write_text("old", encoding="utf-8")
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        folder.rename(tmp_path / "moved")
        folder.symlink_to(tmp_path / "elsewhere")  # the name now leads somewhere else
        atomic_write_at(fd, "a.txt", "new", mode=0o600)
    finally:
        os.close(fd)
    moved = tmp_path / "moved"
    assert (moved / "a.txt").read_text(encoding="utf-8") == "new"
    assert stat.S_IMODE((moved / "a.txt").stat().st_mode) == 0o600
    assert sorted(p.name for p in moved.iterdir()) == ["a.txt"]  # no temp file left
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.skipif(not HAS_SYNCFS, reason="no syncfs here")
def test_a_whole_file_system_is_synced_and_a_bad_descriptor_is_an_error(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert sync_file_system(fd) is True
    finally:
        os.close(fd)
    with pytest.raises(OSError) as raised:
        sync_file_system(fd)  # closed now
    assert raised.value.errno == errno.EBADF
