"""squadd's own git never runs a program the repository chose: hooks (in `.git/hooks`, a
`core.hooksPath` folder, husky's layout), clean/smudge/process filters, fsmonitor, diff and
merge drivers and signing programs each leave a marker if run, and none may appear while squadd
opens, commits, diffs, lists, rebases and lands a session's work. Each variant first proves,
with plain git, that it would have fired."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from squadd import gitsafe
from squadd.state.layout import SquadLayout
from squadd.tools.builtin.confine import Workspace
from squadd.tools.builtin.listing import list_files
from squadd.workspaces import Workspaces
from tests.workspaces.conftest import Events, git, make_repo, settings_with

HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout",
         "post-rewrite", "pre-rebase", "post-merge", "reference-transaction", "pre-auto-gc",
         "post-index-change", "pre-merge-commit")


def _marker_script(marks: Path, name: str, body: str = "cat") -> str:
    script = marks.parent / f"{name}.sh"
    script.write_text(f"#!/bin/sh\ntouch '{marks}/{name}'\n{body}\n")
    script.chmod(0o755)
    return str(script)


def _hooks_in(folder: Path, marks: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for hook in HOOKS:
        (folder / hook).write_text(f"#!/bin/sh\ntouch '{marks}/hook-{hook}'\n")
        (folder / hook).chmod(0o755)


def _git_hooks(repo: Path, marks: Path) -> None:
    _hooks_in(repo / ".git" / "hooks", marks)


def _hooks_path(repo: Path, marks: Path) -> None:
    _hooks_in(repo / ".githooks", marks)
    git(repo, "config", "core.hooksPath", ".githooks")


def _husky(repo: Path, marks: Path) -> None:
    # husky 9: `.husky/_/<hook>` runs `.husky/<hook>`; core.hooksPath = .husky/_
    _hooks_in(repo / ".husky", marks)
    inner = repo / ".husky" / "_"
    inner.mkdir()
    for hook in HOOKS:
        (inner / hook).write_text(f'#!/bin/sh\nsh "$(dirname "$0")/../{hook}"\n')
        (inner / hook).chmod(0o755)
    git(repo, "config", "core.hooksPath", ".husky/_")


def _filters(repo: Path, marks: Path) -> None:
    (repo / ".gitattributes").write_text("*.txt filter=lint\n")
    git(repo, "config", "filter.lint.clean", _marker_script(marks, "clean"))
    git(repo, "config", "filter.lint.smudge", _marker_script(marks, "smudge"))
    git(repo, "config", "filter.lint.required", "true")


def _process_filter(repo: Path, marks: Path) -> None:
    # An odd driver name: a dot and an `=` inside, which a `-c key=value` could not override.
    (repo / ".gitattributes").write_text("*.txt filter=a.b=c\n")
    git(repo, "config", "filter.a.b=c.process", _marker_script(marks, "process", "exit 1"))
    git(repo, "config", "filter.a.b=c.required", "true")


def _fsmonitor(repo: Path, marks: Path) -> None:
    git(repo, "config", "core.fsmonitor", _marker_script(marks, "fsmonitor", "exit 1"))


def _diff_driver(repo: Path, marks: Path) -> None:
    (repo / ".gitattributes").write_text("*.txt diff=pretty\n")
    git(repo, "config", "diff.pretty.textconv", _marker_script(marks, "textconv", "cat \"$1\""))
    git(repo, "config", "diff.pretty.command", _marker_script(marks, "diffcmd", "true"))
    git(repo, "config", "diff.external", _marker_script(marks, "external", "true"))


def _merge_driver(repo: Path, marks: Path) -> None:
    (repo / ".gitattributes").write_text("*.txt merge=mine\n")
    git(repo, "config", "merge.mine.driver", _marker_script(marks, "merge", "exit 0") + " %A")


def _signing(repo: Path, marks: Path) -> None:
    git(repo, "config", "commit.gpgSign", "true")
    git(repo, "config", "gpg.program", _marker_script(marks, "gpg", "exit 1"))
    git(repo, "config", "log.showSignature", "true")


def _included(repo: Path, marks: Path) -> None:
    # The same hooks folder, reached through an included config file.
    _hooks_in(repo / "hooks-here", marks)
    (repo / "extra.gitconfig").write_text("[core]\n\thooksPath = hooks-here\n")
    git(repo, "config", "include.path", "../extra.gitconfig")


Plant = Callable[[Path, Path], None]
VARIANTS: dict[str, tuple[Plant, tuple[str, ...]]] = {
    # name: (how to plant it, the plain git command that proves it fires)
    "git-hooks": (_git_hooks, ("commit", "--allow-empty", "-m", "x")),
    "hooks-path": (_hooks_path, ("commit", "--allow-empty", "-m", "x")),
    "husky": (_husky, ("commit", "--allow-empty", "-m", "x")),
    "included-hooks-path": (_included, ("commit", "--allow-empty", "-m", "x")),
    "clean-smudge": (_filters, ("add", "--renormalize", ".")),
    "process-filter": (_process_filter, ("add", "--renormalize", ".")),
    "fsmonitor": (_fsmonitor, ("status",)),
    "diff-driver": (_diff_driver, ("diff", "HEAD~1")),
    "merge-driver": (_merge_driver, ()),
    "signing": (_signing, ("commit", "--allow-empty", "-m", "x")),
}


def _repo_with(tmp_path: Path, plant: Plant) -> tuple[SquadLayout, Path]:
    layout = make_repo(tmp_path / "repo", {"app.txt": "one\ntwo\nthree\n", "note.md": "n\n"})
    marks = tmp_path / "marks"
    marks.mkdir()
    plant(layout.repo, marks)
    # The plant's own commit is made with every program switched off (squadd's overrides).
    listed = subprocess.run(["git", *gitsafe.LIST_CONFIG], cwd=layout.repo, check=True,
                            capture_output=True, timeout=60)
    quiet = gitsafe.hardened_env(os.environ, gitsafe.parse_listed(listed.stdout))
    for args in (("add", "--all"), ("-c", "user.name=T", "-c", "user.email=t@e", "commit",
                                    "-q", "-m", "plant")):
        subprocess.run(["git", *args], cwd=layout.repo, check=True, timeout=60,
                       capture_output=True, env=quiet)
    for leftover in marks.iterdir():
        leftover.unlink()
    return layout, marks


@pytest.mark.parametrize("variant", sorted(v for v, (_, proof) in VARIANTS.items() if proof))
def test_each_planted_program_fires_under_plain_git(tmp_path: Path, variant: str) -> None:
    """The control: each plant is live, so its absence below means squadd switched it off."""
    plant, proof = VARIANTS[variant]
    layout, marks = _repo_with(tmp_path, plant)
    (layout.repo / "app.txt").write_text("changed\n")
    subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@e", *proof],
                   cwd=layout.repo, capture_output=True, timeout=60, check=False)
    assert list(marks.iterdir()), f"{variant}: the plant never fired under plain git"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
async def test_no_planted_program_runs_in_squadds_git(tmp_path: Path, variant: str) -> None:
    plant, _ = VARIANTS[variant]
    layout, marks = _repo_with(tmp_path, plant)
    spaces = Workspaces(layout, settings_with(layout), Events())
    first = await spaces.open("20260101-000000-0000000a", "lead")
    second = await spaces.open("20260101-000000-0000000b", "lead")
    assert first is not None and second is not None
    (Path(first.path) / "app.txt").write_text("ONE\ntwo\nthree\n")
    (Path(first.path) / "new.txt").write_text("fresh\n")
    (Path(second.path) / "app.txt").write_text("uno\ntwo\nthree\n")
    await list_files(Workspace(Path(first.path)), ())
    await spaces.close(first, title="first")
    await spaces.close(second, title="second")
    assert (await spaces.land(first.session_id)).ok
    conflicted = await spaces.land(second.session_id)
    assert not conflicted.ok
    assert conflicted.reason == "conflict", conflicted.message
    assert git(layout.repo, "show", "main:app.txt") == "ONE\ntwo\nthree"
    assert sorted(p.name for p in marks.iterdir()) == [], variant


def test_merge_driver_fires_under_plain_git_rebase(tmp_path: Path) -> None:
    layout, marks = _repo_with(tmp_path, _merge_driver)
    repo = layout.repo
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "app.txt").write_text("side\n")
    git(repo, "commit", "-qam", "side")
    git(repo, "checkout", "-q", "main")
    (repo / "app.txt").write_text("main\n")
    git(repo, "commit", "-qam", "main")
    subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@e", "rebase", "main",
                    "side"], cwd=repo, capture_output=True, timeout=60, check=False)
    assert (marks / "merge").exists()


def test_overrides_name_each_driver_exactly_and_argv_turns_off_external_diffs() -> None:
    pairs = dict(gitsafe.overrides(["filter.a.b=c.process", "diff.X.textconv",
                                    "merge.m.driver", "pager.log", "user.name"]))
    assert pairs["filter.a.b=c.process"] == "" and pairs["filter.a.b=c.required"] == "false"
    assert pairs["diff.X.textconv"] == "" and pairs["merge.m.driver"] == "false"
    assert pairs["pager.log"] == "false" and "user.name" not in pairs
    assert pairs["core.hooksPath"] == "/dev/null" and pairs["core.fsmonitor"] == "false"
    argv = gitsafe.hardened_argv(["git", "-C", "x", "-c", "a=b", "diff", "HEAD"])
    assert argv == ["git", "--no-pager", "-C", "x", "-c", "a=b", "diff", "--no-ext-diff",
                    "--no-textconv", "HEAD"]
    env = gitsafe.hardened_env({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath",
                                "GIT_CONFIG_VALUE_0": ".githooks", "GIT_SSH_COMMAND": "evil"})
    assert "GIT_SSH_COMMAND" not in env
    assert env["GIT_CONFIG_KEY_0"] == "core.hooksPath" and env["GIT_CONFIG_VALUE_0"] == "/dev/null"


RECEIVING_HOOKS = ("pre-receive", "update", "post-receive", "post-update",
                   "reference-transaction", "push-to-checkout")


def _receiving_repo(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A coordinator's repository whose hook folder holds every hook a push runs there (an
    absolute `core.hooksPath`), and a clone of it (as a worker keeps): (repo, clone, marks)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    layout = make_repo(tmp_path / "repo", {"app.txt": "one\n"})
    hooks = layout.repo / ".githooks"
    hooks.mkdir()
    for hook in RECEIVING_HOOKS:
        (hooks / hook).write_text(f"#!/bin/sh\ntouch '{marks}/{hook}'\n")
        (hooks / hook).chmod(0o755)
    git(layout.repo, "config", "core.hooksPath", str(hooks))
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(layout.repo), str(clone)], check=True,
                   capture_output=True, timeout=60)
    (clone / "app.txt").write_text("two\n")
    git(clone, "commit", "-qam", "work")
    return layout.repo, clone, marks


def test_a_push_runs_the_receiving_repositorys_hooks_under_plain_git(tmp_path: Path) -> None:
    _, clone, marks = _receiving_repo(tmp_path)
    git(clone, "push", "--quiet", "origin", "HEAD:refs/squad/plain")
    assert {p.name for p in marks.iterdir()} >= {"pre-receive", "update", "post-receive"}


async def test_squadds_push_runs_no_hook_on_either_side(tmp_path: Path) -> None:
    from squadd.workspaces.git import Git

    repo, clone, marks = _receiving_repo(tmp_path)
    _hooks_in(clone / ".git" / "hooks", marks)  # the pushing side's own pre-push and the rest
    ran = await Git(60).ran(clone, "push", "--quiet", "origin", "HEAD:refs/squad/s1/1")
    assert ran.ok, ran.output
    assert git(repo, "rev-parse", "refs/squad/s1/1") == git(clone, "rev-parse", "HEAD")
    assert sorted(p.name for p in marks.iterdir()) == []


async def test_a_fetch_never_runs_the_upload_pack_the_config_names(tmp_path: Path) -> None:
    from squadd.workspaces.git import Git

    _, clone, marks = _receiving_repo(tmp_path)
    git(clone, "config", "remote.origin.uploadpack",
        _marker_script(marks, "uploadpack", 'exec git-upload-pack "$@"'))
    git(clone, "fetch", "--quiet", "origin")
    assert (marks / "uploadpack").exists()  # the plant is live under plain git
    (marks / "uploadpack").unlink()
    ran = await Git(60).ran(clone, "fetch", "--quiet", "origin")
    assert ran.ok, ran.output
    assert sorted(p.name for p in marks.iterdir()) == []


def test_only_commands_that_never_read_content_skip_the_config_listing() -> None:
    for args in (("rev-parse", "HEAD"), ("-c", "x=y", "for-each-ref"), ("worktree", "list"),
                 ("worktree", "prune"), ("update-ref", "refs/x", "HEAD"), ("log", "-1")):
        assert not gitsafe.needs_drivers(args), args
    for args in (("add", "-A"), ("commit", "-m", "x"), ("rebase", "main"), ("status",),
                 ("worktree", "add", "x"), ("worktree", "remove", "x"), ("diff", "a", "b"),
                 ("-C", "rev-parse", "checkout", "x"), ("merge", "--ff-only", "x"),
                 ("reset", "--hard"), ("cat-file", "--filters", "HEAD:x"), ("fetch",), ()):
        assert gitsafe.needs_drivers(args), args
