"""`squadd doctor`'s provider check: configured, reachable, key accepted, without a prompt."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from squadd.cli._doctor_provider import provider_finding
from squadd.config import ProviderSettings
from tests.support.model_servers import unused_port


def _models(*ids: str, status: int = 200, seen: list[httpx.Request] | None = None,
            error: str = "") -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if status >= 400:
            return httpx.Response(status, json={"error": {"message": error}})
        return httpx.Response(200, json={"object": "list",
                                         "data": [{"id": i, "object": "model"} for i in ids]})
    return httpx.MockTransport(answer)


def test_openai_compatible_server_with_the_model_is_ok(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    settings = ProviderSettings(kind="openai", base_url="http://127.0.0.1:11434/v1/",
                                model="llama3.1")
    finding = provider_finding(settings, environ={"OPENAI_API_KEY": "sk-test"},
                               transport=_models("llama3.1", "qwen", seen=seen))
    assert finding.status == "ok" and "key accepted" in finding.summary
    assert str(seen[0].url) == "http://127.0.0.1:11434/v1/models"
    assert seen[0].headers["authorization"] == "Bearer sk-test"


def test_a_model_the_server_does_not_serve_is_a_warning() -> None:
    settings = ProviderSettings(kind="openai", base_url="http://local/v1", model="gpt-9")
    finding = provider_finding(settings, environ={}, transport=_models("llama3.1"))
    assert finding.status == "warn" and "'gpt-9' is not among the 1" in finding.summary
    assert "no key needed" in finding.summary


def test_a_refused_key_fails_with_the_servers_words() -> None:
    settings = ProviderSettings(kind="openai", api_key_env="MY_KEY")
    finding = provider_finding(settings, environ={"MY_KEY": "wrong"},
                               transport=_models(status=401, error="Incorrect API key"))
    assert finding.status == "fail"
    assert "$MY_KEY was refused (HTTP 401): Incorrect API key" in finding.summary


def test_the_openai_api_without_a_key_fails_before_any_request() -> None:
    seen: list[httpx.Request] = []
    finding = provider_finding(ProviderSettings(kind="openai"), environ={},
                               transport=_models(seen=seen))
    assert finding.status == "fail" and "$OPENAI_API_KEY is not set" in finding.summary
    assert seen == []


def test_an_unreachable_server_fails_naming_the_url() -> None:
    url = f"http://127.0.0.1:{unused_port()}/v1"
    finding = provider_finding(ProviderSettings(kind="openai", base_url=url), environ={})
    assert finding.status == "fail" and f"cannot reach {url}/models" in finding.summary


def test_a_server_without_a_models_list_is_a_warning() -> None:
    finding = provider_finding(ProviderSettings(kind="openai", base_url="http://local/v1"),
                               environ={}, transport=_models(status=404))
    assert finding.status == "warn" and "does not list its models" in finding.summary


def test_anthropic_is_asked_for_its_models_with_the_key_and_version() -> None:
    seen: list[httpx.Request] = []
    settings = ProviderSettings(kind="anthropic", model="claude-test")
    finding = provider_finding(settings, environ={"ANTHROPIC_API_KEY": "ak"},
                               transport=_models("claude-test", seen=seen))
    assert finding.status == "ok"
    assert seen[0].url.path == "/v1/models" and seen[0].headers["x-api-key"] == "ak"
    assert seen[0].headers["anthropic-version"]
    missing = provider_finding(settings, environ={})
    assert missing.status == "fail" and "$ANTHROPIC_API_KEY is not set" in missing.summary


def test_a_command_provider_needs_its_program_on_path() -> None:
    found = provider_finding(ProviderSettings(kind="command", command=[sys.executable, "-V"]))
    assert found.status == "ok"
    lost = provider_finding(ProviderSettings(kind="command", command=["no-such-agent-cli"]))
    assert lost.status == "fail" and "'no-such-agent-cli' is not on PATH" in lost.summary


def test_a_replay_file_must_parse(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("- text: hi\n- text: bye\n", encoding="utf-8")
    assert provider_finding(ProviderSettings(kind="replay", replay_file=str(good))).status == "ok"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    finding = provider_finding(ProviderSettings(kind="replay", replay_file=str(bad)))
    assert finding.status == "fail" and "not valid JSON" in finding.summary
