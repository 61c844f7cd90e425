"""Numbers in settings are bounded: an integer too long to convert, an absurd magnitude, inf
or nan gives an error naming the key and where it came from, from the loader, from `squadd
doctor` and from `squadd serve` (real processes: no traceback reaches the person)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from squadd.config import MAX_SETTING_NUMBER, load_settings
from squadd.errors import ConfigError
from tests.support.daemon_process import clean_env, make_repo

HUGE = "9" * 4301

FILE_VARIANTS = [
    (f"[pool]\nmax_concurrent = {HUGE}\n", "pool.max_concurrent"),
    (f"[pool]\nmax_queued = -{HUGE}\n", "pool.max_queued"),
    (f"[route]\n# a comment first\ntimeout_s = {'1' * 5000}\n", "route.timeout_s"),
    (f"[tools]\ntimeout_s = {'1_' * 3000}1\n", "tools.timeout_s"),
    ("[route]\ntimeout_s = inf\n", "route.timeout_s"),
    ("[route]\ntimeout_s = -inf\n", "route.timeout_s"),
    ("[route]\ntimeout_s = nan\n", "route.timeout_s"),
    ("[route]\ntimeout_s = 1e300\n", "route.timeout_s"),
    ("[pool]\nmax_queued = 10000000000000000000000\n", "pool.max_queued"),
    ("[session]\nidle_timeout_s = 99999999999\n", "session.idle_timeout_s"),
]


@pytest.mark.parametrize(("text", "key"), FILE_VARIANTS)
def test_a_number_out_of_bounds_in_a_file_names_the_key_and_the_file(
        tmp_path: Path, text: str, key: str) -> None:
    squad = tmp_path / ".squad"
    squad.mkdir()
    (squad / "config.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(squad, environ={}, user_file=tmp_path / "none.toml")
    message = str(caught.value)
    assert caught.value.key == key and f"'{key}'" in message, message
    assert str(squad / "config.toml") in message and len(message) < 400


@pytest.mark.parametrize(("name", "value"), [
    ("SQUADD_POOL_MAX_CONCURRENT", HUGE), ("SQUADD_ROUTE_TIMEOUT_S", "inf"),
    ("SQUADD_ROUTE_TIMEOUT_S", "1e400"), ("SQUADD_ROUTE_TIMEOUT_S", "nan"),
    ("SQUADD_POOL_MAX_QUEUED", str(MAX_SETTING_NUMBER * 10)),
    ("SQUADD_POOL_MAX_QUEUED", f"[{HUGE}]"),
])
def test_a_number_out_of_bounds_in_the_environment_names_the_variable_or_key(
        name: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={name: value})
    message = str(caught.value)
    assert name in message or "environment" in message, message
    assert len(message) < 400


def test_numbers_within_bounds_still_load(tmp_path: Path) -> None:
    squad = tmp_path / ".squad"
    squad.mkdir()
    (squad / "config.toml").write_text("[route]\ntimeout_s = 86400.5\n", encoding="utf-8")
    assert load_settings(squad, environ={}).route.timeout_s == 86400.5


@pytest.mark.slow
@pytest.mark.parametrize("command", [["doctor"], ["serve"]])
@pytest.mark.parametrize(("text", "key"), [FILE_VARIANTS[0], FILE_VARIANTS[4]])
def test_doctor_and_serve_report_the_key_without_a_traceback(
        tmp_path: Path, command: list[str], text: str, key: str) -> None:
    layout = make_repo(tmp_path / "repo")
    layout.config_toml.write_text(text, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "squadd", *command], cwd=layout.repo,
                          env=clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg")),
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, check=False)
    both = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Traceback" not in both
    assert f"'{key}'" in both and str(layout.config_toml) in both
