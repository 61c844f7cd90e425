"""`squadd doctor --security`: one line per guard in force (a table, or `--json`), each checked
where it can be; a loose folder is a warning, a guard that is off (or whose check breaks) makes
the exit status 1; a new guard is one registered function."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from squadd.cli import _doctor_security
from squadd.cli._doctor_security import GuardContext, GuardReport, run_guards
from squadd.cli.app import main
from squadd.state.layout import SquadLayout

MINE = ["regex engine", "shell template grammar", "file modes", "dashboard stream budget",
        "approval display", "ui token handoff", "config numbers"]


def _security(directory: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["doctor", "--security", "--dir", str(directory), *extra])
    return result.exit_code, result.stdout


def test_every_guard_is_reported_on_in_a_fresh_squad(squad: SquadLayout) -> None:
    code, out = _security(squad.repo, "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["ok"] is True
    guards = {g["guard"]: g for g in report["guards"]}
    assert set(MINE) <= set(guards)
    assert all(guards[name]["status"] == "on" for name in MINE), guards
    assert "12 evaluation contexts" in guards["shell template grammar"]["detail"]
    code, table = _security(squad.repo)
    assert code == 0 and table.splitlines()[0].split() == ["GUARD", "STATUS", "DETAIL"]
    assert all(any(line.startswith(name) for line in table.splitlines()) for name in MINE)


def test_without_rg_the_regex_guard_says_which_engine_runs(
        squad: SquadLayout, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    code, out = _security(squad.repo, "--json")
    regex = next(g for g in json.loads(out)["guards"] if g["guard"] == "regex engine")
    assert code == 0 and regex["status"] == "on" and "rg not found" in regex["detail"]


def test_a_folder_open_to_others_is_a_warning_naming_it(squad: SquadLayout) -> None:
    squad.run_dir.mkdir(exist_ok=True)
    squad.run_dir.chmod(0o755)
    code, out = _security(squad.repo, "--json")
    modes = next(g for g in json.loads(out)["guards"] if g["guard"] == "file modes")
    assert code == 0 and modes["status"] == "warn" and "run (0o755)" in modes["detail"]


def test_a_guard_that_is_off_or_breaks_fails_the_report(
        squad: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    def guard_sandbox(ctx: GuardContext) -> GuardReport:
        return GuardReport("sandbox", "off", "sandbox.mode is none")

    def guard_broken(ctx: GuardContext) -> GuardReport:
        raise RuntimeError("boom")

    monkeypatch.setattr(_doctor_security, "GUARDS",
                        [*_doctor_security.GUARDS, guard_sandbox, guard_broken])
    code, out = _security(squad.repo, "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    assert {"guard": "sandbox", "status": "off", "detail": "sandbox.mode is none"} in \
        report["guards"]
    assert {"guard": "broken", "status": "off",
            "detail": "its check failed: RuntimeError: boom"} in report["guards"]
    assert [r.guard for r in run_guards(GuardContext(None, None), [guard_sandbox])] == \
        ["sandbox"]


GUARDS_OF_PLANTED_CODE = ["git hardening", "write-protected executable files",
                          "secret redaction"]


def test_the_planted_code_and_redaction_guards_are_checked_and_on(squad: SquadLayout) -> None:
    code, out = _security(squad.repo, "--json")
    guards = {g["guard"]: g for g in json.loads(out)["guards"]}
    assert code == 0, out
    for name in GUARDS_OF_PLANTED_CODE:
        assert guards[name]["status"] == "on", guards[name]
    assert "a hook and a filter did not run" in guards["git hardening"]["detail"]


def test_git_hardening_is_off_when_a_hook_runs_under_squadds_git(
        squad: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    from squadd import gitsafe

    monkeypatch.setattr(gitsafe, "FIXED", ())
    monkeypatch.setattr(gitsafe, "DRIVER_KEYS", {})
    code, out = _security(squad.repo, "--json")
    hardening = next(g for g in json.loads(out)["guards"] if g["guard"] == "git hardening")
    assert code == 1 and hardening["status"] == "off"


def test_the_sandbox_guard_names_its_mechanism_and_is_off_when_switched_off(
        squad: SquadLayout) -> None:
    from squadd.sandbox.core import unavailable

    if unavailable("bwrap") and unavailable("landlock"):
        pytest.skip("neither bubblewrap nor Landlock is available here")
    code, out = _security(squad.repo, "--json")
    [sandbox] = [g for g in json.loads(out)["guards"] if g["guard"] == "sandbox"]
    assert sandbox["status"] == "on" and "run confined" in sandbox["detail"]
    assert sandbox["detail"].split(":")[0] in ("bwrap", "landlock")
    squad.config_toml.write_text('[sandbox]\nmode = "off"\n', encoding="utf-8")
    code, out = _security(squad.repo, "--json")
    [sandbox] = [g for g in json.loads(out)["guards"] if g["guard"] == "sandbox"]
    assert code == 1 and sandbox["status"] == "off" and "unconfined" in sandbox["detail"]
