"""Run a YAML tool's plan: one command, or steps with conditions, parallelism, retries,
fallbacks, output variables and other tools, all within one deadline and one cancellation
signal, each command under the tool's resource limits.

Every command's output streams into its own part file (`CallPlace.new_sink`); the blocks of a
`PlanReport` say in which order the parts make up the call's output.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio
from pydantic import ValidationError

from squadd.sandbox import SandboxPolicy
from squadd.state.layout import SquadLayout
from squadd.tools.base import CancelSignal
from squadd.tools.commands.output import Block, OutputSink, render
from squadd.tools.commands.process import Command, CommandOutcome, run_command
from squadd.tools.yaml.checks import step_condition
from squadd.tools.yaml.conditions import Ref
from squadd.tools.yaml.dialects import dialect_of, interpreter_argv, substitute
from squadd.tools.yaml.durations import parse_size
from squadd.tools.yaml.prepare import formatted, limited, transformed
from squadd.tools.yaml.schema import ShellToolFile, StepSpec
from squadd.tools.yaml.template import (
    PLACEHOLDER_RE,
    split_run,
    substitute_argv,
    substitute_text,
    value_text,
)

MINIMAL_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "USER", "LOGNAME", "TZ")
"""What a tool with `environment: {inherit: false}` still gets from squadd's environment."""
CONDITION_OUTPUT_BYTES = 65536
CLEANUP_S = 10.0
"""How long the `resources.cleanup` final commands may run, after the tool, whatever its end."""
StepStatus = Literal["ok", "failed", "skipped", "not-run"]


@dataclass
class CallPlace:
    """Where one call's output goes, what it may use, and until when it may run."""

    layout: SquadLayout
    session_id: str
    call_id: str
    secrets: Mapping[str, str]
    head_bytes: int
    deadline: float
    cancel: CancelSignal
    variables: Mapping[str, str]
    repo: Path
    progress: Callable[[str, float | None], None]
    parts: list[OutputSink] = field(default_factory=list)
    hidden: frozenset[str] = frozenset()
    """Other tools' scoped variables: left out of the inherited environment."""
    sandbox: SandboxPolicy | None = None
    """The sandbox every command of the call runs in (None: unconfined)."""

    async def new_sink(self) -> OutputSink:
        path = self.layout.tool_output_part(self.session_id, self.call_id,
                                            str(len(self.parts) + 1))
        sink = OutputSink(path, self.secrets, self.head_bytes)
        self.parts.append(sink)
        await sink.open()
        return sink


class LinkedTool(Protocol):
    """Another YAML tool a `use-tool` step runs (a `ShellTool`)."""

    plan: ShellToolFile

    def plan_values(self, arguments: Mapping[str, Any]) -> dict[str, Any]: ...

    def linked(self, name: str) -> LinkedTool: ...


@dataclass
class StepResult:
    name: str
    status: StepStatus
    exit_code: int | None = None
    note: str = ""
    output: str = ""
    blocks: list[Block] = field(default_factory=list)
    timed_out: bool = False
    cancelled: bool = False


@dataclass
class PlanReport:
    ok: bool
    blocks: list[Block]
    exit_code: int | None
    steps: list[StepResult] = field(default_factory=list)
    timed_out: bool = False
    cancelled: bool = False


def _environment(spec: ShellToolFile, values: Mapping[str, Any],
                 variables: Mapping[str, str], hidden: frozenset[str]) -> dict[str, str]:
    if spec.environment.inherit:
        env = {k: v for k, v in os.environ.items() if k not in hidden}
    else:
        env = {k: os.environ[k] for k in MINIMAL_ENV if k in os.environ}
    for key, value in spec.environment.variables.items():
        env[key] = substitute_text(value_text(value), values)
    env.update(variables)
    return env


def _working_dir(spec: ShellToolFile, values: Mapping[str, Any], repo: Path) -> Path:
    if not spec.working_directory:
        return repo
    folder = Path(substitute_text(spec.working_directory, values)).expanduser()
    folder = folder if folder.is_absolute() else repo / folder
    if not folder.is_dir():
        raise FileNotFoundError(f"working-directory {folder} does not exist")
    return folder


def bash_argv(template: str, values: Mapping[str, Any], shell: str = "bash") -> list[str]:
    """argv running `template` with `shell`, each value quoted for that shell."""
    return interpreter_argv(shell, substitute(template, values, dialect_of(shell)))


class PlanRunner:
    """Runs one tool's plan with its parameter values (recursively for `use-tool`)."""

    def __init__(self, tool: LinkedTool, values: Mapping[str, Any], place: CallPlace, *,
                 prefix: str = ""):
        self.tool = tool
        self.spec = tool.plan
        self.values = transformed(self.spec, values)
        self.words = formatted(self.spec, self.values)
        """The values as they stand in commands, with step output variables as they come."""
        for step in self.spec.steps or ():
            if step.output is not None and step.output.variable is not None:
                self.words[step.output.variable] = ""
        self.place = place
        self.prefix = prefix
        self.env = _environment(self.spec, self.values, place.variables, place.hidden)
        self.cwd = _working_dir(self.spec, self.values, place.repo)

    def _command(self, argv: list[str]) -> Command:
        stdin = None
        if self.spec.input is not None:
            stdin = substitute_text(self.spec.input, self.values).encode("utf-8")
        return Command(limited(argv, self.spec.resources), self.cwd, self.env, stdin)

    async def run(self) -> PlanReport:
        spec = self.spec
        if spec.steps is None:
            if spec.run is not None:
                argv = substitute_argv(split_run(spec.run), self.words)
            else:
                command = spec.main_command()
                assert command is not None
                argv = bash_argv(command[1], self.words, command[0])
            sink = await self.place.new_sink()
            try:
                outcome = await run_command(self._command(argv), sink,
                                            deadline=self.place.deadline,
                                            cancel=self.place.cancel,
                                            sandbox=self.place.sandbox)
            finally:
                await sink.close()
            ignored = spec.ignore_errors and not (outcome.timed_out or outcome.cancelled)
            return PlanReport(outcome.ok or ignored, [Block(None, sink)], outcome.exit_code,
                              timed_out=outcome.timed_out, cancelled=outcome.cancelled)
        return await self._steps(spec.steps)

    async def cleanup(self) -> list[Block]:
        """Run the `final-command`s of `resources.cleanup`, each within `CLEANUP_S` and even
        when the tool failed, timed out or was cancelled; their exit does not change the
        tool's result."""
        blocks: list[Block] = []
        for item in self.spec.resources.cleanup:
            if item.final_command is None:
                continue
            sink = await self.place.new_sink()
            try:
                outcome = await run_command(
                    self._command(bash_argv(item.final_command, self.words)), sink,
                    deadline=anyio.current_time() + CLEANUP_S, cancel=CancelSignal(),
                    sandbox=self.place.sandbox)
            finally:
                await sink.close()
            how = ("timed out" if outcome.timed_out else f"exit {outcome.exit_code}")
            blocks.append(Block(f"[cleanup] {how}", sink))
        return blocks

    async def _steps(self, steps: list[StepSpec]) -> PlanReport:
        deps = step_dependencies(steps)
        done = {step.name: anyio.Event() for step in steps}
        results: dict[str, StepResult] = {}
        stop: list[str] = []

        async def one(index: int, step: StepSpec) -> None:
            try:
                for name in deps[step.name]:
                    await done[name].wait()
                results[step.name] = await self._step(index, len(steps), step, results, stop)
                result = results[step.name]
                if result.status == "failed" and not self._goes_on(step):
                    stop.append(step.name)
            finally:
                done[step.name].set()

        async with anyio.create_task_group() as group:
            for index, step in enumerate(steps):
                group.start_soon(one, index, step)
        ordered = [results[step.name] for step in steps]
        blocks = [block for result in ordered for block in result.blocks]
        failed = [r for r, s in zip(ordered, steps, strict=True)
                  if r.status == "failed" and not self._goes_on(s)]
        exit_code = 0
        if failed:
            code = failed[0].exit_code
            exit_code = code if code not in (None, 0) else 1
        return PlanReport(not failed, blocks, exit_code, steps=ordered,
                          timed_out=any(r.timed_out for r in ordered),
                          cancelled=any(r.cancelled for r in ordered))

    def _goes_on(self, step: StepSpec) -> bool:
        """Whether the steps after a failed `step` still run (and the tool still succeeds)."""
        return step.continue_on_error or self.spec.ignore_errors

    def _header(self, step: StepSpec, text: str) -> str:
        return f"[step {self.prefix}{step.name}] {text}"

    async def _step(self, index: int, count: int, step: StepSpec,
                    results: Mapping[str, StepResult], stop: list[str]) -> StepResult:
        place = self.place
        reason = None
        if stop:
            reason = f"not run: step {stop[0]} failed"
        elif place.cancel.cancelled:
            reason = "not run: the call was cancelled"
        elif anyio.current_time() >= place.deadline:
            reason = "not run: the tool ran out of time"
        if reason is not None:
            return StepResult(step.name, "not-run", note=reason,
                              blocks=[Block(self._header(step, reason))])
        if step.run_condition is not None:
            condition = step_condition(step)
            if not condition.evaluate(lambda ref: self._lookup(ref, results)):
                note = f"skipped: run-condition {step.run_condition!r} is false"
                return StepResult(step.name, "skipped", note=note,
                                  blocks=[Block(self._header(step, note))])
        place.progress(f"step {self.prefix}{step.name}", index / count)
        if step.use_tool is not None:
            return await self._use_tool(step)
        return await self._command_step(step)

    def _lookup(self, ref: Ref, results: Mapping[str, StepResult]) -> str:
        if ref.field is None:
            return value_text(self.values.get(ref.name, self.words.get(ref.name)))
        result = results.get(ref.name)
        if result is None:
            return ""
        if ref.field == "exit-code":
            return "" if result.exit_code is None else str(result.exit_code)
        return result.output

    async def _command_step(self, step: StepSpec) -> StepResult:
        place = self.place
        if step.run is not None:
            argv = substitute_argv(split_run(step.run), self.words)
        else:
            command = step.command()
            assert command is not None
            argv = bash_argv(command[1], self.words, command[0])
        handling = step.error_handling
        attempts = handling.retry.attempts if handling and handling.retry else 1
        delay = handling.retry.delay_s if handling and handling.retry else 0.0
        sink = await place.new_sink()
        outcome = CommandOutcome(None)
        tries = 0
        try:
            for attempt in range(1, attempts + 1):
                tries = attempt
                if attempt > 1:
                    await sink.note(f"[attempt {attempt} of {attempts}]")
                outcome = await run_command(self._command(argv), sink, deadline=place.deadline,
                                            cancel=place.cancel, sandbox=place.sandbox)
                if outcome.ok or outcome.timed_out or outcome.cancelled or attempt == attempts:
                    break
                await anyio.sleep(max(0.0, min(delay, place.deadline - anyio.current_time())))
            used_fallback = False
            if (not outcome.ok and not outcome.timed_out and not outcome.cancelled
                    and handling is not None and handling.fallback is not None):
                used_fallback = True
                await sink.note(f"[exit {outcome.exit_code}: running the fallback]")
                outcome = await run_command(
                    self._command(bash_argv(handling.fallback, self.words)), sink,
                    deadline=place.deadline, cancel=place.cancel, sandbox=place.sandbox)
        finally:
            await sink.close()
        if outcome.timed_out:
            text = "timed out: its processes were stopped"
        elif outcome.cancelled:
            text = "cancelled: its processes were stopped"
        else:
            text = f"exit {outcome.exit_code}"
            if tries > 1:
                text += f" after {tries} attempts"
            if used_fallback:
                text += " (from the fallback)"
        if not outcome.ok and self._goes_on(step) and not (outcome.timed_out or
                                                           outcome.cancelled):
            text += " (continue-on-error)" if step.continue_on_error else " (ignore-errors)"
        output = sink.head_text()
        if step.output is not None and step.output.variable is not None:
            limit = step.output.buffer_limit
            kept = output if limit is None else output[:parse_size(limit, key="buffer-limit")]
            self.words[step.output.variable] = kept.rstrip("\n")
        return StepResult(
            step.name, "ok" if outcome.ok else "failed", exit_code=outcome.exit_code,
            output=output[:CONDITION_OUTPUT_BYTES].strip(),
            blocks=[Block(self._header(step, text), sink)], timed_out=outcome.timed_out,
            cancelled=outcome.cancelled)

    async def _use_tool(self, step: StepSpec) -> StepResult:
        assert step.use_tool is not None
        inner = self.tool.linked(step.use_tool)
        given: dict[str, Any] = {}
        for key, value in step.with_.items():
            whole = PLACEHOLDER_RE.fullmatch(value) if isinstance(value, str) else None
            if whole and whole.group(1) in self.values:
                given[key] = self.values[whole.group(1)]
            elif whole and whole.group(1) in self.words:
                given[key] = self.words[whole.group(1)]
            elif isinstance(value, str):
                given[key] = substitute_text(value, {**self.words, **self.values})
            else:
                given[key] = value
        try:
            values = inner.plan_values(given)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                                 for e in exc.errors())
            note = f"use-tool {step.use_tool}: bad 'with' values: {problems}"
            return StepResult(step.name, "failed", exit_code=None, note=note,
                              blocks=[Block(self._header(step, note))])
        runner = PlanRunner(inner, values, self.place, prefix=f"{self.prefix}{step.name} > ")
        report = await runner.run()
        text = f"use-tool {step.use_tool}: " + ("ok" if report.ok else "failed")
        rendered = render(report.blocks)[0]
        return StepResult(
            step.name, "ok" if report.ok else "failed", exit_code=report.exit_code,
            output=rendered[:CONDITION_OUTPUT_BYTES].strip(),
            blocks=[Block(self._header(step, text)), *report.blocks],
            timed_out=report.timed_out, cancelled=report.cancelled)


def step_dependencies(steps: list[StepSpec]) -> dict[str, set[str]]:
    """What each step waits for: `wait-for` if given; a `parallel` step starts with the step
    before it; any other step waits for every earlier step. Condition references add to it."""
    deps: dict[str, set[str]] = {}
    earlier: list[str] = []
    producers: dict[str, str] = {}
    for step in steps:
        if step.wait_for:
            needed = set(step.wait_for)
        elif step.parallel and earlier:
            needed = set(deps[earlier[-1]])
        else:
            needed = set(earlier)
        if step.run_condition is not None:
            needed |= {ref.name for ref in step_condition(step).refs() if ref.field is not None}
            needed |= {producers[ref.name] for ref in step_condition(step).refs()
                       if ref.field is None and ref.name in producers}
        needed |= {producers[name] for name in _placeholders_of(step) if name in producers}
        deps[step.name] = needed
        earlier.append(step.name)
        if step.output is not None and step.output.variable is not None:
            producers[step.output.variable] = step.name
    return deps


def _placeholders_of(step: StepSpec) -> set[str]:
    """The `{NAME}`s a step's command, fallback and `with` values use."""
    texts = [c[1] for c in (step.command(),) if c is not None]
    texts += [step.run or ""]
    if step.error_handling is not None and step.error_handling.fallback is not None:
        texts.append(step.error_handling.fallback)
    texts += [v for v in step.with_.values() if isinstance(v, str)]
    return {m.group(1) for text in texts for m in PLACEHOLDER_RE.finditer(text)}
