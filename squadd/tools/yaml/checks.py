"""The rules of a YAML tool file that no single key can say: one way to run, templates safe for
their interpreter, steps that name earlier steps, and sections whose values depend on others.

`check_spec` raises `ValueError` (or `TemplateError`) with the key at fault.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping

from squadd.errors import ConditionError, TemplateError
from squadd.tools.yaml.conditions import Condition, parse_condition
from squadd.tools.yaml.dialects import SHELLS, check_template, dialect_of
from squadd.tools.yaml.durations import parse_size
from squadd.tools.yaml.keys import PLATFORM_KEYS
from squadd.tools.yaml.schema import (
    MAX_STEPS,
    PLATFORMS,
    EnvironmentSpec,
    ParameterSpec,
    ShellToolFile,
    StepSpec,
    _check_parameter,
)
from squadd.tools.yaml.template import (
    PLACEHOLDER_RE,
    check_run_template,
    check_shell_template,
    refuse_nul,
    value_text,
)
from squadd.tools.yaml.words import EVALUATED_VARIABLES

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ESCAPE_SHELL_REFUSED = (
    "'escape-shell: false' is refused: squadd always quotes parameter values, so that a value "
    "can never become shell syntax; pass shell code as a separate command or a step instead")


def check_spec(spec: ShellToolFile) -> None:
    """The rules a schema cannot say: one way to run, safe templates, known references."""
    if spec.type == "alias":
        check_alias(spec)
    else:
        if not spec.description:
            raise ValueError("'description' is required: the model reads it to decide when to "
                             "use the tool")
        ways = [k for k in WAYS if getattr(spec, k) is not None]
        if len(ways) != 1:
            listed = ", ".join(repr(w) for w in WAYS[:-1]) + f" or {WAYS[-1]!r}"
            raise ValueError(f"give exactly one of {listed} (found: {', '.join(ways) or 'none'})")
        for key in ("base_tool", "default_parameters"):
            if getattr(spec, key):
                raise ValueError(f"'{key.replace('_', '-')}' is only for type: alias")
    if spec.shell is not None and spec.script is None:
        raise ValueError("'shell' goes with 'script'")
    if spec.shell is not None and spec.shell not in SHELLS:
        raise ValueError(f"shell {spec.shell!r} is not supported: use one of "
                         f"{', '.join(SHELLS)}")
    for platform in spec.platforms or ():
        if platform not in PLATFORMS:
            raise ValueError(f"unknown platform {platform!r} (known: {', '.join(PLATFORMS)})")
    spec.durations()
    names = set(spec.parameters)
    for name, param in spec.parameters.items():
        _check_parameter(name, _bounds_for_numbers_only(param))
    check_sections(spec)
    kinds = parameter_kinds(spec)
    command = spec.main_command()
    if command is not None:
        key = next(k for k in ("bash", "script", "cmd", "pwsh", "commands")
                   if getattr(spec, k) is not None)
        template(command[1], names, key, command[0], kinds=kinds)
    if spec.run is not None:
        run_template(spec.run, names, "run", kinds=kinds)
    if spec.steps is not None:
        _check_steps(spec.steps, names, kinds)
    _check_environment(spec, kinds)


def _posix_commands(spec: ShellToolFile) -> list[tuple[str, str]]:
    """(key, template) of every command of `spec` a POSIX shell runs."""
    found: list[tuple[str, str]] = []
    command = spec.main_command()
    if command is not None and dialect_of(command[0]) == "posix":
        found.append(("the command", command[1]))
    for step in spec.steps or ():
        shell_command = step.command()
        if shell_command is not None and shell_command[0] == "bash":
            found.append((f"steps.{step.name}", shell_command[1]))
        handling = step.error_handling
        if handling is not None and handling.fallback is not None:
            found.append((f"steps.{step.name}.error-handling.fallback", handling.fallback))
    for index, cleanup in enumerate(spec.resources.cleanup):
        if cleanup.final_command is not None:
            found.append((f"resources.cleanup.{index}.final-command", cleanup.final_command))
    return found


def _check_environment(spec: ShellToolFile, kinds: Mapping[str, str]) -> None:
    """A value put into `environment.variables` reaches the commands as that variable: it is
    refused where the shell or the loader evaluates the variable itself (`BASH_ENV`,
    `LD_PRELOAD`, `PS4`, exported functions), and checked as an assignment at the head of each
    command, so that `(( N > 1 ))` on `N: "{X}"` is refused as `N={X}; (( N > 1 ))` is."""
    params = set(spec.parameters)
    for name, raw in spec.environment.variables.items():
        used = [m.group(1) for m in PLACEHOLDER_RE.finditer(value_text(raw))
                if m.group(1) in params]
        if not used:
            continue
        if name in EVALUATED_VARIABLES or name.startswith("BASH_FUNC_"):
            raise ValueError(f"environment.variables.{name}: {{{used[0]}}} is assigned to "
                             f"{name}, which the shell or the loader evaluates, runs or "
                             "searches: use a variable of your own")
        if not _IDENTIFIER.fullmatch(name):
            continue  # not a shell variable: bash never reads it
        head = "".join(f"{name}={{{param}}}\n" for param in used)
        for key, command in _posix_commands(spec):
            try:
                check_shell_template(head + command, params, kinds=kinds)
            except TemplateError as exc:
                raise ValueError(f"environment.variables.{name} (as {key} reads it): "
                                 f"{exc}") from None


def _bounds_for_numbers_only(param: ParameterSpec) -> ParameterSpec:
    """`param` without `minimum`/`maximum` unless it is a number: on another type they are a
    warning (`tool_warnings`), not a load failure."""
    rules = param.validation
    if rules is None or param.type == "number":
        return param
    return param.model_copy(update={"validation": rules.model_copy(
        update={"minimum": None, "maximum": None})})


WAYS = ("bash", "cmd", "pwsh", "run", "script", "commands", "steps")
"""The ways a tool runs; it gives exactly one."""


def template(text: str, params: set[str], key: str, shell: str = "bash", *,
             kinds: Mapping[str, str] | None = None) -> None:
    try:
        check_template(text, params, dialect_of(shell), kinds=kinds)
    except TemplateError as exc:
        raise ValueError(f"{key}: {exc}") from None


def run_template(text: str, params: set[str], key: str, *,
                 kinds: Mapping[str, str] | None = None) -> None:
    """A `run` command: split into words, with no placeholder where a program would run it as
    code (`sh -c {X}`) or as the program itself."""
    try:
        check_run_template(text, params, kinds=kinds)
    except TemplateError as exc:
        raise ValueError(f"{key}: {exc}") from None


def parameter_kinds(spec: ShellToolFile) -> dict[str, str]:
    """Each parameter's type: a `number` (without a `format`) may stand in arithmetic."""
    return {name: param.type if param.format is None else "string"
            for name, param in spec.parameters.items()}


def _check_steps(steps: list[StepSpec], params: set[str], kinds: Mapping[str, str]) -> None:
    if not steps:
        raise ValueError("'steps' is empty")
    if len(steps) > MAX_STEPS:
        raise ValueError(f"at most {MAX_STEPS} steps")
    seen: list[str] = []
    names = set(params)  # and the output variables of earlier steps, as they come
    for step in steps:
        where = f"steps.{step.name}"
        if step.name in seen:
            raise ValueError(f"two steps are named {step.name!r}")
        ways = [k for k in ("bash", "cmd", "pwsh", "run", "use_tool")
                if getattr(step, k) is not None]
        if len(ways) != 1:
            raise ValueError(f"{where}: give exactly one of 'bash', 'cmd', 'pwsh', 'run' or "
                             "'use-tool'")
        if step.with_ and step.use_tool is None:
            raise ValueError(f"{where}: 'with' goes with 'use-tool'")
        command = step.command()
        if command is not None:
            template(command[1], names, f"{where}.{command[0]}", command[0], kinds=kinds)
        if step.run is not None:
            run_template(step.run, names, f"{where}.run", kinds=kinds)
        if step.error_handling is not None:
            handling = step.error_handling
            if handling.fallback is not None:
                template(handling.fallback, names, f"{where}.error-handling.fallback",
                         kinds=kinds)
        for other in step.wait_for:
            if other not in seen:
                raise ValueError(f"{where}.wait-for: {other!r} is not an earlier step")
        if step.run_condition is not None:
            condition = step_condition(step)
            for ref in condition.refs():
                if ref.field is None and ref.name not in names:
                    raise ValueError(f"{where}.run-condition: {{{ref.name}}} is not a "
                                     "parameter or an earlier step's output variable")
                if ref.field is not None and ref.name not in seen:
                    raise ValueError(f"{where}.run-condition: {{{ref.name}.{ref.field}}} "
                                     "does not name an earlier step")
        variable = step.output.variable if step.output is not None else None
        if variable is not None:
            if variable in names:
                raise ValueError(f"{where}.output: {variable!r} is already a parameter or "
                                 "another step's output variable")
            names.add(variable)
        seen.append(step.name)


def step_condition(step: StepSpec) -> Condition:
    assert step.run_condition is not None
    try:
        return parse_condition(step.run_condition)
    except ConditionError as exc:
        raise ValueError(f"steps.{step.name}.run-condition {step.run_condition!r}: {exc}") \
            from None




def check_alias(spec: ShellToolFile) -> None:
    if not spec.base_tool:
        raise ValueError("'base-tool' is required for type: alias")
    for key in ("bash", "cmd", "pwsh", "run", "script", "commands", "steps"):
        if getattr(spec, key) is not None:
            raise ValueError(f"an alias takes its command from its base-tool: remove '{key}'")
    for key in ("working_directory", "input", "shell"):
        if getattr(spec, key) is not None:
            raise ValueError(f"an alias runs its base-tool as it is: remove "
                             f"'{key.replace('_', '-')}'")
    if spec.environment != EnvironmentSpec():
        raise ValueError("an alias runs its base-tool as it is: remove 'environment'")
    refuse_nul(spec.default_parameters, "default-parameters")


def check_sections(spec: ShellToolFile) -> None:
    """Values that the schema alone cannot judge: refused settings, sizes, formats."""
    if not spec.security.escape_shell:
        raise ValueError(f"security.escape-shell: {ESCAPE_SHELL_REFUSED}")
    for name, param in spec.parameters.items():
        if not param.security.escape_shell:
            raise ValueError(f"parameters.{name}.security.escape-shell: {ESCAPE_SHELL_REFUSED}")
        if param.format is not None and "{value}" not in param.format \
                and param.type != "boolean":
            raise ValueError(f"parameters.{name}.format: write {{value}} where the value goes, "
                             "as in '--name={value}' (only a boolean's format may leave it out)")
    if spec.resources.max_memory is not None:
        parse_size(spec.resources.max_memory, key="resources.max-memory")
    for index, cleanup in enumerate(spec.resources.cleanup):
        if cleanup.final_command is not None:
            template(cleanup.final_command, set(spec.parameters),
                     f"resources.cleanup.{index}.final-command", kinds=parameter_kinds(spec))
    for step in spec.steps or ():
        if step.output is not None and step.output.buffer_limit is not None:
            parse_size(step.output.buffer_limit, key=f"steps.{step.name}.output.buffer-limit")
    if spec.commands is not None:
        if spec.commands.default is None and not spec.commands.platforms:
            raise ValueError("commands: give a 'default' command, 'platforms' commands, or both")
        names = set(spec.parameters)
        if spec.commands.default is not None:
            template(spec.commands.default, names, "commands.default",
                     kinds=parameter_kinds(spec))
        for key, command in spec.commands.platforms.items():
            assert key in PLATFORM_KEYS
            template(command, names, f"commands.platforms.{key}",
                     "cmd" if key == "windows" else "bash", kinds=parameter_kinds(spec))


def tool_warnings(spec: ShellToolFile) -> list[str]:
    """The keys of `spec` that squadd knows but cannot honour here, each with what it does
    instead. The tool still loads; `tools list` shows these."""
    from squadd.tools.yaml.keys import transform_steps

    found: list[str] = []
    security = spec.security
    if security.execution_privilege == "reduced":
        found.append("security.execution-privilege: reduced is not applied: the tool runs as "
                     "the same user as squadd")
    if security.execution_privilege == "elevated":
        found.append("security.execution-privilege: elevated is not applied: the tool runs as "
                     "the same user as squadd, and asks for approval before each run")
    if security.isolation == "container":
        found.append("security.isolation: container is not available: the tool runs in its "
                     "own process group")
    paths = spec.file_paths
    if paths is not None:
        for key in ("working_directory", "temp_directory"):
            if getattr(paths, key) is not None:
                found.append(f"file-paths.{key.replace('_', '-')} is kept but not applied: use "
                             "the top-level working-directory")
    calling = spec.function_calling.schema_generation if spec.function_calling else None
    if calling is not None:
        mapping = {k: v for k, v in calling.parameter_mapping.items() if k != v}
        if mapping or not (calling.include_descriptions and calling.include_defaults
                           and calling.example_generation):
            found.append("function-calling.schema-generation is kept but not applied: squadd "
                         "always gives models each parameter's type, description, default and "
                         "examples")
    for name, param in spec.parameters.items():
        rules = param.validation
        if rules is not None and param.type != "number" and (
                rules.minimum is not None or rules.maximum is not None):
            found.append(f"parameters.{name}.validation: minimum and maximum apply to numbers: "
                         f"not checked for this {param.type} parameter")
        if param.transform is not None and transform_steps(param.transform) is None:
            found.append(f"parameters.{name}.transform {param.transform!r} cannot be evaluated "
                         "(squadd knows value.toLowerCase(), .toUpperCase(), .trim(), "
                         ".trimStart(), .trimEnd()): the value is passed as given")
    if spec.interactive_options is not None and not spec.interactive:
        found.append("interactive-options has no effect without 'interactive: true'")
    limits = spec.resources.max_memory is not None or spec.resources.max_cpu_time is not None
    if limits and sys.platform == "win32":
        found.append("resources.max-memory and max-cpu-time cannot be applied on Windows")
    for step in spec.steps or ():
        if step.output is not None and step.output.stream_callback == "function":
            found.append(f"steps.{step.name}.output.stream-callback: function is not "
                         "available: the output streams to a file and its head to the model")
    return found
