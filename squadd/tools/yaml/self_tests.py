"""The runner of a YAML tool file's own `tests:` (`squadd tools test`): each test's call goes
through the invocation pipeline, then its expected exit code, output and files are checked and
its cleanup commands run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from squadd.contracts.messages import ToolCall
from squadd.tools.base import ToolSet
from squadd.tools.invoke import CallOrigin, ToolInvoker
from squadd.tools.yaml.template import substitute_text
from squadd.tools.yaml.tool import ShellTool


@dataclass
class ToolTestOutcome:
    tool: str
    test: str
    passed: bool
    problems: list[str] = field(default_factory=list)
    output: str = ""


async def run_tool_tests(tool: ShellTool, invoker: ToolInvoker, *,
                         session_id: str = "tools-test",
                         on_result: Callable[[ToolTestOutcome], None] | None = None,
                         ) -> list[ToolTestOutcome]:
    """Run the `tests:` of `tool` through the pipeline; one outcome per test."""
    outcomes: list[ToolTestOutcome] = []
    tools = ToolSet([tool])
    for index, test in enumerate(tool.definition.tests, start=1):
        call = ToolCall(id=f"{_slug(tool.name)}-test-{index}", name=tool.name,
                        arguments=dict(test.parameters))
        result = await invoker.invoke(tools, call, CallOrigin(session_id=session_id,
                                                              agent="squadd"))
        problems: list[str] = []
        expected = test.expected
        exit_code = result.details.get("exit_code")
        if exit_code != expected.exit_code:
            problems.append(f"exit code {exit_code}, expected {expected.exit_code}")
        full = result.details.get("full_output")
        for needle in _many(expected.output_contains):
            found = needle in result.text or (
                isinstance(full, str) and await anyio.to_thread.run_sync(
                    _file_contains, Path(full), needle))
            if not found:
                problems.append(f"the output does not contain {needle!r}")
        values = {k: v for k, v in test.parameters.items()}
        folder = _test_dir(tool, values, invoker.layout.repo)
        for wanted in _many(expected.file_exists):
            path = folder / substitute_text(wanted, values)
            if not await anyio.to_thread.run_sync(path.exists):
                problems.append(f"file {wanted} does not exist")
        for command in test.cleanup:
            with anyio.move_on_after(tool.run_timeout_s):
                done = await anyio.run_process(["bash", "-c", command], cwd=folder, check=False)
                if done.returncode != 0:
                    problems.append(f"cleanup {command!r} exited with {done.returncode}")
        outcome = ToolTestOutcome(tool.name, test.name, not problems, problems, result.text)
        outcomes.append(outcome)
        if on_result is not None:
            on_result(outcome)
    return outcomes


def _many(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", name)[:40] or "tool"


def _test_dir(tool: ShellTool, values: Mapping[str, Any], repo: Path) -> Path:
    if not tool.plan.working_directory:
        return repo
    folder = Path(substitute_text(tool.plan.working_directory, values)).expanduser()
    return folder if folder.is_absolute() else repo / folder


def _file_contains(path: Path, needle: str) -> bool:
    wanted = needle.encode("utf-8")
    overlap = max(0, len(wanted) - 1)
    tail = b""
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            if wanted in tail + chunk:
                return True
            tail = (tail + chunk)[-overlap:] if overlap else b""
    return False

