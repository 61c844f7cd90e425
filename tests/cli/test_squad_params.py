"""The parameter types every command shares: text must be UTF-8 (a shell can pass any bytes),
numbers must be finite (nan and inf compare false to every bound), and the JSON a command
parses itself is held to the same limits as the daemon's."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from squadd.cli.app import main
from squadd.state.layout import SquadLayout
from tests.support.daemon_process import clean_env


@pytest.mark.parametrize("args", [
    ["agent", "add", "caf\udce9", "--role", "r"],
    ["agent", "add", "cafe", "--role", "r\udcff"],
    ["route", "lead", "t\udcff"],
    ["sessions", "show", "\udcff"],
    ["approve", "x", "--reason", "\udcff"],
    ["events", "--type", "\udcff"],
    ["tools", "call", "squad_decide", "--args", '{"title": "\udcff"}'],
])
def test_text_that_is_not_utf8_is_a_usage_error_naming_the_parameter(
        squad: SquadLayout, args: list[str]) -> None:
    result = CliRunner().invoke(main, [*args, "--dir", str(squad.repo)])
    assert result.exit_code == 2, result.output
    assert "is not valid UTF-8 text" in result.output and "Invalid value for" in result.output


def test_undecodable_bytes_on_a_real_command_line_give_an_error_not_a_traceback(
        squad: SquadLayout) -> None:
    done = subprocess.run([sys.executable, "-m", "squadd", "route", "lead", b"caf\xe9"],
                          cwd=squad.repo, env=clean_env(), capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2
    assert "Error: Invalid value for 'WORDS...': 'caf\ufffd' is not valid UTF-8 text" in \
        done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("args", "value"), [
    (["route", "lead", "t", "--timeout"], "nan"),
    (["route", "lead", "t", "--timeout"], "inf"),
    (["status", "--interval"], "nan"),
    (["stop", "--timeout"], "nan"),
])
def test_nan_and_inf_are_refused_where_a_number_of_seconds_is_asked(
        squad: SquadLayout, args: list[str], value: str) -> None:
    result = CliRunner().invoke(main, [*args, value, "--dir", str(squad.repo)])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--" in result.output


@pytest.mark.parametrize(("raw", "problem"), [
    ("[" * 50_000 + "]" * 50_000, "nested deeper than"),
    ('{"title": NaN}', "NaN is not a JSON number"),
    ('{"title": "\\ud800"}', "unpaired surrogate"),
])
def test_tools_call_refuses_hostile_json_arguments(squad: SquadLayout, raw: str,
                                                   problem: str) -> None:
    result = CliRunner().invoke(main, ["tools", "call", "squad_decide", "--args", raw,
                                       "--dir", str(squad.repo)])
    assert result.exit_code == 2, result.output
    assert problem in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
