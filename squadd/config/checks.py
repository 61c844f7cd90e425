"""The checks every settings layer passes before it is merged: known sections and keys, names that
are names, text without NUL bytes, numbers that are finite and in range. Each error names the key
and the file (or variable) it came from.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from squadd.config.files import MAX_SETTING_NUMBER, MAX_SETTING_SECONDS
from squadd.config.models import AgentSettings, PriceSettings, Settings
from squadd.contracts.names import NAME_RULE, is_safe_name
from squadd.errors import ConfigError

_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")

SECTIONS: dict[str, type[BaseModel]] = {
    name: field.annotation
    for name, field in Settings.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
}
_FREE_SECTIONS = {"agents", "variables", "pricing"}
_PRICED_MODEL = re.compile(r"^[A-Za-z0-9_.-]+/[^\s]+$")


def check_numbers(data: Mapping[str, Any], source: str) -> None:
    """Every number is finite and within `MAX_SETTING_NUMBER` (durations: seconds within
    `MAX_SETTING_SECONDS`); the error names the key and where it came from."""
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in data.items()]
    while stack:
        dotted, value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend((f"{dotted}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{dotted}.{i}", v) for i, v in enumerate(value))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            limit = MAX_SETTING_SECONDS if dotted.endswith("_s") else MAX_SETTING_NUMBER
            if isinstance(value, float) and not math.isfinite(value):
                problem = f"= {value} is not a finite number"
            elif abs(value) > limit:
                problem = (f"= {shown_number(value)} is out of range: at most {limit:,}"
                           + (" seconds" if limit == MAX_SETTING_SECONDS else ""))
            else:
                continue
            raise ConfigError(f"{source}: '{dotted}' {problem}", key=dotted, source=source)


def shown_number(value: float) -> str:
    if isinstance(value, float):
        return repr(value)
    digits = len(str(abs(value))) if value.bit_length() < 10_000 else 0
    return f"a number of {digits:,} digits" if digits > 24 or not digits else str(value)


def check_keys(data: Mapping[str, Any], source: str) -> None:
    for section, body in data.items():
        if section not in Settings.model_fields:
            known = ", ".join(sorted(Settings.model_fields))
            raise ConfigError(
                f"{source}: unknown section [{section}] (known sections: {known})",
                key=section, source=source,
            )
        if not isinstance(body, Mapping):
            raise ConfigError(
                f"{source}: [{section}] must be a table, got {type(body).__name__}",
                key=section, source=source,
            )
        if section in _FREE_SECTIONS:
            if section == "variables":
                for name in body:
                    if not _VARIABLE_NAME.fullmatch(name):
                        raise ConfigError(
                            f"{source}: 'variables.{name}': {name!r} is not a variable name "
                            f"(names match {_VARIABLE_NAME.pattern})", key=f"variables.{name}",
                            source=source)
            if section == "pricing":
                _check_pricing(body, source)
            if section == "agents":
                for agent, agent_body in body.items():
                    if not is_safe_name(agent):
                        raise ConfigError(
                            f"{source}: [agents.{agent}]: {agent!r} is not an agent name (names "
                            f"match {NAME_RULE})", key=f"agents.{agent}", source=source)
                    if not isinstance(agent_body, Mapping):
                        raise ConfigError(
                            f"{source}: [agents.{agent}] must be a table",
                            key=f"agents.{agent}", source=source,
                        )
                    for key in agent_body:
                        if key not in AgentSettings.model_fields:
                            raise ConfigError(
                                f"{source}: unknown key 'agents.{agent}.{key}' "
                                f"(known: {', '.join(AgentSettings.model_fields)})",
                                key=f"agents.{agent}.{key}", source=source,
                            )
            continue
        model = SECTIONS[section]
        for key in body:
            if key not in model.model_fields:
                known = ", ".join(model.model_fields)
                raise ConfigError(
                    f"{source}: unknown key '{section}.{key}' (known keys in [{section}]: "
                    f"{known})",
                    key=f"{section}.{key}", source=source,
                )
    _check_text(data, source)
    check_numbers(data, source)


def _check_pricing(body: Mapping[str, Any], source: str) -> None:
    for model, prices in body.items():
        if not _PRICED_MODEL.fullmatch(model):
            raise ConfigError(
                f"{source}: [pricing.\"{model}\"]: a price table is named \"PROVIDER/MODEL\" "
                "(e.g. [pricing.\"openai/gpt-4o\"])", key=f"pricing.{model}", source=source)
        if not isinstance(prices, Mapping):
            raise ConfigError(f"{source}: [pricing.\"{model}\"] must be a table",
                              key=f"pricing.{model}", source=source)
        for key in prices:
            if key not in PriceSettings.model_fields:
                raise ConfigError(
                    f"{source}: unknown key 'pricing.\"{model}\".{key}' (known: "
                    f"{', '.join(PriceSettings.model_fields)}, in US dollars per million "
                    "tokens)", key=f"pricing.{model}.{key}", source=source)


def _check_text(data: Mapping[str, Any], source: str) -> None:
    """No setting holds a NUL byte or text that is not valid UTF-8 (from the environment)."""
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in data.items()]
    while stack:
        dotted, value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend((f"{dotted}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{dotted}.{i}", v) for i, v in enumerate(value))
        for text in (value, dotted):
            bad = _BAD_TEXT.search(text) if isinstance(text, str) else None
            if bad is not None:
                what = "a NUL byte" if bad.group() == "\x00" else "text that is not UTF-8"
                raise ConfigError(f"{source}: '{_BAD_TEXT.sub('?', dotted)}' holds {what}",
                                  key=_BAD_TEXT.sub("?", dotted), source=source)

