"""The YAML shell tool file format (seed 003), read strictly, and the tool's arguments model.

`load_shell_file` validates a file: an unknown key, a bad value, a placeholder in an unsafe
place or a run-condition that cannot be parsed is a `ShellToolError` naming the file and key.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
    field_validator,
)

from squadd.tools.base import VariableSpec
from squadd.tools.custom.shell_conditions import Condition, ConditionError, parse_condition
from squadd.tools.custom.shell_template import (
    TemplateError,
    check_shell_template,
    refuse_nul,
    split_run,
)
from squadd.untrusted import UntrustedInputError, check_document

PARAM_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
STEP_NAME_RULE = r"^[A-Za-z0-9_-]{1,64}$"
SHELLS = ("bash", "sh", "dash", "zsh", "ksh")
PLATFORMS = {"linux": ("linux",), "macos": ("darwin",), "darwin": ("darwin",),
             "windows": ("win32",), "unix": ("linux", "darwin"), "posix": ("linux", "darwin")}
SECURITY_TAGS = ("read", "write", "run")
MAX_STEPS = 64
MAX_TIMEOUT_S = 3600.0
MAX_FILE_BYTES = 1_048_576
MAX_DOCUMENT_VALUES = 200_000
"""Most values (keys, items, scalars) a tool file may expand to once its aliases are resolved."""
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class ShellToolError(ValueError):
    """A YAML tool file that cannot be loaded; the message names the file and the key."""


def parse_duration(value: Any, *, default_unit: str, key: str) -> float:
    """Seconds from a number (in `default_unit`) or a string like "500ms", "30s", "2m"."""
    if isinstance(value, bool):
        raise ValueError(f"{key}: expected a duration, got {value!r}")
    if isinstance(value, int | float):
        return float(value) * _UNITS[default_unit]
    match = _DURATION_RE.match(str(value))
    if match is None:
        raise ValueError(f"{key}: expected a duration like 30, '500ms', '30s' or '2m', got "
                         f"{value!r}")
    return float(match.group(1)) * _UNITS[match.group(2) or default_unit]


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
    required: bool | None = None
    default: Any = None
    validation: ValidationRules | None = None
    examples: list[Any] = Field(default_factory=list)

    @property
    def is_required(self) -> bool:
        return self.required if self.required is not None else self.default is None


class RetrySpec(_Strict):
    attempts: int = Field(3, ge=1, le=10)
    delay: float | int | str = 1000
    """Milliseconds between attempts (or a string with a unit)."""

    @property
    def delay_s(self) -> float:
        return parse_duration(self.delay, default_unit="ms", key="retry.delay")


class ErrorHandlingSpec(_Strict):
    retry: RetrySpec | None = None
    fallback: str | None = None


class StepSpec(_Strict):
    name: str = Field(pattern=STEP_NAME_RULE)
    bash: str | None = None
    run: str | None = None
    use_tool: str | None = Field(None, alias="use-tool")
    with_: dict[str, Any] = Field(default_factory=dict, alias="with")
    continue_on_error: bool = Field(False, alias="continue-on-error")
    run_condition: str | None = Field(None, alias="run-condition")
    parallel: bool = False
    wait_for: list[str] = Field(default_factory=list, alias="wait-for")
    error_handling: ErrorHandlingSpec | None = Field(None, alias="error-handling")

    @field_validator("wait_for", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class EnvironmentSpec(_Strict):
    variables: dict[str, str | int | float | bool] = Field(default_factory=dict)
    inherit: bool = True


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
    bash: str | None = None
    run: str | None = None
    script: str | None = None
    shell: str | None = None
    parameters: dict[str, ParameterSpec] = Field(default_factory=dict)
    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    working_directory: str | None = Field(None, alias="working-directory")
    timeout: float | int | str | None = None
    input: str | None = None
    platforms: list[str] | None = None
    tags: list[str] = Field(default_factory=list)
    steps: list[StepSpec] | None = None
    base_tool: str | None = Field(None, alias="base-tool")
    default_parameters: dict[str, Any] = Field(default_factory=dict, alias="default-parameters")
    tests: list[ToolTestSpec] = Field(default_factory=list)
    variables: list[VariableSpec] = Field(default_factory=list)

    @property
    def timeout_s(self) -> float | None:
        if self.timeout is None:
            return None
        return parse_duration(self.timeout, default_unit="s", key="timeout")

    def available_here(self) -> bool:
        if not self.platforms:
            return True
        return any(sys.platform in PLATFORMS.get(p, ()) for p in self.platforms)


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors()[:8]:
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden":
            problems.append(f"unknown key '{where}'")
        elif error["type"] == "missing":
            problems.append(f"'{where}' is required")
        else:
            problems.append(f"'{where}': {error['msg']}")
    return "; ".join(problems)


def load_shell_file(path: Path) -> ShellToolFile:
    """Read and check a YAML tool file; `ShellToolError` says what is wrong, and where."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ShellToolError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ShellToolError(f"{path}: cannot be read: {exc}") from None
    except yaml.YAMLError as exc:
        raise ShellToolError(f"{path}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ShellToolError(f"{path}: not valid YAML: nested too deeply") from None
    if not isinstance(data, dict):
        raise ShellToolError(f"{path}: expected a mapping of keys (name, description, bash, "
                             f"...), got {type(data).__name__}")
    try:  # the schema goes to the model as JSON: no NaN; aliases must not make it huge
        check_document(data, max_values=MAX_DOCUMENT_VALUES)
    except UntrustedInputError as exc:
        raise ShellToolError(f"{path}: {exc}") from None
    try:
        spec = ShellToolFile.model_validate(data)
    except ValidationError as exc:
        raise ShellToolError(f"{path}: {_describe(exc)}") from None
    try:
        check_spec(spec)
    except (ValueError, TemplateError, ConditionError) as exc:
        raise ShellToolError(f"{path}: {exc}") from None
    return spec


def check_spec(spec: ShellToolFile) -> None:
    """The rules a schema cannot say: one way to run, safe templates, known references."""
    if spec.type == "alias":
        if not spec.base_tool:
            raise ValueError("'base-tool' is required for type: alias")
        for key in ("bash", "run", "script", "steps"):
            if getattr(spec, key) is not None:
                raise ValueError(f"an alias takes its command from its base-tool: remove '{key}'")
        if spec.parameters:
            raise ValueError("an alias takes its parameters from its base-tool: set values "
                             "with 'default-parameters' instead of 'parameters'")
        for key in ("working_directory", "input", "shell"):
            if getattr(spec, key) is not None:
                raise ValueError(f"an alias runs its base-tool as it is: remove "
                                 f"'{key.replace('_', '-')}'")
        if spec.environment != EnvironmentSpec():
            raise ValueError("an alias runs its base-tool as it is: remove 'environment'")
        refuse_nul(spec.default_parameters, "default-parameters")
    else:
        if not spec.description:
            raise ValueError("'description' is required: the model reads it to decide when to "
                             "use the tool")
        ways = [k for k in ("bash", "run", "script", "steps") if getattr(spec, k) is not None]
        if len(ways) != 1:
            raise ValueError("give exactly one of 'bash', 'run', 'script' or 'steps' (found: "
                             f"{', '.join(ways) or 'none'})")
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
    timeout = spec.timeout_s
    if timeout is not None and not 0 < timeout <= MAX_TIMEOUT_S:
        raise ValueError(f"timeout: {timeout:g} s is outside 0-{MAX_TIMEOUT_S:g} s (a number is "
                         "in seconds; write e.g. '500ms' or '2m' for other units)")
    names = set(spec.parameters)
    for name, param in spec.parameters.items():
        _check_parameter(name, param)
    if spec.bash is not None:
        _template(spec.bash, names, "bash")
    if spec.script is not None:
        _template(spec.script, names, "script")
    if spec.run is not None:
        split_run(spec.run)
    if spec.steps is not None:
        _check_steps(spec.steps, names)


def _template(text: str, params: set[str], key: str) -> None:
    try:
        check_shell_template(text, params)
    except TemplateError as exc:
        raise ValueError(f"{key}: {exc}") from None


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
            try:
                re.compile(rules.pattern)
            except re.error as exc:
                raise ValueError(f"parameters.{name}.validation.pattern: {exc}") from None
    if param.default is not None:
        try:
            TypeAdapter(parameter_type(name, param),
                        config=ConfigDict(regex_engine="python-re")).validate_python(
                param.default)
        except ValidationError as exc:
            raise ValueError(f"parameters.{name}.default {param.default!r} is not a valid "
                             f"{param.type}: {exc.errors()[0]['msg']}") from None


def _check_steps(steps: list[StepSpec], params: set[str]) -> None:
    if not steps:
        raise ValueError("'steps' is empty")
    if len(steps) > MAX_STEPS:
        raise ValueError(f"at most {MAX_STEPS} steps")
    seen: list[str] = []
    for step in steps:
        where = f"steps.{step.name}"
        if step.name in seen:
            raise ValueError(f"two steps are named {step.name!r}")
        ways = [k for k in ("bash", "run", "use_tool") if getattr(step, k) is not None]
        if len(ways) != 1:
            raise ValueError(f"{where}: give exactly one of 'bash', 'run' or 'use-tool'")
        if step.with_ and step.use_tool is None:
            raise ValueError(f"{where}: 'with' goes with 'use-tool'")
        if step.bash is not None:
            _template(step.bash, params, f"{where}.bash")
        if step.run is not None:
            split_run(step.run)
        if step.error_handling is not None:
            handling = step.error_handling
            if handling.fallback is not None:
                _template(handling.fallback, params, f"{where}.error-handling.fallback")
            if handling.retry is not None and not 0 <= handling.retry.delay_s <= 60:
                raise ValueError(f"{where}.error-handling.retry.delay must be 0-60 s")
        for other in step.wait_for:
            if other not in seen:
                raise ValueError(f"{where}.wait-for: {other!r} is not an earlier step")
        if step.run_condition is not None:
            condition = step_condition(step)
            for ref in condition.refs():
                if ref.field is None and ref.name not in params:
                    raise ValueError(f"{where}.run-condition: {{{ref.name}}} is not a "
                                     "parameter")
                if ref.field is not None and ref.name not in seen:
                    raise ValueError(f"{where}.run-condition: {{{ref.name}.{ref.field}}} "
                                     "does not name an earlier step")
        seen.append(step.name)


def step_condition(step: StepSpec) -> Condition:
    assert step.run_condition is not None
    try:
        return parse_condition(step.run_condition)
    except ConditionError as exc:
        raise ValueError(f"steps.{step.name}.run-condition {step.run_condition!r}: {exc}") \
            from None


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
        info = Field(alias=name, title=name, description=param.description,
                     examples=param.examples or None)
        if param.is_required:
            fields[f"p{index}"] = (Annotated[annotation, info], ...)
        elif param.default is not None:
            fields[f"p{index}"] = (Annotated[annotation, info], param.default)
        else:
            fields[f"p{index}"] = (Annotated[annotation | None, info], None)
    return create_model(model_name, __config__=ConfigDict(extra="forbid",
                                                          regex_engine="python-re"), **fields)
