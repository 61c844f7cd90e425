"""Every duration of a YAML tool file: a bare number is milliseconds, a string may carry a unit,
and each key has bounds; a value just outside them is refused naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from squadd.tools.yaml.checks import check_spec
from squadd.tools.yaml.durations import parse_size, show_duration
from squadd.tools.yaml.schema import ShellToolFile
from tests.tools.custom_tools import shell_tool


def _file(key: str, value: Any) -> dict[str, Any]:
    """A tool file with `value` at duration `key`."""
    data: dict[str, Any] = {"description": "d", "tags": ["read"],
                            "steps": [{"name": "s", "bash": "true"}]}
    if key == "timeout":
        data["timeout"] = value
    elif key.startswith("resources."):
        data["resources"] = {key.removeprefix("resources."): value}
    elif key == "interactive-options.timeout":
        data["interactive"] = True
        data["interactive-options"] = {"timeout": value}
    else:
        data["steps"][0]["error-handling"] = {"retry": {"attempts": 2, "delay": value}}
    return data


KEYS = {  # key: (lowest accepted, highest accepted, lowest refused above, refused below)
    "timeout": (1, 3_600_000, 3_600_001, 0),
    "resources.timeout": (1, 3_600_000, 3_600_001, 0),
    "interactive-options.timeout": (1, 3_600_000, 3_600_001, 0),
    "steps.s.error-handling.retry.delay": (0, 60_000, 60_001, None),
    "resources.max-cpu-time": (1, 86_400_000, 86_400_001, 0),
}

ACCEPTED = [
    (key, value, seconds)
    for key, (low, high, _, _) in KEYS.items()
    for value, seconds in [(low, low / 1000), (high, high / 1000), (1500, 1.5),
                           ("500ms", 0.5), ("30s", 30.0), ("2m", 120.0), ("750", 0.75),
                           (" 1.5s ", 1.5), (2500.0, 2.5)]
    if value in (low, high) or 0.5 <= seconds <= high / 1000
]


@pytest.mark.parametrize(("key", "value", "seconds"), ACCEPTED)
def test_a_duration_resolves_to_seconds(key: str, value: Any, seconds: float) -> None:
    spec = ShellToolFile.model_validate(_file(key, value))
    check_spec(spec)
    assert spec.durations()[key] == pytest.approx(seconds)


REFUSED = [
    (key, value, why)
    for key, (_, high, above, below) in KEYS.items()
    for value, why in [(above, "outside the range"),
                       (f"{high + 1}ms", "outside the range"),
                       ("2d", "is not a duration"), ("fast", "is not a duration"),
                       (True, "expected a duration"), (-5, "is not a duration|outside"),
                       *([(below, "outside the range")] if below is not None else [])]
]


@pytest.mark.parametrize(("key", "value", "why"), REFUSED)
def test_a_duration_out_of_bounds_or_malformed_names_its_key(key: str, value: Any,
                                                             why: str) -> None:
    spec = ShellToolFile.model_validate(_file(key, value))
    with pytest.raises(ValueError, match=why) as caught:
        check_spec(spec)
    assert str(caught.value).startswith(f"{key}: ")


def test_bare_numbers_are_milliseconds_in_the_run_timeout_and_the_retry_delay() -> None:
    tool = shell_tool({"description": "d", "timeout": 60000, "steps": [
        {"name": "a", "bash": "true", "error-handling": {"retry": {"delay": 1000}}}]})
    assert tool.run_timeout_s == 60.0
    assert tool.definition.steps is not None
    retry = tool.definition.steps[0].error_handling
    assert retry is not None and retry.retry is not None and retry.retry.delay_s == 1.0


def test_the_shorter_of_timeout_and_resources_timeout_bounds_the_run() -> None:
    tool = shell_tool({"description": "d", "bash": "true", "timeout": "2m",
                       "resources": {"timeout": 30000}})
    assert tool.run_timeout_s == 30.0


@pytest.mark.parametrize(("value", "size"), [(1024, 1024), ("64KB", 65536), ("512MB", 512 << 20),
                                             ("2gb", 2 << 30), ("1.5k", 1536)])
def test_sizes_read_bytes_or_a_unit(value: Any, size: int) -> None:
    assert parse_size(value, key="resources.max-memory") == size


@pytest.mark.parametrize("value", [0, "12 parsecs", True, "-1MB", 2 << 41])
def test_a_bad_size_names_its_key(value: Any) -> None:
    with pytest.raises(ValueError, match=r"^resources\.max-memory: "):
        parse_size(value, key="resources.max-memory")


def test_durations_are_shown_in_milliseconds_and_a_unit() -> None:
    assert show_duration(60.0) == "60000 ms (1m)"
    assert show_duration(1.5) == "1500 ms (1.5s)"
    assert show_duration(0.25) == "250 ms"
