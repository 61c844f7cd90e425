"""The `squadd` group: version, help listing every command, lazy imports, error display."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from squadd import __version__
from squadd.cli.app import COMMANDS, load_command, main
from tests._helpers import REPO_ROOT

SQUADD = Path(sys.executable).parent / "squadd"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert SQUADD.exists(), f"the squadd entry point is not installed at {SQUADD}: pip install -e ."
    return subprocess.run([str(SQUADD), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_version_prints_the_package_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"squadd {__version__}"


def test_help_lists_every_registered_command_with_examples() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    commands = result.output.split("Commands:", 1)[1]
    for name in COMMANDS:
        assert f"\n  {name} " in commands
    assert "squadd init" in result.output  # the examples


def test_every_registered_command_loads() -> None:
    for name, target in COMMANDS.items():
        assert load_command(name).name is not None, target


def test_a_command_that_fails_to_load_breaks_only_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(COMMANDS, "ghost", "squadd.cli.no_such_module:ghost")
    runner = CliRunner()
    listing = runner.invoke(main, ["--help"])
    assert listing.exit_code == 0
    assert "ghost" in listing.output and "unavailable" in listing.output
    assert "init" in listing.output
    ran = runner.invoke(main, ["ghost"])
    assert ran.exit_code == 1
    assert "Error: the 'ghost' command could not be loaded" in ran.stderr
    assert runner.invoke(main, ["init", "--help"]).exit_code == 0


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["frobnicate"])
    assert result.exit_code == 2
    assert "No such command 'frobnicate'" in result.stderr


def test_running_one_command_imports_only_its_own_module(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from squadd.cli.app import main\n"
        "loaded_at_start = sorted(m for m in sys.modules if m.startswith(('squadd.cli.', 'pyd')))\n"
        f"main(['init', '--dir', {str(tmp_path)!r}, '--json'], standalone_mode=False)\n"
        "import json\n"
        "print(json.dumps([loaded_at_start,"
        " sorted(m for m in sys.modules if m.startswith('squadd.cli.'))]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 0, result.stderr
    at_start, after = json.loads(result.stdout.strip().splitlines()[-1])
    assert at_start == ["squadd.cli.app"]  # the group alone: no command, no pydantic
    assert "squadd.cli.init" in after
    assert not {"squadd.cli.agent", "squadd.cli.doctor"} & set(after)


def test_entry_point_outside_a_squad_dir_prints_error_naming_init(tmp_path: Path) -> None:
    result = _run("agent", "list", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("Error: no .squad/ folder found")
    assert "squadd init" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_entry_point_runs_a_whole_session_in_a_git_repo(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=30)
    first = _run("init", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "team.md" in first.stdout
    assert _run("agent", "add", "lead", "--role", "Lead", cwd=tmp_path).returncode == 0
    nested = tmp_path / "src" / "pkg"
    nested.mkdir(parents=True)
    listed = _run("agent", "list", "--json", cwd=nested)
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert [a["name"] for a in data["agents"]] == ["lead", "scribe"]
    assert data["squad_dir"] == str((tmp_path / ".squad").resolve())


def test_python_dash_m_squadd_works() -> None:
    result = subprocess.run([sys.executable, "-m", "squadd", "--version"], capture_output=True,
                            text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 0 and result.stdout.strip() == f"squadd {__version__}"


def test_the_click_group_is_still_found_where_older_console_scripts_import_it() -> None:
    import squadd.cli

    assert squadd.cli.main is main  # `from squadd.cli import main` in a script pip wrote
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = squadd.cli.nothing  # type: ignore[attr-defined]
