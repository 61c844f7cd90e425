"""`init_squad`: the scaffold is copied once, never over an existing file, templates left out."""

from __future__ import annotations

from pathlib import Path

import pytest

from squadd.errors import PathEscapeError, StateError
from squadd.state.decisions import parse_decisions
from squadd.state.history import learnings
from squadd.state.scaffold import init_squad, scaffold_files, template_root
from squadd.state.team import member_names
from tests._helpers import snapshot

EXPECTED = {
    ".gitignore", "team.md", "routing.md", "decisions.md", "decisions/inbox/.gitkeep",
    "agents/scribe/charter.md", "agents/scribe/history.md",
}


def test_init_creates_the_scaffold_without_the_templates(repo: Path) -> None:
    result = init_squad(repo)
    assert result.squad_dir == repo.resolve() / ".squad"
    assert result.created_dir and not result.legacy and result.existing == []
    created = {str(p.relative_to(result.squad_dir)) for p in result.created}
    assert created == EXPECTED
    assert not (result.squad_dir / "templates").exists()
    for relative in EXPECTED:
        assert (result.squad_dir / relative).read_bytes() == (
            template_root() / relative).read_bytes()


def test_second_init_creates_nothing_and_changes_no_byte(repo: Path) -> None:
    init_squad(repo)
    before = snapshot(repo)
    again = init_squad(repo)
    assert again.created == [] and not again.created_dir
    assert {str(p.relative_to(again.squad_dir)) for p in again.existing} == EXPECTED
    assert snapshot(repo) == before


def test_init_never_overwrites_an_edited_file_and_restores_a_deleted_one(repo: Path) -> None:
    squad = init_squad(repo).squad_dir
    (squad / "team.md").write_text("# Our team\n")
    (squad / "routing.md").unlink()
    result = init_squad(repo)
    assert [p.name for p in result.created] == ["routing.md"]
    assert (squad / "team.md").read_text() == "# Our team\n"


def test_init_uses_a_legacy_ai_team_folder_in_place(repo: Path) -> None:
    (repo / ".ai-team").mkdir()
    result = init_squad(repo)
    assert result.legacy and result.squad_dir == repo.resolve() / ".ai-team"
    assert (repo / ".ai-team" / "team.md").is_file()
    assert not (repo / ".squad").exists()


def test_init_refuses_a_squad_path_that_is_a_file(repo: Path) -> None:
    (repo / ".squad").write_text("not a folder")
    with pytest.raises(StateError, match="is not a folder"):
        init_squad(repo)


def test_init_refuses_a_scaffold_folder_that_escapes_the_squad_dir(
    repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / ".squad").mkdir()
    (repo / ".squad" / "agents").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathEscapeError):
        init_squad(repo)
    assert list(outside.iterdir()) == []


def test_scaffold_files_leave_out_templates(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "charter.md").write_text("x")
    (tmp_path / "team.md").write_text("x")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "junk.pyc").write_text("x")
    assert scaffold_files(tmp_path) == [Path("team.md")]


def test_scaffold_content_parses(repo: Path) -> None:
    squad = init_squad(repo).squad_dir
    assert member_names((squad / "team.md").read_text()) == ["scribe"]
    assert parse_decisions(squad / "decisions.md").entries == []
    assert learnings((squad / "agents" / "scribe" / "history.md").read_text()) == []
    routing = (squad / "routing.md").read_text()
    assert "| Work Type | Route To | Examples |" in routing
    ignored = (squad / ".gitignore").read_text().splitlines()
    assert [line for line in ignored if not line.startswith("#")] == [
        "run/", "tool-output/", "worktrees/"]
