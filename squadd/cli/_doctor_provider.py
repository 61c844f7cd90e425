"""`squadd doctor`'s provider check: is the provider configured, reachable, and its key accepted?

An OpenAI-compatible API is asked for `GET {base_url}/models`, Anthropic for `GET /v1/models`
(cheap, and they need the key); a command provider's program must be on PATH; a replay file
must parse. Nothing here sends a prompt or spends tokens.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from squadd.config import ProviderSettings
from squadd.errors import ConfigError
from squadd.providers.http import api_key_from

Status = Literal["ok", "warn", "fail", "skip"]
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Finding:
    status: Status
    summary: str
    details: list[str] = field(default_factory=list)


def provider_finding(settings: ProviderSettings, *, environ: Mapping[str, str] | None = None,
                     transport: httpx.BaseTransport | None = None) -> Finding:
    """Check the `[provider]` settings as `squadd serve` would use them."""
    env = os.environ if environ is None else environ
    if settings.kind == "openai":
        return _openai(settings, env, transport)
    if settings.kind == "anthropic":
        return _anthropic(settings, env, transport)
    if settings.kind == "command":
        return _command(settings)
    return _replay(settings)


def _openai(settings: ProviderSettings, env: Mapping[str, str],
            transport: httpx.BaseTransport | None) -> Finding:
    from squadd.providers.openai import DEFAULT_BASE_URL, DEFAULT_KEY_ENV, DEFAULT_MODEL

    base, model, key, key_env, where = _endpoint(settings, env, DEFAULT_BASE_URL,
                                                 DEFAULT_MODEL, DEFAULT_KEY_ENV)
    if not key and base == DEFAULT_BASE_URL:
        return Finding("fail", f"${key_env} is not set: the OpenAI API needs a key "
                               f"(export {key_env}=..., or set provider.base_url to a local "
                               "server such as Ollama)", where)
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return _probe(f"{base}/models", headers, settings, transport, where, model, key_env,
                  key_needed=bool(key))


def _anthropic(settings: ProviderSettings, env: Mapping[str, str],
               transport: httpx.BaseTransport | None) -> Finding:
    from squadd.providers.anthropic import (
        API_VERSION,
        DEFAULT_BASE_URL,
        DEFAULT_KEY_ENV,
        DEFAULT_MODEL,
    )

    base, model, key, key_env, where = _endpoint(settings, env, DEFAULT_BASE_URL,
                                                 DEFAULT_MODEL, DEFAULT_KEY_ENV)
    if not key:
        return Finding("fail", f"${key_env} is not set: the Anthropic API needs a key "
                               f"(export {key_env}=...)", where)
    headers = {"x-api-key": key, "anthropic-version": API_VERSION}
    return _probe(f"{base}/v1/models", headers, settings, transport, where, model, key_env,
                  key_needed=True)


def _endpoint(settings: ProviderSettings, env: Mapping[str, str], default_base: str,
              default_model: str, default_key_env: str
              ) -> tuple[str, str, str | None, str, list[str]]:
    """The base URL, model, key and key variable the provider would use, and how to show them."""
    base = (settings.base_url or default_base).rstrip("/")
    model = settings.model or default_model
    key, key_env = api_key_from(settings, default_key_env, env)
    where = [f"kind: {settings.kind}, base_url: {base}, model: {model}",
             f"key: ${key_env} {'is set' if key else 'is not set'}"]
    return base, model, key, key_env, where


def _probe(url: str, headers: dict[str, str], settings: ProviderSettings,
           transport: httpx.BaseTransport | None, where: list[str], model: str, key_env: str,
           *, key_needed: bool) -> Finding:
    timeout = httpx.Timeout(min(settings.read_timeout_s, PROBE_TIMEOUT_S),
                            connect=min(settings.connect_timeout_s, PROBE_TIMEOUT_S))
    try:
        with httpx.Client(timeout=timeout, transport=transport) as client:
            response = client.get(url, headers={"accept": "application/json", **headers})
    except httpx.HTTPError as exc:
        return Finding("fail", f"cannot reach {url}: {type(exc).__name__}: {exc}", where)
    status = response.status_code
    if status in (401, 403):
        return Finding("fail", f"the key in ${key_env} was refused (HTTP {status}): "
                               f"{_error_text(response)}", where)
    if status in (404, 405):
        return Finding("warn", f"reachable, but {url} answers HTTP {status}: the server does "
                               "not list its models, so the key and model were not checked",
                       where)
    if status >= 400:
        return Finding("fail", f"{url} answered HTTP {status}: {_error_text(response)}", where)
    models = _model_ids(response)
    accepted = "key accepted" if key_needed else "no key needed"
    if models and model not in models:
        shown = ", ".join(sorted(models)[:10]) + (" ..." if len(models) > 10 else "")
        return Finding("warn", f"reachable, {accepted}, but model {model!r} is not among the "
                               f"{len(models)} it serves ({shown})", where)
    return Finding("ok", f"reachable, {accepted}" + (f", serves {model}" if models else ""),
                   where)


def _model_ids(response: httpx.Response) -> set[str]:
    try:
        data: Any = response.json()
    except ValueError:
        return set()
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return set()
    return {str(item["id"]) for item in items if isinstance(item, dict) and "id" in item}


def _error_text(response: httpx.Response) -> str:
    try:
        data: Any = response.json()
    except ValueError:
        return response.text[:200] or "(no body)"
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:200]
    if isinstance(error, str):
        return error[:200]
    return response.text[:200]


def _command(settings: ProviderSettings) -> Finding:
    if not settings.command:
        return Finding("fail", "provider.kind = 'command' needs provider.command, e.g. "
                               '["claude", "-p", "{prompt}"]')
    program = settings.command[0]
    found = shutil.which(program)
    where = [f"kind: command, command: {' '.join(settings.command)}"]
    if found is None:
        return Finding("fail", f"{program!r} is not on PATH: install it or fix provider.command",
                       where)
    return Finding("ok", f"{program} found at {found} (its own login is not checked)", where)


def _replay(settings: ProviderSettings) -> Finding:
    from squadd.providers.replay import load_script

    if not settings.replay_file:
        return Finding("fail", "provider.kind = 'replay' needs provider.replay_file")
    path = Path(settings.replay_file)
    try:
        script = load_script(path)
    except ConfigError as exc:
        return Finding("fail", str(exc), [f"kind: replay, file: {path}"])
    turns = len(script.default) + sum(len(turns) for turns in script.agents.values())
    return Finding("ok", f"replay file parses: {turns} scripted turns (a recording, not a "
                         "model)", [f"kind: replay, file: {path}"])
