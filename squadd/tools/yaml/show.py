"""What `squadd tools show` adds for a YAML tool: resolved durations and limits, the keys it
keeps and shows (detailed help, security, file paths, metadata, function calling, changelog),
and the warnings of keys squadd cannot honour here."""

from __future__ import annotations

from typing import Any

from squadd.tools.yaml.durations import parse_size, show_duration
from squadd.tools.yaml.tool import ShellTool

_KEPT = ("min_cycod_version", "version", "security", "file_paths", "metadata",
         "function_calling", "changelog", "interactive", "interactive_options", "resources",
         "ignore_errors", "platforms")


def yaml_details(tool: ShellTool) -> dict[str, Any]:
    """The YAML-specific part of `tools show` for `tool` (an alias shows its own file)."""
    spec = tool.definition
    durations = {key: show_duration(seconds) for key, seconds in spec.durations().items()}
    durations["run timeout (used)"] = show_duration(tool.run_timeout_s)
    kept = spec.model_dump(by_alias=True, exclude_unset=True, include=set(_KEPT))
    details: dict[str, Any] = {
        "durations": durations,
        "kept": kept,
        "warnings": list(tool.warnings),
    }
    if spec.resources.max_memory is not None:
        details["limits"] = {"max-memory bytes": parse_size(spec.resources.max_memory,
                                                             key="resources.max-memory")}
    helps = {name: param.detailed_help for name, param in tool.parameters.items()
             if param.detailed_help}
    if helps:
        details["detailed-help"] = helps
    if spec.type == "alias":
        details["base-tool"] = spec.base_tool
        details["default-parameters"] = spec.default_parameters
    return details
