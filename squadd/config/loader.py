"""The one layered loader: the shipped file < the user's file < `.squad/config.toml` <
`SQUADD_{SECTION}_{KEY}` environment variables < explicit overrides, each layer checked, then
merged and validated into `Settings`; a bad value's error names the layer it came from.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from squadd.config.checks import SECTIONS, check_keys, check_numbers, shown_number
from squadd.config.files import (
    MAX_SETTING_NUMBER,
    default_config_file,
    read_toml,
    user_config_file,
)
from squadd.config.models import Settings
from squadd.errors import ConfigError

ENV_PREFIX = "SQUADD_"


def _merge(base: dict[str, Any], layer: Mapping[str, Any], origin: dict[str, str],
           source: str) -> None:
    for section, body in layer.items():
        target = base.setdefault(section, {})
        for key, value in body.items():
            if section in ("agents", "pricing") and isinstance(value, Mapping):
                agent = target.setdefault(key, {})
                for sub, sub_value in value.items():
                    agent[sub] = sub_value
                    origin[f"{section}.{key}.{sub}"] = source
            else:
                target[key] = value
                origin[f"{section}.{key}"] = source


def _env_layer(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    layer: dict[str, dict[str, Any]] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX):].lower()
        section, _, key = rest.partition("_")
        if section not in SECTIONS or not key:
            continue  # not a setting (other SQUADD_* variables are the user's own)
        if key not in SECTIONS[section].model_fields:
            raise ConfigError(
                f"environment variable {name}: '{section}.{key}' is not a setting "
                f"(known keys in [{section}]: {', '.join(SECTIONS[section].model_fields)})",
                key=f"{section}.{key}", source=name,
            )
        layer.setdefault(section, {})[key] = _parse_env_value(name, raw)
    return layer


def _parse_env_value(name: str, raw: str) -> Any:
    stripped = raw.strip()
    if stripped[:1] in "[{":
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            return raw
        except ValueError:  # an integer of more digits than Python converts
            raise ConfigError(f"environment variable {name}: holds a number too large for any "
                              f"setting (at most {MAX_SETTING_NUMBER:,})", source=name) from None
        except RecursionError:
            raise ConfigError(f"environment variable {name}: nested too deeply",
                              source=name) from None
    return raw


def load_settings(
    squad_dir: Path | None = None,
    *,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    environ: Mapping[str, str] | None = None,
    user_file: Path | None = None,
) -> Settings:
    """Load settings through every layer; raise `ConfigError` naming the key and its file."""
    layers: list[tuple[str, dict[str, Any]]] = []
    default_file = default_config_file()
    layers.append((str(default_file), read_toml(default_file)))
    user = user_file if user_file is not None else user_config_file()
    layers.append((str(user), read_toml(user)))
    if squad_dir is not None:
        project = squad_dir / "config.toml"
        layers.append((str(project), read_toml(project)))
    env = _env_layer(os.environ if environ is None else environ)
    layers.append(("environment", env))
    if overrides:
        layers.append(("command line", {k: dict(v) for k, v in overrides.items()}))

    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for source, data in layers:
        check_keys(data, source)
        _merge(merged, data, origin, source)
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        raise _explain(exc, merged, origin) from None
    # Again on the typed values: the environment's text ("1e400", "inf") becomes numbers here.
    dumped = settings.model_dump()
    try:
        check_numbers(dumped, "settings")
    except ConfigError as exc:
        key = exc.key or ""
        raise ConfigError(str(exc).replace("settings:", _origin_of(tuple(key.split(".")),
                                                                     origin) + ":", 1),
                          key=key, source=_origin_of(tuple(key.split(".")), origin)) from None
    return settings


def _explain(exc: ValidationError, merged: Mapping[str, Any],
             origin: Mapping[str, str]) -> ConfigError:
    lines = []
    first_key = None
    first_source = None
    for error in exc.errors():
        dotted = ".".join(str(part) for part in error["loc"])
        value: Any = merged
        for part in error["loc"]:
            if isinstance(value, Mapping):
                value = value.get(part)
            elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
                value = value[part]
            else:
                value = None
        source = _origin_of(error["loc"], origin)
        first_key = first_key or dotted
        first_source = first_source or source
        shown = shown_number(value) if isinstance(value, int | float) else repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        lines.append(f"{source}: '{dotted}' = {shown} is invalid: {error['msg']}")
    return ConfigError("; ".join(lines), key=first_key, source=first_source)


def _origin_of(loc: tuple[int | str, ...], origin: Mapping[str, str]) -> str:
    """Where the setting at `loc` (or the setting it is part of: `tools.approvals.x`) came from."""
    for end in range(len(loc), 0, -1):
        source = origin.get(".".join(str(part) for part in loc[:end]))
        if source is not None:
            return source
    return "defaults"

