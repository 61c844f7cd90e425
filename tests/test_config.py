"""Settings: the layers and their order, errors naming key and file, and squadd.toml coverage."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from squadd.config import Settings, default_config_file, load_settings, user_config_file
from squadd.errors import ConfigError


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_shipped_file_holds_exactly_the_model_defaults() -> None:
    assert load_settings(environ={}) == Settings()


def test_every_setting_is_in_squadd_toml_with_a_comment_above_it() -> None:
    lines = default_config_file().read_text().splitlines()
    section_at = {line.strip()[1:-1]: i for i, line in enumerate(lines)
                  if re.fullmatch(r"\[[a-z_]+\]", line.strip())}
    missing = []
    for section, field in Settings.model_fields.items():
        if section not in section_at:
            missing.append(f"[{section}]")
            continue
        model = field.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue  # free-form tables ([agents], [variables]): the header is enough
        start = section_at[section]
        end = min([i for i in section_at.values() if i > start], default=len(lines))
        for key in model.model_fields:
            found = [i for i in range(start + 1, end)
                     if re.match(rf"{re.escape(key)}\s*=", lines[i])]
            if not found:
                missing.append(f"{section}.{key}")
            elif not lines[found[0] - 1].startswith("#"):
                missing.append(f"{section}.{key} (no comment line above it)")
    assert missing == [], f"config/squadd.toml lacks: {', '.join(missing)}"


def test_layers_apply_in_order_user_then_project_then_environment(tmp_path: Path) -> None:
    user = _write(tmp_path / "user.toml", "[pool]\nmax_concurrent = 2\nmax_queued = 10\n"
                                          "[route]\nmax_depth = 5\n")
    squad = tmp_path / ".squad"
    _write(squad / "config.toml", "[pool]\nmax_concurrent = 3\n[agents.lead]\nmodel = 'm1'\n")
    settings = load_settings(squad, user_file=user,
                             environ={"SQUADD_POOL_MAX_CONCURRENT": "4"})
    assert settings.pool.max_concurrent == 4  # environment beats project
    assert settings.pool.max_queued == 10  # user file, untouched by later layers
    assert settings.route.max_depth == 5
    assert settings.agents["lead"].model == "m1"
    assert settings.session.max_turns == 30  # default
    overridden = load_settings(squad, user_file=user, environ={},
                               overrides={"pool": {"max_concurrent": 7}})
    assert overridden.pool.max_concurrent == 7  # command-line flags beat everything


def test_user_file_defaults_to_xdg_config_home(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert user_config_file() == tmp_path / "squadd" / "config.toml"
    _write(tmp_path / "squadd" / "config.toml", "[session]\nmax_turns = 12\n")
    assert load_settings(environ={}).session.max_turns == 12


def test_environment_values_are_parsed_including_json_lists(tmp_path: Path) -> None:
    settings = load_settings(environ={
        "SQUADD_PROVIDER_COMMAND": '["claude", "-p", "{prompt}"]',
        "SQUADD_PROVIDER_KIND": "command",
        "SQUADD_TOOLS_TIMEOUT_S": "2.5",
        "SQUADD_SOMETHING_ELSE": "ignored: not a settings section",
    }, user_file=tmp_path / "none.toml")
    assert settings.provider.command == ["claude", "-p", "{prompt}"]
    assert settings.provider.kind == "command"
    assert settings.tools.timeout_s == 2.5


def test_unknown_key_names_the_key_and_the_file(tmp_path: Path) -> None:
    squad = tmp_path / ".squad"
    project = _write(squad / "config.toml", "[pool]\nmax_concurent = 3\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(squad, environ={})
    message = str(caught.value)
    assert "pool.max_concurent" in message and str(project) in message
    assert "max_concurrent" in message  # the known keys are listed
    assert caught.value.key == "pool.max_concurent" and caught.value.source == str(project)


def test_unknown_section_names_the_section_and_the_file(tmp_path: Path) -> None:
    user = _write(tmp_path / "user.toml", "[pools]\nmax_concurrent = 3\n")
    with pytest.raises(ConfigError, match=rf"{re.escape(str(user))}: unknown section \[pools\]"):
        load_settings(user_file=user, environ={})


def test_unknown_environment_key_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="SQUADD_POOL_MAX_SLOTS"):
        load_settings(environ={"SQUADD_POOL_MAX_SLOTS": "3"})


def test_bad_value_names_key_value_file_and_expectation(tmp_path: Path) -> None:
    squad = tmp_path / ".squad"
    project = _write(squad / "config.toml", "[pool]\nmax_concurrent = \"many\"\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(squad, environ={})
    message = str(caught.value)
    assert "pool.max_concurrent" in message and "'many'" in message
    assert str(project) in message and "valid integer" in message


def test_out_of_range_value_says_the_bound() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={"SQUADD_POOL_MAX_CONCURRENT": "0"})
    message = str(caught.value)
    assert "environment" in message and "pool.max_concurrent" in message
    assert "greater than or equal to 1" in message


def test_bad_choice_lists_the_allowed_values() -> None:
    with pytest.raises(ConfigError, match=r"provider\.kind.*'gpt'.*'openai'"):
        load_settings(environ={"SQUADD_PROVIDER_KIND": "gpt"})


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    user = _write(tmp_path / "user.toml", "[pool\n")
    with pytest.raises(ConfigError, match=rf"{re.escape(str(user))}: not valid TOML"):
        load_settings(user_file=user, environ={})


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(ValueError, match="frozen"):
        settings.pool.max_concurrent = 2  # type: ignore[misc]


def _refused(tmp_path: Path, data: bytes) -> ConfigError:
    squad = tmp_path / "repo" / ".squad"
    squad.mkdir(parents=True, exist_ok=True)
    (squad / "config.toml").write_bytes(data)
    with pytest.raises(ConfigError) as caught:
        load_settings(squad, environ={}, user_file=tmp_path / "none.toml")
    assert caught.value.source == str(squad / "config.toml")
    assert str(squad / "config.toml") in str(caught.value)
    return caught.value


def test_nesting_deep_enough_to_exhaust_the_parser_is_a_config_error(tmp_path: Path) -> None:
    error = _refused(tmp_path, b"[variables]\nx = " + b"[" * 100_000 + b"]" * 100_000 + b"\n")
    assert "nested too deeply" in str(error)


def test_a_config_file_over_a_megabyte_is_refused_unread(tmp_path: Path) -> None:
    error = _refused(tmp_path, b'[provider]\nmodel = "' + b"x" * 2_000_000 + b'"\n')
    assert "larger than 1048576 bytes" in str(error)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_no_timeout_or_limit_may_be_infinite_or_nan(tmp_path: Path, value: str) -> None:
    error = _refused(tmp_path, f"[route]\ntimeout_s = {value}\n".encode())
    assert error.key == "route.timeout_s" and "finite number" in str(error)


def test_a_nul_byte_in_a_setting_names_the_key(tmp_path: Path) -> None:
    error = _refused(tmp_path, b'[tools]\nextra_dirs = ["ok", "a\\u0000b"]\n')
    assert error.key == "tools.extra_dirs.1" and "NUL byte" in str(error)


def test_agent_and_variable_names_must_be_names(tmp_path: Path) -> None:
    agent = _refused(tmp_path, b'[agents."../../etc"]\nmodel = "m"\n')
    assert agent.key == "agents.../../etc" and "not an agent name" in str(agent)
    variable = _refused(tmp_path, b'[variables]\n"A B" = "v"\n')
    assert variable.key == "variables.A B" and "not a variable name" in str(variable)


def test_an_error_inside_a_list_or_table_names_the_file_and_the_value(tmp_path: Path) -> None:
    error = _refused(tmp_path, b'[provider]\ncommand = ["ok", 7]\n')
    assert error.key == "provider.command.1" and "= 7 is invalid" in str(error)
    approvals = _refused(tmp_path, b'[tools]\napprovals = { "deploy*" = "maybe" }\n')
    assert approvals.key == "tools.approvals.deploy*" and "'maybe'" in str(approvals)


def test_environment_values_must_be_utf8_and_shallow() -> None:
    with pytest.raises(ConfigError, match="not UTF-8") as caught:
        load_settings(environ={"SQUADD_PROVIDER_MODEL": "caf\udce9"},
                      user_file=Path("/nonexistent/none.toml"))
    assert caught.value.source == "environment"
    with pytest.raises(ConfigError, match="SQUADD_TOOLS_EXTRA_DIRS: nested too deeply"):
        load_settings(environ={"SQUADD_TOOLS_EXTRA_DIRS": "[" * 100_000},
                      user_file=Path("/nonexistent/none.toml"))


def test_a_reload_takes_only_the_live_sections_and_names_every_changed_key(
        tmp_path: Path) -> None:
    from squadd.config import changed_settings, is_live, with_live_sections

    running = load_settings(tmp_path, user_file=tmp_path / "none.toml")
    _write(tmp_path / "config.toml", '[workspace]\nland_check = "pytest -q"\n[provider]\n'
           'kind = "anthropic"\n[pool]\nmax_concurrent = 2\n[agents.lead]\nmodel = "m"\n')
    loaded = load_settings(tmp_path, user_file=tmp_path / "none.toml")
    changed = changed_settings(running, loaded)
    assert changed == ["agents.lead.model", "pool.max_concurrent", "provider.kind",
                       "workspace.land_check"]
    assert [key for key in changed if is_live(key)] == ["pool.max_concurrent",
                                                        "workspace.land_check"]
    applied = with_live_sections(running, loaded)
    assert applied.workspace.land_check == "pytest -q" and applied.pool.max_concurrent == 2
    assert applied.provider.kind == running.provider.kind and applied.agents == {}
    assert changed_settings(applied, loaded) == ["agents.lead.model", "provider.kind"]
