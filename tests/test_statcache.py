"""The stat-keyed cache: a hit costs a stat, a changed file is loaded again, the bound holds,
threads share it safely, and two owners never share entries."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from squadd.statcache import ABSENT_RECHECK_S, Absences, NotCached, StatCache, text_cache


def _counting_cache() -> tuple[StatCache[str], list[Path]]:
    """A cache of texts, and the paths it loaded, in order."""
    loads: list[Path] = []

    def load(path: Path) -> str:
        loads.append(path)
        return path.read_text()

    return StatCache(load), loads


def test_an_unchanged_file_is_loaded_once_and_a_changed_one_again(tmp_path: Path) -> None:
    cache, loads = _counting_cache()
    path = tmp_path / "a.md"
    path.write_text("one")
    assert cache.get(path) == cache.get(path) == "one"
    assert loads == [path]
    path.write_text("two!")  # another size
    assert cache.get(path) == "two!"
    st = path.stat()
    path.write_text("six!")  # same size: mtime/ctime tell it apart
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert cache.get(path) == "six!"
    assert len(loads) == 3


def test_peek_answers_an_unchanged_file_without_loading_and_refuses_the_rest(
        tmp_path: Path) -> None:
    cache, loads = _counting_cache()
    path = tmp_path / "a.md"
    path.write_text("one")
    with pytest.raises(NotCached):  # never loaded
        cache.peek(path)
    assert cache.get(path) == "one"
    assert cache.peek(path) == "one"
    path.write_text("two!")
    with pytest.raises(NotCached):  # changed: only `get` loads it again
        cache.peek(path)
    assert loads == [path]
    path.unlink()
    with pytest.raises(FileNotFoundError):
        cache.peek(path)
    assert len(cache) == 0


def test_a_missing_file_raises_and_leaves_no_entry(tmp_path: Path) -> None:
    cache = text_cache()
    path = tmp_path / "gone.md"
    path.write_text("here")
    assert cache.get(path) == "here"
    path.unlink()
    with pytest.raises(FileNotFoundError):
        cache.get(path)
    assert len(cache) == 0


def test_the_oldest_entry_goes_first_past_the_bound(tmp_path: Path) -> None:
    cache = text_cache(limit=3)
    paths = []
    for i in range(5):
        path = tmp_path / f"{i}.md"
        path.write_text(str(i))
        paths.append(path)
        cache.get(path)
    assert len(cache) == 3


def test_threads_share_one_cache_without_losing_or_mixing_entries(tmp_path: Path) -> None:
    cache = text_cache(limit=8)
    paths = []
    for i in range(16):
        path = tmp_path / f"{i}.md"
        path.write_text(f"text {i}")
        paths.append(path)
    wrong: list[str] = []
    barrier = threading.Barrier(8)

    def reader(offset: int) -> None:
        barrier.wait()
        for round_ in range(300):
            path = paths[(offset + round_) % len(paths)]
            if cache.get(path) != f"text {path.stem}":
                wrong.append(path.name)

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert wrong == [] and len(cache) <= 8


async def test_two_runtimes_in_one_process_share_no_cache_or_spare_files(
        tmp_path: Path) -> None:
    from squadd.config import Settings
    from squadd.providers.replay import ReplayProvider, ReplayScript
    from squadd.runtime.runtime import SquadRuntime
    from tests.runtime.scripted import make_squad

    first = make_squad(tmp_path / "one")
    second = make_squad(tmp_path / "two")
    provider = ReplayProvider(ReplayScript())
    a = SquadRuntime(first, Settings(), provider)
    b = SquadRuntime(second, Settings(), provider)
    assert a.files is not b.files and a.spares is not b.spares
    assert a._charters is not b._charters and a.router is not b.router
    assert a.skill_summaries is not b.skill_summaries and a.secrets is not b.secrets
    a.files.get(first.charter("lead"))
    assert len(a.files) == 1 and len(b.files) == 0


def test_a_path_found_missing_is_taken_as_missing_until_the_recheck_time(tmp_path: Path) -> None:
    now = [10.0]
    absences = Absences(lambda: now[0])
    one, other = tmp_path / "one", tmp_path / "other"
    assert not absences.known_missing(one)
    absences.missing(one)
    now[0] += ABSENT_RECHECK_S * 0.99
    assert absences.known_missing(one) and not absences.known_missing(other)
    now[0] += ABSENT_RECHECK_S * 0.02
    assert not absences.known_missing(one)
