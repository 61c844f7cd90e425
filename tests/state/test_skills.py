"""Skills: SKILL.md in .github/skills/, .squad/skills/ and .copilot/skills/, in that order."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from squadd.errors import InvalidNameError, LimitExceededError, NotFoundError, StateError
from squadd.statcache import ABSENT_RECHECK_S
from squadd.state.layout import SquadLayout
from squadd.state.skills import (
    SkillSummaries,
    front_matter,
    list_known_skills,
    list_skills,
    read_skill,
    summary_cache,
    summary_of,
    with_confidence,
    write_skill,
)
from tests._helpers import snapshot

if TYPE_CHECKING:
    from squadd.state.layout import SkillSource


def _github_skill(squad: SquadLayout, name: str, text: str) -> None:
    folder = squad.repo / ".github" / "skills" / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(text)


def test_written_skill_reads_back_and_is_listed(squad: SquadLayout) -> None:
    path = write_skill(squad, "Git-Workflow", "# Git workflow\n\nRebase, never merge.")
    assert path == squad.root / "skills" / "git-workflow" / "SKILL.md"
    assert read_skill(squad, "git-workflow") == "# Git workflow\n\nRebase, never merge.\n"
    [info] = list_skills(squad)
    assert (info.name, info.source, info.summary) == ("git-workflow", "squad", "Git workflow")


def test_rewriting_a_skill_replaces_it(squad: SquadLayout) -> None:
    write_skill(squad, "deploy", "v1\n")
    write_skill(squad, "deploy", "v2\n")
    assert read_skill(squad, "deploy") == "v2\n"


def test_github_skills_are_read_and_listed(squad: SquadLayout) -> None:
    _github_skill(squad, "review", "---\nname: review\ndescription: Reviews code.\n---\n# Code\n")
    assert read_skill(squad, "review").endswith("# Code\n")
    [info] = list_skills(squad)
    assert (info.name, info.source, info.summary) == ("review", "github", "Reviews code.")


def _skill(folder: Path, name: str, text: str) -> None:
    (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / name / "SKILL.md").write_text(text, encoding="utf-8")


def test_github_skills_win_over_squad_and_copilot_skills(squad: SquadLayout) -> None:
    _skill(squad.copilot_skills_dir, "review", "# From Copilot\n")
    _skill(squad.skills_dir, "review", "# From the squad\n")
    _skill(squad.copilot_skills_dir, "lint", "# Lint\n")
    assert read_skill(squad, "review") == "# From the squad\n"
    _github_skill(squad, "review", "# From GitHub\n")
    assert read_skill(squad, "review") == "# From GitHub\n"
    listed = list_skills(squad)
    assert [(s.name, s.source, s.hidden) for s in listed] == [
        ("lint", "copilot", ()), ("review", "github", ("squad", "copilot"))]


def test_writes_go_to_github_skills_when_that_folder_exists(squad: SquadLayout) -> None:
    assert write_skill(squad, "first", "# One\n") == squad.skills_dir / "first" / "SKILL.md"
    squad.github_skills_dir.mkdir(parents=True)
    path = write_skill(squad, "second", "# Two\n")
    assert path == squad.github_skills_dir.resolve() / "second" / "SKILL.md"
    assert read_skill(squad, "second") == "# Two\n"


def test_the_index_line_is_the_front_matter_description() -> None:
    text = ('---\nname: "api-errors"\ndescription: >\n  How the API reports errors,\n'
            '  and which codes clients retry.\nconfidence: "high"\n---\n\n# API errors\n')
    assert summary_of(text) == "How the API reports errors, and which codes clients retry."
    assert summary_of("---\nname: x\n---\n\n## Heading here\nbody\n") == "Heading here"
    assert summary_of("---\nname: [unclosed\n---\n# Broken YAML\n") == "Broken YAML"
    assert len(summary_of(f"---\ndescription: {'w' * 500}\n---\n")) == 200


def test_confidence_is_set_in_the_front_matter() -> None:
    assert with_confidence("# Plain\n", "low") == '---\nconfidence: "low"\n---\n\n# Plain\n'
    fronted = '---\nname: "x"\ndescription: "d"\n---\n# X\n'
    once = with_confidence(fronted, "high")
    assert front_matter(once)[0] == {"name": "x", "description": "d", "confidence": "high"}
    again = with_confidence(once, "medium")
    assert front_matter(again)[0]["confidence"] == "medium" and again.count("confidence") == 1
    with pytest.raises(StateError, match="unknown confidence"):
        with_confidence(fronted, "total")


def test_a_skill_symlinked_out_of_its_folder_is_not_read(squad: SquadLayout,
                                                         tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "SKILL.md").write_text("secret\n")
    squad.copilot_skills_dir.mkdir(parents=True)
    (squad.copilot_skills_dir / "leak").symlink_to(outside)
    assert list_skills(squad) == []
    with pytest.raises(NotFoundError):
        read_skill(squad, "leak")


def test_missing_skill_error_lists_the_known_ones(squad: SquadLayout) -> None:
    write_skill(squad, "alpha", "a\n")
    with pytest.raises(NotFoundError, match="skills: alpha"):
        read_skill(squad, "beta")


def test_folders_with_bad_names_or_no_skill_file_are_not_listed(squad: SquadLayout) -> None:
    (squad.root / "skills" / "Bad Name").mkdir(parents=True)
    (squad.root / "skills" / "Bad Name" / "SKILL.md").write_text("x")
    (squad.root / "skills" / "empty").mkdir()
    assert list_skills(squad) == []


def test_oversized_empty_or_badly_named_skills_are_refused_and_nothing_written(
    squad: SquadLayout,
) -> None:
    before = snapshot(squad.root)
    with pytest.raises(LimitExceededError, match="limit of 65536 bytes"):
        write_skill(squad, "big", "x" * 65537)
    with pytest.raises(StateError, match="must not be empty"):
        write_skill(squad, "blank", "  \n")
    with pytest.raises(InvalidNameError):
        write_skill(squad, "../escape", "x")
    assert snapshot(squad.root) == before


def test_a_rewritten_skill_shows_its_new_description(squad: SquadLayout) -> None:
    summaries = summary_cache()
    write_skill(squad, "deploy", "---\ndescription: Old way.\n---\n")
    assert [s.summary for s in list_skills(squad, summaries)] == ["Old way."]
    assert len(summaries) == 1
    write_skill(squad, "deploy", "---\ndescription: New way.\n---\n")  # same size
    assert [s.summary for s in list_skills(squad, summaries)] == ["New way."]
    assert [s.summary for s in list_skills(squad)] == ["New way."]  # no cache: read again


def test_a_skill_file_symlinked_out_of_the_squad_is_not_listed(squad: SquadLayout,
                                                               tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("---\ndescription: leaked\n---\n")
    (squad.skills_dir / "leak").mkdir(parents=True)
    (squad.skills_dir / "leak" / "SKILL.md").symlink_to(secret)
    _skill(squad.skills_dir, "fine", "---\ndescription: kept\n---\n")
    assert [(s.name, s.summary) for s in list_skills(squad)] == [("fine", "kept")]


def test_a_squad_skills_folder_linked_out_of_the_squad_lists_nothing(
        squad: SquadLayout, tmp_path: Path) -> None:
    outside = tmp_path / "outside-skills"
    _skill(outside, "leak", "---\ndescription: leaked\n---\n")
    squad.skills_dir.symlink_to(outside)
    _github_skill(squad, "kept", "---\ndescription: kept\n---\n")
    assert [s.name for s in list_skills(squad)] == ["kept"]


def test_a_runtime_s_listing_looks_for_a_missing_folder_again_after_the_recheck_time(
        squad: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    summaries = SkillSummaries(clock=lambda: now[0])
    scanned: list[str] = []
    real = SquadLayout.skill_files_if_there

    def counted(layout: SquadLayout, source: SkillSource) -> list[tuple[str, Path]] | None:
        scanned.append(source)
        return real(layout, source)

    monkeypatch.setattr(SquadLayout, "skill_files_if_there", counted)
    assert list_known_skills(squad, summaries) == []
    assert sorted(scanned) == ["copilot", "github", "squad"]
    _github_skill(squad, "deploy", "# Deploy\n")
    scanned.clear()
    now[0] += ABSENT_RECHECK_S / 2
    # Missing a moment ago: not looked for again yet (the skill tool's listing always looks).
    assert list_known_skills(squad, summaries) == [] and scanned == []
    assert [s.name for s in list_skills(squad)] == ["deploy"]
    scanned.clear()
    now[0] += ABSENT_RECHECK_S
    assert [s.name for s in list_skills(squad, summaries)] == ["deploy"]
    assert sorted(scanned) == ["copilot", "github", "squad"]
    # A folder that is there is looked at every time.
    scanned.clear()
    assert [s.name for s in list_known_skills(squad, summaries)] == ["deploy"]
    assert scanned == ["github"]
