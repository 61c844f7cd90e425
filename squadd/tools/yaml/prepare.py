"""What a command gets before it starts: parameter values after their `transform` and in their
`format`, and its argv under the tool's resource limits.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping
from typing import Any

from squadd.tools.yaml.durations import CPU_TIME, parse_duration, parse_size
from squadd.tools.yaml.keys import TRANSFORMS, ResourcesSpec, transform_steps
from squadd.tools.yaml.schema import ShellToolFile
from squadd.tools.yaml.template import NO_WORD, value_text


def transformed(spec: ShellToolFile, values: Mapping[str, Any]) -> dict[str, Any]:
    """Values after each parameter's `transform` (one squadd can evaluate; else as given)."""
    done = dict(values)
    for name, param in spec.parameters.items():
        steps = transform_steps(param.transform) if param.transform else None
        if not steps or name not in done:
            continue
        for method in steps:
            done[name] = _apply(TRANSFORMS[method], done[name])
    return done


def _apply(method: Any, value: Any) -> Any:
    if isinstance(value, str):
        return method(value)
    if isinstance(value, list):
        return [method(v) if isinstance(v, str) else v for v in value]
    return value


def formatted(spec: ShellToolFile, values: Mapping[str, Any]) -> dict[str, Any]:
    """Values as they stand in a command: a parameter with a `format` becomes that text, or no
    word at all when it has no value (or is a false boolean)."""
    done = dict(values)
    for name, param in spec.parameters.items():
        if param.format is None or name not in done:
            continue
        value = done[name]
        if value is None or value is False or value == "" or value == []:
            done[name] = NO_WORD
        elif isinstance(value, list):
            done[name] = [param.format.replace("{value}", value_text(v)) for v in value]
        else:
            done[name] = param.format.replace("{value}", value_text(value))
    return done


def limited(argv: list[str], resources: ResourcesSpec) -> list[str]:
    """argv under the tool's memory and CPU limits (setrlimit through `prlimit`, else the
    shell's `ulimit`), so that every process the command starts inherits them."""
    limits: list[tuple[str, str, int]] = []
    if resources.max_memory is not None:
        size = parse_size(resources.max_memory, key="resources.max-memory")
        limits.append(("--as", "-v", size))
    if resources.max_cpu_time is not None:
        seconds = parse_duration(resources.max_cpu_time, key="resources.max-cpu-time",
                                 bounds=CPU_TIME)
        limits.append(("--cpu", "-t", max(1, math.ceil(seconds))))
    if not limits:
        return argv
    prlimit = shutil.which("prlimit")
    if prlimit is not None:
        return [prlimit, *(f"{flag}={value}" for flag, _, value in limits), "--", *argv]
    script = " && ".join(f"ulimit {flag} {value // 1024 if flag == '-v' else value}"
                       for _, flag, value in limits)
    return ["sh", "-c", f'{script} && exec "$@"', "squadd-limits", *argv]
