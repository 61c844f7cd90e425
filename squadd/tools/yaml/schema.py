"""The YAML shell tool file format (seed 003), read strictly, and the tool's arguments model.

`files.load_shell_file` validates a file against it: an unknown key (with the known key it is
likely a typo of), a bad value, a placeholder in an unsafe place or a run-condition that cannot
be parsed is a `ShellToolError` naming the file and key. The sections beyond the command are in
`keys`, durations in `durations`, the rules across keys in `checks`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    TypeAdapter,
    ValidationError,
    create_model,
    field_validator,
)

from squadd.errors import UntrustedInputError
from squadd.tools.base import VariableSpec
from squadd.tools.yaml.durations import (
    CONFIRM_TIMEOUT,
    CPU_TIME,
    RETRY_DELAY,
    RUN_TIMEOUT,
    Bounds,
    parse_duration,
)
from squadd.tools.yaml.keys import (
    ChangelogEntry,
    CommandsSpec,
    Duration,
    FilePaths,
    FunctionCalling,
    InteractiveOptions,
    Metadata,
    ParameterSecurity,
    ResourcesSpec,
    StepOutput,
    ToolSecurity,
    suggest_key,
)
from squadd.tools.yaml.template import refuse_nul
from squadd.untrusted import linear_pattern

PARAM_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
STEP_NAME_RULE = r"^[A-Za-z0-9_-]{1,64}$"
PLATFORMS = {"linux": ("linux",), "macos": ("darwin",), "darwin": ("darwin",),
             "windows": ("win32",), "unix": ("linux", "darwin"), "posix": ("linux", "darwin")}
SECURITY_TAGS = ("read", "write", "run")
MAX_STEPS = 64
MAX_FILE_BYTES = 1_048_576
MAX_DOCUMENT_VALUES = 200_000
"""Most values (keys, items, scalars) a tool file may expand to once its aliases are resolved."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ValidationRules(_Strict):
    minimum: float | None = None
    maximum: float | None = None
    pattern: str | None = None


ParamType = Literal["string", "number", "boolean", "array", "object"]


class ParameterSpec(_Strict):
    type: ParamType = "string"
    description: str = Field(min_length=1)
    required: StrictBool | None = None
    default: Any = None
    validation: ValidationRules | None = None
    examples: list[Any] = Field(default_factory=list)
    transform: str | None = None
    format: str | None = None
    detailed_help: str | None = Field(None, alias="detailed-help")
    security: ParameterSecurity = Field(default_factory=ParameterSecurity)

    @property
    def full_description(self) -> str:
        """What the model reads: the description, then the detailed help."""
        if not self.detailed_help or not self.detailed_help.strip():
            return self.description
        return f"{self.description}\n\n{self.detailed_help.strip()}"

    @property
    def is_required(self) -> bool:
        return self.required if self.required is not None else self.default is None


class RetrySpec(_Strict):
    attempts: int = Field(3, ge=1, le=10)
    delay: Duration = 1000
    """Milliseconds between attempts (or a string with a unit)."""

    @property
    def delay_s(self) -> float:
        return parse_duration(self.delay, key="retry.delay", bounds=RETRY_DELAY)


class ErrorHandlingSpec(_Strict):
    retry: RetrySpec | None = None
    fallback: str | None = None


class StepSpec(_Strict):
    name: str = Field(pattern=STEP_NAME_RULE)
    bash: str | None = None
    cmd: str | None = None
    pwsh: str | None = None
    run: str | None = None
    use_tool: str | None = Field(None, alias="use-tool")
    with_: dict[str, Any] = Field(default_factory=dict, alias="with")
    continue_on_error: StrictBool = Field(False, alias="continue-on-error")
    run_condition: str | None = Field(None, alias="run-condition")
    parallel: StrictBool = False
    wait_for: list[str] = Field(default_factory=list, alias="wait-for")
    error_handling: ErrorHandlingSpec | None = Field(None, alias="error-handling")
    output: StepOutput | None = None

    def command(self) -> tuple[str, str] | None:
        """(shell, template) of a shell step; None for `run` and `use-tool` steps."""
        for shell in ("bash", "cmd", "pwsh"):
            template = getattr(self, shell)
            if template is not None:
                return shell, template
        return None

    @field_validator("wait_for", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class EnvironmentSpec(_Strict):
    variables: dict[str, str | int | float | bool] = Field(default_factory=dict)
    inherit: StrictBool = True


class ExpectedSpec(_Strict):
    exit_code: int = Field(0, alias="exit-code")
    output_contains: str | list[str] | None = Field(None, alias="output-contains")
    file_exists: str | list[str] | None = Field(None, alias="file-exists")


class ToolTestSpec(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)
    expected: ExpectedSpec = Field(default_factory=ExpectedSpec)
    cleanup: list[str] = Field(default_factory=list)


class ShellToolFile(_Strict):
    """One YAML tool file, as written."""

    name: str | None = None
    label: str | None = None
    description: str | None = None
    version: str | int | float | None = None
    type: Literal["tool", "alias"] = "tool"
    min_cycod_version: str | int | float | None = Field(None, alias="min-cycod-version")
    bash: str | None = None
    cmd: str | None = None
    pwsh: str | None = None
    run: str | None = None
    script: str | None = None
    shell: str | None = None
    commands: CommandsSpec | None = None
    parameters: dict[str, ParameterSpec] = Field(default_factory=dict)
    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    working_directory: str | None = Field(None, alias="working-directory")
    timeout: Duration | None = None
    input: str | None = None
    platforms: list[str] | None = None
    tags: list[str] = Field(default_factory=list)
    steps: list[StepSpec] | None = None
    base_tool: str | None = Field(None, alias="base-tool")
    default_parameters: dict[str, Any] = Field(default_factory=dict, alias="default-parameters")
    tests: list[ToolTestSpec] = Field(default_factory=list)
    variables: list[VariableSpec] = Field(default_factory=list)
    ignore_errors: StrictBool = Field(False, alias="ignore-errors")
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    interactive: StrictBool = False
    interactive_options: InteractiveOptions | None = Field(None, alias="interactive-options")
    security: ToolSecurity = Field(default_factory=ToolSecurity)
    file_paths: FilePaths | None = Field(None, alias="file-paths")
    metadata: Metadata | None = None
    function_calling: FunctionCalling | None = Field(None, alias="function-calling")
    changelog: list[ChangelogEntry] = Field(default_factory=list)

    def duration_values(self) -> Iterator[tuple[str, Any, Bounds]]:
        """(key, value as written, bounds) of every duration in the file."""
        if self.timeout is not None:
            yield "timeout", self.timeout, RUN_TIMEOUT
        if self.resources.timeout is not None:
            yield "resources.timeout", self.resources.timeout, RUN_TIMEOUT
        if self.resources.max_cpu_time is not None:
            yield "resources.max-cpu-time", self.resources.max_cpu_time, CPU_TIME
        if self.interactive_options is not None and self.interactive_options.timeout is not None:
            yield "interactive-options.timeout", self.interactive_options.timeout, \
                CONFIRM_TIMEOUT
        for step in self.steps or ():
            retry = step.error_handling.retry if step.error_handling else None
            if retry is not None:
                yield f"steps.{step.name}.error-handling.retry.delay", retry.delay, RETRY_DELAY

    def durations(self) -> dict[str, float]:
        """Every duration of the file, resolved to seconds (`ValueError` names a bad one)."""
        return {key: parse_duration(value, key=key, bounds=bounds)
                for key, value, bounds in self.duration_values()}

    @property
    def timeout_s(self) -> float | None:
        """How long the tool may run: the shorter of `timeout` and `resources.timeout`."""
        found = self.durations()
        limits = [found[k] for k in ("timeout", "resources.timeout") if k in found]
        return min(limits) if limits else None

    @property
    def confirm_timeout_s(self) -> float | None:
        return self.durations().get("interactive-options.timeout")

    def main_command(self) -> tuple[str, str] | None:
        """(shell, template) of a one-command tool; None for `run`, `steps` and aliases."""
        if self.bash is not None:
            return "bash", self.bash
        if self.script is not None:
            return self.shell or "bash", self.script
        if self.cmd is not None:
            return "cmd", self.cmd
        if self.pwsh is not None:
            return "pwsh", self.pwsh
        if self.commands is not None:
            chosen = self.commands.for_platform(sys.platform)
            if chosen is not None:
                return ("cmd" if sys.platform == "win32" else "bash"), chosen
        return None

    def unavailable_reason(self) -> str | None:
        """Why this tool cannot run on this machine, or None when it can."""
        from squadd.tools.yaml.dialects import missing_interpreter

        if self.platforms and not any(sys.platform in PLATFORMS.get(p, ())
                                      for p in self.platforms):
            return f"only for {', '.join(self.platforms)}, not {sys.platform}"
        if self.commands is not None and self.commands.for_platform(sys.platform) is None:
            return (f"'commands' has no variant for {sys.platform} and no default (it has: "
                    f"{', '.join(self.commands.platforms)})")
        shells = [c[0] for c in (self.main_command(), *(s.command() for s in self.steps or ()))
                  if c is not None]
        for shell in dict.fromkeys(shells):
            missing = missing_interpreter(shell)
            if missing is not None:
                return missing
        return None


def describe_problems(exc: ValidationError) -> str:
    """The first problems pydantic found in a tool file, each with its key (and the likely key
    an unknown one is a typo of)."""
    problems = []
    for error in exc.errors()[:8]:
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden":
            hint = suggest_key(ShellToolFile, tuple(error["loc"]))
            problems.append(f"unknown key '{where}'" +
                            (f" (did you mean '{hint}'?)" if hint else ""))
        elif error["type"] == "missing":
            problems.append(f"'{where}' is required")
        else:
            problems.append(f"'{where}': {problem_text(error)}")
    return "; ".join(problems)


def problem_text(error: Mapping[str, Any]) -> str:
    """What pydantic says of one value; for text where a boolean is wanted, the fix too."""
    if error["type"] == "bool_type" and isinstance(error.get("input"), str):
        return (f"{error['msg']}, not {error['input']!r}: write true or false (tool files are "
                "YAML 1.2, where yes, no, on and off are text)")
    return str(error["msg"])


def _check_parameter(name: str, param: ParameterSpec) -> None:
    if not PARAM_NAME_RE.fullmatch(name):
        raise ValueError(f"parameter name {name!r} must match {PARAM_NAME_RE.pattern}")
    rules = param.validation
    if rules is not None:
        if (rules.minimum is not None or rules.maximum is not None) and param.type != "number":
            raise ValueError(f"parameters.{name}.validation: minimum/maximum are for number "
                             "parameters")
        if rules.pattern is not None:
            if param.type != "string":
                raise ValueError(f"parameters.{name}.validation.pattern is for string "
                                 "parameters")
            _check_pattern(name, rules.pattern)
    if param.default is not None:
        try:
            TypeAdapter(parameter_type(name, param)).validate_python(param.default)
        except ValidationError as exc:
            raise ValueError(f"parameters.{name}.default {param.default!r} is not a valid "
                             f"{param.type}: {exc.errors()[0]['msg']}") from None


def _check_pattern(name: str, pattern: str) -> None:
    """Patterns run in pydantic's linear-time regex engine, so no argument can make a check
    backtrack for minutes on the event loop; a pattern it cannot compile (look-around,
    backreferences, too large) is refused here rather than run in a backtracking engine."""
    try:
        linear_pattern(pattern)
    except UntrustedInputError as exc:
        raise ValueError(f"parameters.{name}.validation.pattern: {exc}") from None


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("expected a number, got a boolean")
    return value


def _no_nul(value: Any) -> Any:
    refuse_nul(value, "the value")
    return value


def parameter_type(name: str, param: ParameterSpec) -> Any:
    """The pydantic type of one parameter, with its constraints."""
    rules = param.validation or ValidationRules()
    base: Any
    if param.type == "string":
        base = Annotated[str, Field(pattern=rules.pattern)] if rules.pattern else str
    elif param.type == "number":
        base = Annotated[Annotated[float, Field(ge=rules.minimum, le=rules.maximum)],
                         BeforeValidator(_not_bool)]
    elif param.type == "boolean":
        base = bool
    elif param.type == "array":
        base = list[Any]
    else:
        base = dict[str, Any]
    return Annotated[base, AfterValidator(_no_nul)]


def parameters_model(model_name: str, parameters: dict[str, ParameterSpec]) -> type[BaseModel]:
    """The arguments model of a YAML tool: each parameter by its own name, extra keys refused."""
    fields: dict[str, Any] = {}
    for index, (name, param) in enumerate(parameters.items()):
        annotation = parameter_type(name, param)
        info = Field(alias=name, title=name, description=param.full_description,
                     examples=param.examples or None)
        if param.is_required:
            fields[f"p{index}"] = (Annotated[annotation, info], ...)
        elif param.default is not None:
            fields[f"p{index}"] = (Annotated[annotation, info], param.default)
        else:
            fields[f"p{index}"] = (Annotated[annotation | None, info], None)
    return create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)
