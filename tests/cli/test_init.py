"""`squadd init`: creates .squad/, lists what it created, and is idempotent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from squadd.cli.app import main
from tests._helpers import snapshot


def test_init_lists_what_it_created(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(main, ["init"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Created .squad/:\n")
    for name in ("team.md", "routing.md", "decisions.md", "decisions/inbox/.gitkeep",
                 "agents/scribe/charter.md", ".gitignore"):
        assert f"  {name}\n" in result.output
    assert (repo / ".squad" / "team.md").is_file()
    assert not (repo / ".squad" / "templates").exists()


def test_second_init_says_nothing_to_do_and_changes_no_byte(repo: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["init", "--dir", str(repo)]).exit_code == 0
    before = snapshot(repo)
    again = runner.invoke(main, ["init", "--dir", str(repo)])
    assert again.exit_code == 0
    assert again.output.startswith("nothing to do")
    assert snapshot(repo) == before


def test_init_restores_a_missing_file_only(repo: Path) -> None:
    runner = CliRunner()
    runner.invoke(main, ["init", "--dir", str(repo)])
    (repo / ".squad" / "team.md").write_text("# Mine\n")
    (repo / ".squad" / "routing.md").unlink()
    result = runner.invoke(main, ["init", "--dir", str(repo)])
    assert result.exit_code == 0
    assert "Added missing files to" in result.output and "routing.md" in result.output
    assert "team.md" not in result.output
    assert (repo / ".squad" / "team.md").read_text() == "# Mine\n"


def test_init_json_reports_created_and_existing(repo: Path) -> None:
    runner = CliRunner()
    first = json.loads(runner.invoke(main, ["init", "--dir", str(repo), "--json"]).stdout)
    assert first["squad_dir"] == str(repo.resolve() / ".squad") and not first["legacy"]
    assert "team.md" in first["created"] and first["existing"] == []
    second = json.loads(runner.invoke(main, ["init", "--dir", str(repo), "--json"]).stdout)
    assert second["created"] == [] and sorted(second["existing"]) == sorted(first["created"])


def test_init_uses_a_legacy_ai_team_in_place(repo: Path) -> None:
    (repo / ".ai-team").mkdir()
    result = CliRunner().invoke(main, ["init", "--dir", str(repo)])
    assert result.exit_code == 0
    assert "legacy .ai-team/" in result.output
    assert (repo / ".ai-team" / "team.md").is_file() and not (repo / ".squad").exists()


def test_init_on_a_squad_path_that_is_a_file_is_a_clean_error(repo: Path) -> None:
    (repo / ".squad").write_text("x")
    result = CliRunner().invoke(main, ["init", "--dir", str(repo)])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and "is not a folder" in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_init_in_a_subfolder_of_a_squad_warns_that_the_outer_one_is_shadowed(
    repo: Path,
) -> None:
    runner = CliRunner()
    runner.invoke(main, ["init", "--dir", str(repo)])
    inner = repo / "sub"
    inner.mkdir()
    result = runner.invoke(main, ["init", "--dir", str(inner)])
    assert result.exit_code == 0
    assert "no longer used from here" in result.stderr
