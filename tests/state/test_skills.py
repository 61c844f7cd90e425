"""Skills: SKILL.md under .squad/skills/ (read, write, list) and read-only .github/skills/."""

from __future__ import annotations

import pytest

from squadd.errors import InvalidNameError, LimitExceededError, NotFoundError, StateError
from squadd.state.layout import SquadLayout
from squadd.state.skills import list_skills, read_skill, write_skill
from tests._helpers import snapshot


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
    _github_skill(squad, "review", "---\nname: review\n---\n# Code review\n")
    assert read_skill(squad, "review").endswith("# Code review\n")
    [info] = list_skills(squad)
    assert (info.name, info.source) == ("review", "github")


def test_squad_skill_hides_a_github_skill_of_the_same_name(squad: SquadLayout) -> None:
    _github_skill(squad, "review", "# From GitHub\n")
    write_skill(squad, "review", "# From the squad\n")
    assert read_skill(squad, "review") == "# From the squad\n"
    assert [(s.name, s.source) for s in list_skills(squad)] == [("review", "squad")]


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
