"""The squad dir: detection by walking up, the legacy .ai-team/, the naming rule, path escapes."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import pytest

import squadd.state.layout as layout_module
from squadd.contracts.names import NAME_RULE, safe_name
from squadd.errors import InvalidNameError, PathEscapeError, SquadNotFoundError
from squadd.state.decisions import write_inbox_entry
from squadd.state.history import append_learning
from squadd.state.layout import FOLDER_RECHECK_S, SquadLayout, find_squad_dir, safe_id
from squadd.state.skills import write_skill
from squadd.state.transcripts import list_transcripts
from tests._helpers import snapshot

BAD_NAMES = ["../x", "a/b", "", "a\x00b", "n" * 200, "..", ".hidden", "-dash", "a..b", "a b"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_are_refused_with_the_rule_shown(name: str) -> None:
    with pytest.raises(InvalidNameError) as caught:
        safe_name(name)
    assert NAME_RULE in str(caught.value)


def test_a_200_character_name_is_shown_shortened_in_the_error() -> None:
    with pytest.raises(InvalidNameError) as caught:
        safe_name("n" * 200)
    assert "n" * 200 not in str(caught.value) and "..." in str(caught.value)


def test_good_names_pass_and_are_lower_cased() -> None:
    assert safe_name("Lead") == "lead"
    assert safe_name("a" * 64) == "a" * 64
    assert safe_name("web-dev_2.0") == "web-dev_2.0"
    with pytest.raises(InvalidNameError):
        safe_name("a" * 65)


def test_skill_names_say_skill_in_the_error() -> None:
    with pytest.raises(InvalidNameError, match="invalid skill name"):
        safe_name("../etc", kind="skill")


def test_ids_used_as_file_names_are_checked() -> None:
    assert safe_id("sess-01H.abc") == "sess-01H.abc"
    for bad in ("../x", "a/b", "", "x" * 129):
        with pytest.raises(InvalidNameError):
            safe_id(bad)


@pytest.mark.parametrize("name", ["../x", "a/b", "", "a\x00b", "n" * 200])
def test_bad_names_write_nothing_anywhere(squad: SquadLayout, name: str) -> None:
    before = snapshot(squad.repo)
    with pytest.raises(InvalidNameError, match=re.escape(NAME_RULE)):
        append_learning(squad, name, "x")
    with pytest.raises(InvalidNameError, match=re.escape(NAME_RULE)):
        write_inbox_entry(squad, agent=name, title="t", body="b")
    with pytest.raises(InvalidNameError, match=re.escape(NAME_RULE)):
        write_skill(squad, name, "# Skill\n")
    assert snapshot(squad.repo) == before


def test_squad_dir_is_found_by_walking_up(squad: SquadLayout) -> None:
    nested = squad.repo / "src" / "pkg" / "deep"
    nested.mkdir(parents=True)
    assert find_squad_dir(nested) == squad.root
    assert SquadLayout.find(nested).root == squad.root
    assert SquadLayout.find(nested).repo == squad.repo


def test_missing_squad_dir_error_names_squadd_init(tmp_path: Path) -> None:
    with pytest.raises(SquadNotFoundError, match="squadd init"):
        find_squad_dir(tmp_path)


def test_legacy_ai_team_is_used_in_place(tmp_path: Path) -> None:
    legacy = tmp_path / ".ai-team"
    legacy.mkdir()
    (tmp_path / "sub").mkdir()
    assert find_squad_dir(tmp_path / "sub") == legacy
    assert SquadLayout.for_repo(tmp_path).root == legacy
    layout = SquadLayout.find(tmp_path / "sub")
    append_learning(layout, "lead", "works in the legacy folder")
    assert (legacy / "agents" / "lead" / "history.md").is_file()
    assert not (tmp_path / ".squad").exists()


def test_squad_is_preferred_over_legacy_in_the_same_folder(tmp_path: Path) -> None:
    (tmp_path / ".ai-team").mkdir()
    (tmp_path / ".squad").mkdir()
    assert find_squad_dir(tmp_path) == tmp_path / ".squad"


def test_for_repo_without_a_squad_dir_points_at_a_new_squad_folder(tmp_path: Path) -> None:
    assert SquadLayout.for_repo(tmp_path).root == tmp_path.resolve() / ".squad"


def test_symlinked_agent_folder_escaping_the_squad_dir_is_refused(
    squad: SquadLayout, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (squad.agents_dir / "evil").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathEscapeError, match="outside"):
        squad.charter("evil")
    with pytest.raises(PathEscapeError):
        append_learning(squad, "evil", "planted")
    assert list(outside.iterdir()) == []


def test_symlinked_inbox_escaping_the_squad_dir_is_refused(
    squad: SquadLayout, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    inbox = squad.root / "decisions" / "inbox"
    for child in inbox.iterdir():
        child.unlink()
    inbox.rmdir()
    inbox.symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathEscapeError):
        write_inbox_entry(squad, agent="lead", title="t", body="b")
    assert list(outside.iterdir()) == []


def test_symlink_that_stays_inside_is_allowed(squad: SquadLayout) -> None:
    (squad.root / "shared").mkdir()
    (squad.agents_dir / "alias").symlink_to(squad.root / "shared", target_is_directory=True)
    assert squad.history("alias") == squad.root / "shared" / "history.md"


def test_inside_refuses_dot_dot_paths(squad: SquadLayout) -> None:
    with pytest.raises(PathEscapeError):
        squad.inside(squad.root / ".." / "secrets.txt")
    assert squad.inside(squad.root / "agents" / ".." / "team.md") == squad.team_md


def test_inside_reads_a_path_given_as_text_as_the_path_it_names(
        squad: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    target = squad.root / "agents" / "lead" / "history.md"
    assert squad.inside(f"{squad.root}//agents/./lead/history.md/") == target
    monkeypatch.chdir(squad.root)
    assert squad.inside(Path("agents/lead/history.md")) == target
    assert squad.inside(Path()) == squad.root
    # a sibling whose name starts with the squad dir's is not inside it
    sibling = squad.root.parent / (squad.root.name + "-other")
    sibling.mkdir()
    with pytest.raises(PathEscapeError):
        squad.inside(sibling / "x.md")
    # a folder on the way that is a link out is seen, whatever the path's spelling
    (squad.root / "out").symlink_to(sibling, target_is_directory=True)
    with pytest.raises(PathEscapeError):
        squad.inside(Path(f"{squad.root}/./out//x.md"))


def test_lock_files_live_under_run(squad: SquadLayout) -> None:
    lock = squad.lock_for(squad.history("lead"))
    assert lock.parent == squad.run_dir / "locks"
    assert lock.name == "agents__lead__history.md.lock"
    assert os.path.commonpath([lock, squad.root]) == str(squad.root)


def test_runtime_paths_check_their_ids(squad: SquadLayout) -> None:
    assert squad.transcript("s-1") == squad.root / "run" / "transcripts" / "s-1.jsonl"
    assert squad.tool_output("s-1", "call_7") == squad.root / "tool-output" / "s-1" / "call_7.txt"
    with pytest.raises(InvalidNameError):
        squad.transcript("../../etc/passwd")


def test_a_transcript_left_in_sessions_is_found_in_place(squad: SquadLayout) -> None:
    legacy = squad.root / "sessions" / "s-old.jsonl"
    legacy.parent.mkdir()
    legacy.write_text('{"kind": "meta"}\n')
    assert squad.transcript("s-old") == legacy
    assert squad.transcript("s-new") == squad.transcripts_dir / "s-new.jsonl"
    (squad.root / "sessions" / "notes.md").write_text("Squad's own session notes\n")
    squad.transcripts_dir.mkdir(parents=True)
    (squad.transcripts_dir / "s-new.jsonl").write_text("")
    assert {p.name for p in list_transcripts(squad)} == {"s-old.jsonl", "s-new.jsonl"}


def test_a_new_sessions_transcript_is_in_run_transcripts_and_checked_for_links(
        squad: SquadLayout, tmp_path: Path) -> None:
    legacy = squad.root / "sessions" / "s-old.jsonl"
    legacy.parent.mkdir()
    legacy.write_text('{"kind": "meta"}\n')
    assert squad.new_transcript("s-old") == squad.transcripts_dir / "s-old.jsonl"
    assert squad.new_transcript("s-new") == squad.transcript("s-new")
    with pytest.raises(InvalidNameError):
        squad.new_transcript("../../etc/passwd")
    (squad.root / "run").mkdir()
    (squad.root / "run" / "transcripts").symlink_to(tmp_path)
    with pytest.raises(PathEscapeError):  # the folder is checked (the name: by the open)
        SquadLayout.at(squad.root).new_transcript("s-new")


def test_an_orchestration_entrys_folder_is_checked_and_its_name_left_to_the_open(
        squad: SquadLayout, tmp_path: Path) -> None:
    stamp = "20261127T142714.441467Z"
    assert squad.orchestration_entry(stamp, "lead") == squad.orchestration_log(stamp, "lead")
    with pytest.raises(InvalidNameError):
        squad.orchestration_entry("../x", "lead")
    squad.orchestration_dir.symlink_to(tmp_path)
    with pytest.raises(PathEscapeError):
        SquadLayout.at(squad.root).orchestration_entry(stamp, "lead")


def test_a_folder_written_at_every_route_is_checked_again_after_the_recheck_time(
        squad: SquadLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(layout_module, "_clock", lambda: now[0])
    folder = squad.transcripts_dir
    assert folder == squad.root / "run" / "transcripts"
    folder.parent.mkdir()
    folder.symlink_to(tmp_path)
    # Within the recheck time the folder is taken as checked (a file in it is still opened
    # with O_NOFOLLOW); from then on the link is refused at every look until it is gone.
    now[0] += FOLDER_RECHECK_S / 2
    assert squad.transcripts_dir == folder
    now[0] += FOLDER_RECHECK_S
    for _ in range(2):
        with pytest.raises(PathEscapeError):
            squad.new_transcript("s-new")
    folder.unlink()
    folder.mkdir()
    assert squad.new_transcript("s-new") == folder / "s-new.jsonl"


def test_skill_folders_come_in_squads_order_and_stay_inside(squad: SquadLayout,
                                                            tmp_path: Path) -> None:
    assert [source for source, _ in squad.skill_roots()] == ["github", "squad", "copilot"]
    assert squad.skill_write_file("x") == ("squad", squad.skills_dir / "x" / "SKILL.md")
    squad.github_skills_dir.mkdir(parents=True)
    assert squad.skill_write_file("x")[0] == "github"
    (squad.github_skills_dir / "out").symlink_to(tmp_path)
    with pytest.raises(PathEscapeError):
        squad.skill_file_in("github", "out")
    lock = squad.lock_for(squad.skill_file_in("github", "x"))
    assert lock.name == "repo__.github__skills__x__SKILL.md.lock"
    assert lock.parent.parent == squad.run_dir


def test_a_skill_folder_linked_out_of_the_repo_is_refused(squad: SquadLayout,
                                                          tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "skills" / "x").mkdir(parents=True)
    (squad.repo / ".copilot").symlink_to(elsewhere)
    with pytest.raises(PathEscapeError, match="outside the repository"):
        squad.skill_file_in("copilot", "x")


def test_a_layout_is_equal_hashable_immutable_and_pickles_by_its_resolved_root(
        squad: SquadLayout, tmp_path: Path) -> None:
    link = tmp_path / "linked-squad"
    link.symlink_to(squad.root)
    same = SquadLayout.at(link)
    assert same == squad and hash(same) == hash(squad) and len({same, squad}) == 1
    assert same.root == squad.root and same != SquadLayout.at(tmp_path)
    assert repr(same) == f"SquadLayout(root={squad.root!r})"
    with pytest.raises(AttributeError, match="cannot be changed"):
        same.root = tmp_path  # type: ignore[misc]
    with pytest.raises(AttributeError, match="cannot be changed"):
        del same.root  # type: ignore[misc]
    copied = pickle.loads(pickle.dumps(same))
    assert copied == squad and copied.transcripts_dir == squad.transcripts_dir


def test_unchecked_prompt_paths_are_kept_bounded_and_bad_names_still_refused(
        tmp_path: Path) -> None:
    from squadd.state import layout as layout_module

    root = tmp_path / ".squad"
    root.mkdir()
    layout = SquadLayout.at(root)
    first = layout.prompt_file("charter", "fenster", check=False)
    assert layout.prompt_file("charter", "fenster", check=False) is first  # kept, not rebuilt
    assert first == root.resolve() / "agents" / "fenster" / "charter.md"
    assert layout.prompt_file("history", "fenster", check=False).name == "history.md"
    for _ in range(2):  # a refused name is never kept
        with pytest.raises(InvalidNameError):
            layout.prompt_file("charter", "../fenster", check=False)
    for n in range(layout_module._PROMPT_PATHS_KEPT + 10):
        layout.prompt_file("charter", f"agent{n}", check=False)
    assert len(layout._prompt_paths) <= layout_module._PROMPT_PATHS_KEPT


def test_a_processs_journals_are_found_by_its_pid_alone(squad: SquadLayout) -> None:
    assert squad.transcript_journals_of(12) == []  # no folder yet
    mine = [squad.transcript_journal(12, token) for token in ("bb", "aa")]
    others = [squad.transcript_journal(123, "aa"), squad.transcript_journal(1, "aa"),
              squad.transcript_journals_dir / "12-aa.log.tmp"]
    squad.transcript_journals_dir.mkdir(parents=True)
    for path in (*mine, *others):
        path.touch()
    assert squad.transcript_journals_of(12) == sorted(mine)
    assert all(path.parent == squad.transcript_journals_dir for path in mine)


def test_whether_a_session_may_have_a_workspace_record_is_one_look_at_its_name(
        squad: SquadLayout) -> None:
    assert not squad.may_have_workspace("s-1")  # no folder yet
    squad.workspace_record("s-1").parent.mkdir(parents=True)
    assert not squad.may_have_workspace("s-1")
    squad.workspace_record("s-1").write_text("{}", encoding="utf-8")
    assert squad.may_have_workspace("s-1") and not squad.may_have_workspace("s-2")
    with pytest.raises(InvalidNameError):
        squad.may_have_workspace("../s-1")
