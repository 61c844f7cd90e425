"""`read` pages numbered lines and refuses binary files; `write` is atomic and makes folders."""

from __future__ import annotations

import stat
from pathlib import Path

from squadd.config import Settings
from squadd.state.layout import SquadLayout
from tests.tools.builtin.conftest import Calls


async def test_read_numbers_lines_and_pages_by_range(calls: Calls, repo: Path) -> None:
    (repo / "long.txt").write_text("".join(f"line {n}\n" for n in range(1, 26)),
                                   encoding="utf-8")
    page = await calls("read", path="long.txt", offset=9, limit=3)
    assert page.ok
    assert page.text.splitlines() == [
        " 9\tline 9", "10\tline 10", "11\tline 11",
        "[lines 9-11 of 25; call read with offset=12 to read on]"]
    last = await calls("read", path="long.txt", offset=24)
    assert last.text.splitlines() == ["24\tline 24", "25\tline 25"]
    past = await calls("read", path="long.txt", offset=26)
    assert not past.ok and "offset 26 is past the end of long.txt, which has 25 lines" \
        in past.text


async def test_read_pages_at_the_output_line_limit(repo: Path) -> None:
    settings = Settings.model_validate({"tools": {"max_output_lines": 10}})
    calls = Calls(SquadLayout.at(repo / ".squad"), settings)
    (repo / "long.txt").write_text("x\n" * 30, encoding="utf-8")
    page = await calls("read", path="long.txt", limit=100)
    assert page.text.splitlines()[-1] == "[lines 1-8 of 30; call read with offset=9 to read on]"
    assert "full_output" not in page.details  # paged, not spilled


async def test_read_refuses_binary_and_missing_files(calls: Calls, repo: Path) -> None:
    (repo / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    binary = await calls("read", path="image.png")
    assert not binary.ok and "image.png is a binary file" in binary.text
    missing = await calls("read", path="nope/none.txt")
    assert not missing.ok and "nope does not exist" in missing.text
    folder = await calls("read", path=".squad")
    assert not folder.ok and ".squad is a folder" in folder.text


async def test_read_cuts_very_long_lines(repo: Path) -> None:
    settings = Settings.model_validate({"workspace_tools": {"max_line_chars": 100}})
    calls = Calls(SquadLayout.at(repo / ".squad"), settings)
    (repo / "min.js").write_text("a" * 250 + "\n", encoding="utf-8")
    result = await calls("read", path="min.js")
    assert result.text == "1\t" + "a" * 100 + "… [150 more characters]"


async def test_write_creates_folders_and_replaces_atomically(calls: Calls, repo: Path) -> None:
    created = await calls("write", path="src/pkg/new.py", content="x = 1\n")
    assert created.ok and created.text == "created src/pkg/new.py: 6 bytes, 1 lines"
    assert (repo / "src" / "pkg" / "new.py").read_text(encoding="utf-8") == "x = 1\n"
    replaced = await calls("write", path="src/pkg/new.py", content="x = 2\ny = 3")
    assert replaced.ok and replaced.text.startswith("replaced src/pkg/new.py")
    assert (repo / "src" / "pkg" / "new.py").read_text(encoding="utf-8") == "x = 2\ny = 3"
    assert sorted(p.name for p in (repo / "src" / "pkg").iterdir()) == ["new.py"]  # no temp


async def test_write_keeps_an_existing_files_mode(calls: Calls, repo: Path) -> None:
    script = repo / "run.sh"
    script.write_text("#!/bin/sh\n", encoding="utf-8")
    script.chmod(0o755)
    result = await calls("write", path="run.sh", content="#!/bin/sh\necho hi\n")
    assert result.ok
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


async def test_write_over_the_byte_limit_is_a_clear_refusal(repo: Path) -> None:
    settings = Settings.model_validate({"workspace_tools": {"max_write_bytes": 10}})
    calls = Calls(SquadLayout.at(repo / ".squad"), settings)
    result = await calls("write", path="big.txt", content="0123456789A")
    assert not result.ok
    assert "11 bytes, over the limit of 10 per call (workspace_tools.max_write_bytes)" \
        in result.text
    assert not (repo / "big.txt").exists()


async def test_write_onto_a_folder_is_refused(calls: Calls, repo: Path) -> None:
    (repo / "src").mkdir()
    result = await calls("write", path="src", content="x")
    assert not result.ok and "src is a folder" in result.text
    assert (repo / "src").is_dir()


async def test_read_pages_by_bytes_too_so_a_page_is_never_spilled(repo: Path) -> None:
    settings = Settings.model_validate({"tools": {"max_output_bytes": 1024}})
    calls = Calls(SquadLayout.at(repo / ".squad"), settings)
    (repo / "wide.txt").write_text("".join(f"{n:03} " + "w" * 96 + "\n" for n in range(1, 31)),
                                   encoding="utf-8")
    page = await calls("read", path="wide.txt")
    lines = page.text.splitlines()
    assert "full_output" not in page.details
    assert lines[-1] == "[lines 1-4 of 30; call read with offset=5 to read on]"
    assert lines[0].startswith(" 1\t001 ") and lines[3].startswith(" 4\t004 ")
    assert len(page.text.encode("utf-8")) <= 1024
