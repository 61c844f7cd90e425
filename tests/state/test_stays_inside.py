"""Every file squadd reads from the squad goes through one "stays inside" rule: a symlink that
leads outside the repository is refused with a clear reason and never read, and a FIFO never
blocks a reader. Each reader is tried: skills (index and read, `.squad/` and `.github/`),
charters (read, roster, the runtime's cache, the prompt), routing.md, history, decisions.md and
tool files (Python and YAML)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from squadd.errors import NotFoundError, StateError
from squadd.runtime.planning import CharterCache
from squadd.runtime.prompt import gather
from squadd.runtime.router import Router
from squadd.state.charters import read_charter, roster
from squadd.state.layout import SquadLayout
from squadd.state.skills import list_skills, read_skill
from tests.runtime.scripted import make_squad
from tests.tools.custom_tools import discover

SECRET = "machine api.example login root password hunter2"


@pytest.fixture
def squad(tmp_path: Path) -> SquadLayout:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".netrc").write_text(SECRET + "\n", encoding="utf-8")
    return make_squad(tmp_path / "repo")


def _link_out(path: Path) -> None:
    """Replace `path` with a symlink to the secret outside the repository."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    secret = path
    while secret.name != "repo":
        secret = secret.parent
    path.symlink_to(secret.parent / "home" / ".netrc")


def _charter_cache(layout: SquadLayout) -> CharterCache:
    return CharterCache(layout)


@pytest.mark.parametrize("where", ["squad", "github"])
def test_a_skill_leading_outside_is_left_out_and_never_read(
        squad: SquadLayout, where: str) -> None:
    base = squad.root / "skills" if where == "squad" else squad.repo / ".github" / "skills"
    _link_out(base / "netrc" / "SKILL.md")
    (base / "fine" / "SKILL.md").parent.mkdir(parents=True)
    (base / "fine" / "SKILL.md").write_text("# Deploying\nsteps\n", encoding="utf-8")
    skills = {s.name: s for s in list_skills(squad)}
    assert skills["fine"].summary == "Deploying" and "netrc" not in skills
    with pytest.raises(NotFoundError):
        read_skill(squad, "netrc")
    prompt = gather(squad, "lead", None)
    assert SECRET not in prompt.skills and "fine" in prompt.skills


@pytest.mark.parametrize("reader", ["read_charter", "roster", "cache", "prompt"])
def test_a_charter_leading_outside_is_never_read(squad: SquadLayout, reader: str) -> None:
    _link_out(squad.root / "agents" / "fenster" / "charter.md")
    if reader == "read_charter":
        with pytest.raises(StateError, match="outside"):
            read_charter(squad, "fenster")
    elif reader == "roster":
        entry = {r.name: r for r in roster(squad)}["fenster"]
        assert SECRET not in entry.role
    elif reader == "cache":
        assert _charter_cache(squad).get("fenster") is None
        assert _charter_cache(squad).get("lead") is not None
    else:
        parts = gather(squad, "fenster", None)
        assert SECRET not in parts.charter and "was not read" in parts.charter


@pytest.mark.parametrize("name", ["history", "decisions"])
def test_history_and_decisions_leading_outside_stay_out_of_the_prompt(
        squad: SquadLayout, name: str) -> None:
    path = squad.history("lead") if name == "history" else squad.decisions_md
    _link_out(path)
    parts = gather(squad, "lead", None)
    assert SECRET not in f"{parts.history}{parts.decisions}"


def test_a_routing_md_leading_outside_gives_no_rules_and_says_why(squad: SquadLayout) -> None:
    _link_out(squad.root / "routing.md")
    router = Router(squad)
    assert router.rules() == []
    assert router.problem is not None and "outside" in router.problem
    assert "not read" in router.describe() and SECRET not in router.describe()
    assert router.choose("fix the login bug", lambda agent: True) is None


@pytest.mark.parametrize("filename, text", [
    ("leak.py", "from squadd import tool\n\n@tool\ndef leak() -> str:\n    'x'\n    return ''\n"),
    ("leak.yaml", "description: d\nbash: echo hi\n"),
])
def test_a_tool_file_leading_outside_is_a_load_failure_and_is_not_run(
        squad: SquadLayout, filename: str, text: str) -> None:
    target = squad.repo.parent / "home" / filename
    target.write_text(text, encoding="utf-8")
    (squad.root / "tools").mkdir(exist_ok=True)
    (squad.root / "tools" / filename).symlink_to(target)
    found = discover(squad)
    assert "leak" not in {tool.name for tool in found.tools}
    [failure] = [f for f in found.failures if f.file.name == filename]
    assert "outside" in failure.reason


def test_symlinks_that_stay_inside_are_read(squad: SquadLayout) -> None:
    shared = squad.root / "shared" / "deploy.md"  # a squad file linked within the squad dir
    shared.parent.mkdir()
    shared.write_text("# Deploy by the book\n", encoding="utf-8")
    (squad.root / "skills" / "deploy").mkdir(parents=True)
    (squad.root / "skills" / "deploy" / "SKILL.md").symlink_to(shared)
    docs = squad.repo / "docs" / "review.md"  # a .github skill linked within the repository
    docs.parent.mkdir()
    docs.write_text("# Review checklist\n", encoding="utf-8")
    (squad.repo / ".github" / "skills" / "review").mkdir(parents=True)
    (squad.repo / ".github" / "skills" / "review" / "SKILL.md").symlink_to(docs)
    assert read_skill(squad, "deploy") == "# Deploy by the book\n"
    with pytest.raises(NotFoundError):  # a skill link must stay inside its own skill folder
        read_skill(squad, "review")
    summaries = {s.name: s.summary for s in list_skills(squad)}
    assert summaries["deploy"] == "Deploy by the book"
    assert "review" not in summaries


@pytest.mark.parametrize("read", [
    lambda layout: list_skills(layout),
    lambda layout: gather(layout, "lead", None),
])
def test_a_fifo_in_place_of_a_file_is_refused_without_blocking(
        squad: SquadLayout, read: Callable[[SquadLayout], object]) -> None:
    (squad.root / "skills" / "pipe").mkdir(parents=True)
    os.mkfifo(squad.root / "skills" / "pipe" / "SKILL.md")
    squad.charter("lead").unlink()
    os.mkfifo(squad.charter("lead"))
    read(squad)  # returns: a FIFO opened for reading would block here forever
    assert "pipe" not in {s.name for s in list_skills(squad)}
