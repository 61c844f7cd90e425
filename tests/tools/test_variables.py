"""Variables: environment, the project's [variables] (text only), the 0600 secrets file, the
messages for missing values, and secrets kept out of log records."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import structlog

from squadd.config import Settings, ToolsSettings
from squadd.errors import VariablesMissing
from squadd.state.layout import SquadLayout
from squadd.tools.base import VariableSpec
from squadd.tools.secrets import SecretRegistry
from squadd.tools.variables import SquadVariables, default_secrets_file

TEXT = VariableSpec(name="REGION", type="text")
SECRET = VariableSpec(name="API_TOKEN", type="secret", description="the API token")


def _secrets_file(text: str, mode: int = 0o600) -> Path:
    path = default_secrets_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def _resolver(layout: SquadLayout, settings: Settings | None = None,
              environ: dict[str, str] | None = None) -> SquadVariables:
    """A resolver with a registry of its own, looking in `environ` (empty by default)."""
    return SquadVariables(layout, settings or Settings(), registry=SecretRegistry(),
                          environ=environ or {})


def _project(layout: SquadLayout, text: str) -> None:
    layout.config_toml.write_text(text, encoding="utf-8")


def test_text_comes_from_env_then_project_config_then_secrets_file(layout: SquadLayout) -> None:
    _project(layout, '[variables]\nREGION = "from-config"\nPORT = 8080\n')
    _secrets_file("REGION=from-secrets\nOTHER=o\n")
    port = VariableSpec(name="PORT")
    other = VariableSpec(name="OTHER")
    resolver = _resolver(layout)
    resolved = resolver.resolve((TEXT, port, other))
    assert resolved.values == {"REGION": "from-config", "PORT": "8080", "OTHER": "o"}
    assert resolved.secrets == {}
    env = _resolver(layout, environ={"REGION": "from-env"})
    assert env.resolve((TEXT,)).values == {"REGION": "from-env"}


def test_secrets_come_from_env_or_secrets_file_never_from_the_project(
        layout: SquadLayout) -> None:
    _project(layout, '[variables]\nAPI_TOKEN = "committed-to-git"\n')
    resolver = _resolver(layout)
    with pytest.raises(VariablesMissing) as missing:
        resolver.resolve((SECRET,))
    message = str(missing.value)
    assert "API_TOKEN" in message and "the API token" in message
    assert "export API_TOKEN=..." in message and str(default_secrets_file()) in message
    assert "secrets are never read from .squad/" in message
    assert "committed-to-git" not in message
    _secrets_file('# my secrets\nexport API_TOKEN="s3cret value"\n')
    resolved = resolver.resolve((SECRET,))
    assert resolved.values == resolved.secrets == {"API_TOKEN": "s3cret value"}


@pytest.mark.parametrize("mode, who", [(0o640, "group"), (0o604, "others"),
                                       (0o666, "group and others")])
def test_a_secrets_file_others_can_read_is_refused_with_the_reason(
        layout: SquadLayout, mode: int, who: str) -> None:
    path = _secrets_file("API_TOKEN=hidden\n", mode)
    with pytest.raises(VariablesMissing) as missing:
        _resolver(layout).resolve((SECRET,))
    message = str(missing.value)
    assert f"mode {mode:04o}, so {who} can access it" in message
    assert f"chmod 600 {path}" in message and "hidden" not in message


def test_a_malformed_secrets_file_names_the_line_not_its_content(layout: SquadLayout) -> None:
    _secrets_file("API_TOKEN=fine\nthis line leaks-a-secret\n")
    with pytest.raises(VariablesMissing) as missing:
        _resolver(layout).resolve((SECRET,))
    assert "line 2: expected NAME=value" in str(missing.value)
    assert "leaks-a-secret" not in str(missing.value)


def test_the_secrets_file_setting_is_honoured(layout: SquadLayout, tmp_path: Path) -> None:
    path = tmp_path / "vault"
    path.write_text("API_TOKEN=v\n", encoding="utf-8")
    path.chmod(0o600)
    settings = Settings(tools=ToolsSettings(secrets_file=str(path)))
    assert _resolver(layout, settings).resolve((SECRET,)).secrets == {
        "API_TOKEN": "v"}


def test_optional_missing_variables_are_left_out(layout: SquadLayout) -> None:
    optional = VariableSpec(name="MAYBE", required=False)
    assert _resolver(layout).resolve((optional,)).values == {}


def test_all_missing_variables_are_named_at_once(layout: SquadLayout) -> None:
    with pytest.raises(VariablesMissing) as missing:
        _resolver(layout).resolve((TEXT, SECRET))
    message = str(missing.value)
    assert "required variable REGION" in message and "required secret API_TOKEN" in message
    assert "under [variables]" in message


def test_log_records_have_resolved_secrets_redacted(layout: SquadLayout) -> None:
    _secrets_file("API_TOKEN=tok-123-secret\n")
    known = SecretRegistry()
    SquadVariables(layout, Settings(), registry=known, environ={}).resolve((SECRET,))
    assert known.snapshot()["API_TOKEN"] == "tok-123-secret"
    out = io.StringIO()
    logger = structlog.wrap_logger(
        structlog.PrintLogger(out),
        processors=[structlog.processors.format_exc_info, known.redact_log_event,
                    structlog.processors.JSONRenderer()])
    try:
        raise RuntimeError("call failed with tok-123-secret")
    except RuntimeError:
        logger.error("request", headers={"auth": "Bearer tok-123-secret"}, exc_info=True)
    line = out.getvalue()
    assert "tok-123-secret" not in line
    record = json.loads(line)
    assert record["headers"]["auth"] == "Bearer [secret:API_TOKEN]"
    assert "[secret:API_TOKEN]" in record["exception"]


def test_two_runtimes_in_one_process_keep_their_secrets_apart(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    from squadd.runtime.runtime import SquadRuntime

    settings = Settings.model_validate({"provider": {"kind": "openai",
                                                     "base_url": "http://127.0.0.1:9"}})
    first = SquadRuntime.from_settings(layout, settings)
    second = SquadRuntime.from_settings(layout, settings)
    for runtime, token in ((first, "first-runtime-token"), (second, "second-runtime-token")):
        monkeypatch.setenv("API_TOKEN", token)
        assert runtime.invoker.variables.resolve((SECRET,)).secrets == {"API_TOKEN": token}
    assert first.secrets.snapshot() == {"API_TOKEN": "first-runtime-token"}
    assert second.secrets.snapshot() == {"API_TOKEN": "second-runtime-token"}
    record = {"event": "saw first-runtime-token and second-runtime-token"}
    assert first.secrets.redact_log_event(None, "info", dict(record))["event"] == \
        "saw [secret:API_TOKEN] and second-runtime-token"
