"""`squadd doctor`: a list of checks; a failing one makes the exit status non-zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from squadd.cli.app import main
from squadd.cli.doctor import CHECKS, CheckResult, DoctorContext, run_checks
from squadd.state.layout import SquadLayout


@pytest.fixture
def replay_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A provider that is configured and works without a network: a replay file."""
    recording = tmp_path / "recording.json"
    recording.write_text('[{"text": "hello"}]', encoding="utf-8")
    monkeypatch.setenv("SQUADD_PROVIDER_KIND", "replay")
    monkeypatch.setenv("SQUADD_PROVIDER_REPLAY_FILE", str(recording))
    return recording


def _doctor(directory: Path, *extra: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["doctor", "--dir", str(directory), *extra])
    return result.exit_code, result.stdout, result.stderr


def test_a_healthy_squad_passes(squad: SquadLayout, replay_provider: Path) -> None:
    code, out, _ = _doctor(squad.repo)
    assert code == 0, out
    assert f"[ok  ] squad dir: {squad.root}" in out
    assert "[ok  ] settings: settings load" in out
    assert "[ok  ] roster: 1 agent" in out
    assert "config/squadd.toml" in out or "squadd.toml" in out
    assert f"project: {squad.config_toml} (absent)" in out
    assert "[ok  ] provider: replay file parses: 1 scripted turns" in out
    assert "[ok  ] daemon: not running" in out


def test_outside_a_squad_dir_fails_and_names_squadd_init(tmp_path: Path) -> None:
    code, out, _ = _doctor(tmp_path)
    assert code == 1
    assert "[FAIL] squad dir" in out and "squadd init" in out
    assert "[skip] roster" in out


def test_bad_settings_fail_and_show_the_config_error(squad: SquadLayout) -> None:
    squad.config_toml.write_text("[pool]\nmax_concurrent = 'lots'\n")
    code, out, _ = _doctor(squad.repo)
    assert code == 1
    assert "[FAIL] settings" in out and "pool.max_concurrent" in out and "'lots'" in out
    assert f"project: {squad.config_toml}\n" in out  # the file is shown, not "(absent)"


def test_environment_settings_are_listed(squad: SquadLayout,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQUADD_POOL_MAX_CONCURRENT", "2")
    monkeypatch.setenv("SQUADD_UNRELATED", "x")
    _, out, _ = _doctor(squad.repo)
    assert "environment: SQUADD_POOL_MAX_CONCURRENT\n" in out


def test_roster_problems_are_warnings_not_failures(squad: SquadLayout,
                                                   replay_provider: Path) -> None:
    (squad.agents_dir / "half").mkdir()
    (squad.agents_dir / "Caps").mkdir()  # no charter: ignored, whatever its case
    (squad.agents_dir / "Rai").mkdir()  # Squad's init makes agents/Rai/: the agent rai
    (squad.agents_dir / "Rai" / "charter.md").write_text("## Identity\n\n- **Role:** RAI\n")
    (squad.agents_dir / "Rai" / "history.md").write_text("# Project Context\n")
    (squad.agents_dir / "Bad Name").mkdir()
    (squad.agents_dir / "loner").mkdir()
    (squad.agents_dir / "loner" / "charter.md").write_text("## Identity\n\n- **Role:** Solo\n")
    squad.routing_md.unlink()
    code, out, _ = _doctor(squad.repo)
    assert code == 0
    assert "[warn] squad dir" in out and "missing: routing.md" in out
    assert "agents/half/ is ignored: it has no charter.md" in out
    assert "agents/Caps/ is ignored: it has no charter.md" in out
    assert "agents/Bad Name/ is ignored: its name breaks the naming rule" in out
    assert "Rai" not in out and "rai " not in out  # read as the agent rai, and no fault
    assert "loner is not in team.md's Members table" in out
    assert "loner has no history.md" in out


def test_doctor_json(squad: SquadLayout, replay_provider: Path) -> None:
    code, out, _ = _doctor(squad.repo, "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True
    assert [c["name"] for c in data["checks"]] == ["squad dir", "settings", "roster",
                                                   "squad compat", "memory files", "provider",
                                                   "daemon", "sandbox", "cluster"]
    assert all(c["status"] == "ok" for c in data["checks"][:-1])
    assert data["checks"][-1]["status"] == "skip"  # one host: no cluster to check


def test_checks_can_be_appended_and_share_what_earlier_checks_found(
    squad: SquadLayout,
) -> None:
    def pool_check(ctx: DoctorContext) -> CheckResult:
        assert ctx.settings is not None and ctx.layout is not None
        return CheckResult("pool", "fail", f"{ctx.settings.pool.max_concurrent} slots")

    results = run_checks(squad.repo, [*CHECKS, pool_check])
    assert [(r.name, r.status) for r in results][-1] == ("pool", "fail")
    assert results[-1].summary == "8 slots"


def test_a_check_that_raises_is_reported_as_failed_and_the_rest_still_run(
    squad: SquadLayout, replay_provider: Path,
) -> None:
    def broken_check(ctx: DoctorContext) -> CheckResult:
        raise OSError("disk on fire")

    results = run_checks(squad.repo, [broken_check, *CHECKS])
    assert (results[0].name, results[0].status) == ("broken check", "fail")
    assert "disk on fire" in results[0].summary
    # Every other check still ran (the cluster check skips on one host).
    assert [r.status for r in results[1:]] == ["ok"] * (len(CHECKS) - 1) + ["skip"]


def test_an_unreadable_team_md_fails_the_roster_check_without_a_traceback(
    squad: SquadLayout,
) -> None:
    squad.team_md.unlink()
    squad.team_md.mkdir()
    code, out, err = _doctor(squad.repo)
    assert code == 1 and "[FAIL] roster" in out and "Traceback" not in out + err
