"""What squadd creates for itself is private: files 0600 in folders 0700 (transcripts, stored
prompts, journals, the daemon's log, tool output spills, run/), also folders an older squadd
left open; the team's committed files keep the ordinary 0644. Checked on what a real daemon
wrote for a routed task that used tools, and on the file primitives themselves."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from squadd.fsio import (
    PRIVATE_FILE,
    TEAM_FILE,
    append_fsync,
    atomic_write,
    create_exclusive,
    open_private,
    private_dir,
)
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess
from tests.support.model_servers import OpenAIServer

CONFIG = FAST_CONFIG + "\n[tools]\nmax_output_lines = 5\n"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _everything(folder: Path) -> Iterator[Path]:
    yield folder
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            yield Path(root) / name


@pytest.fixture(autouse=True)
def ordinary_umask() -> Iterator[None]:
    """The umask most people have: without the code's own modes, files would be 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_the_file_primitives_make_new_files_private_and_keep_team_files_shared(
        tmp_path: Path) -> None:
    atomic_write(tmp_path / "new" / "deep" / "spill.txt", "x")
    assert _mode(tmp_path / "new" / "deep" / "spill.txt") == PRIVATE_FILE
    assert _mode(tmp_path / "new") == _mode(tmp_path / "new" / "deep") == 0o700
    append_fsync(tmp_path / "log" / "a.log", "x")
    assert _mode(tmp_path / "log" / "a.log") == PRIVATE_FILE and _mode(tmp_path / "log") == 0o700
    assert create_exclusive(tmp_path / "journal", "x")
    assert _mode(tmp_path / "journal") == PRIVATE_FILE
    with open_private(tmp_path / "out" / "console.log") as out:
        out.write(b"x")
    assert _mode(tmp_path / "out" / "console.log") == PRIVATE_FILE
    team = tmp_path / "team"
    assert create_exclusive(team / "charter.md", "x", mode=TEAM_FILE)
    atomic_write(team / "history.md", "x", new_mode=TEAM_FILE)
    assert _mode(team / "charter.md") == _mode(team / "history.md") == 0o644
    assert _mode(team) == 0o755
    atomic_write(team / "charter.md", "replaced")  # a replace keeps the file's mode
    assert _mode(team / "charter.md") == 0o644
    loose = tmp_path / "older"
    loose.mkdir(mode=0o755)
    assert _mode(private_dir(loose)) == 0o700


@pytest.mark.slow
def test_a_daemon_run_leaves_its_own_files_private_and_the_team_files_shared(
        tmp_path: Path) -> None:
    with OpenAIServer() as server:
        process = DaemonProcess.in_new_repo(tmp_path, server.url, config=CONFIG)
        layout = process.layout
        (layout.repo / "notes.txt").write_text("needle\n" * 50, encoding="utf-8")
        for older in (layout.run_dir, layout.root / "tool-output"):  # as an older squadd left
            older.mkdir(mode=0o755, exist_ok=True)
            older.chmod(0o755)
        server.script(
            OpenAIServer.tool_call_turn(("grep", {"pattern": "needle"})),
            OpenAIServer.tool_call_turn(("squad_memory", {
                "agentName": "lead", "content": "notes.txt holds needles"})),
            OpenAIServer.text_turn("done"))
        with process as daemon:
            routed = daemon.client.route("look for needles", "lead")
            assert "done" in str(routed), routed
            assert daemon.squadd("stop").returncode == 0
            daemon.wait(60)
    private = [layout.run_dir, layout.root / "tool-output"]
    spills = list((layout.root / "tool-output").rglob("*.txt"))
    transcripts = list(layout.transcripts_dir.glob("*.jsonl"))
    assert spills and transcripts and layout.log_file.exists()
    for folder in private:
        for path in _everything(folder):
            if path.is_symlink():
                continue
            expected = 0o700 if path.is_dir() else PRIVATE_FILE
            if stat.S_ISSOCK(path.lstat().st_mode):
                continue  # gone after a stop; 0600 while it lives
            assert _mode(path) == expected, f"{path} is {oct(_mode(path))}"
    for team in (layout.decisions_md, layout.team_md, layout.charter("lead"),
                 layout.history("lead")):
        assert _mode(team) == 0o644, f"{team} is {oct(_mode(team))}"
    assert "needles" in layout.history("lead").read_text(encoding="utf-8")
