"""The sections of a YAML tool file beyond its command: resources, security, interaction, file
paths, metadata, function calling, changelog and step output; and the typo hint for a key.

Each section is read strictly. Which of their keys squadd cannot honour on this machine is
said by `checks.tool_warnings`, as warnings on the tool, never as a load failure.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


Duration = bool | int | float | str
"""A bare number of milliseconds, or a string with a unit ("500ms", "30s", "2m"); a boolean
is kept as written, so that the duration parser refuses it naming the key."""
Size = bool | int | float | str
"""Bytes, or a string with a unit ("512MB")."""


class CleanupStep(Strict):
    delete_temp_files: StrictBool | None = Field(None, alias="delete-temp-files")
    final_command: str | None = Field(None, alias="final-command")


class ResourcesSpec(Strict):
    timeout: Duration | None = None
    max_memory: Size | None = Field(None, alias="max-memory")
    """The address-space limit of every command (RLIMIT_AS)."""
    max_cpu_time: Duration | None = Field(None, alias="max-cpu-time")
    """The CPU time limit of every command (RLIMIT_CPU, rounded up to whole seconds)."""
    cleanup: list[CleanupStep] = Field(default_factory=list)


class InteractiveOptions(Strict):
    timeout: Duration | None = None
    default_response: str | bool = Field("n", alias="default-response")

    @property
    def default_yes(self) -> bool:
        answer = self.default_response
        return answer is True or str(answer).strip().lower() in ("y", "yes", "true")


class ToolSecurity(Strict):
    execution_privilege: Literal["same-as-user", "reduced", "elevated"] = Field(
        "same-as-user", alias="execution-privilege")
    isolation: Literal["none", "process", "container"] = "process"
    required_permissions: list[str] = Field(default_factory=list, alias="required-permissions")
    justification: str | None = None
    escape_shell: StrictBool = Field(True, alias="escape-shell")


class ParameterSecurity(Strict):
    escape_shell: StrictBool = Field(True, alias="escape-shell")


class CrossPlatform(Strict):
    windows_separator: str = Field("\\", alias="windows-separator")
    unix_separator: str = Field("/", alias="unix-separator")
    auto_convert: StrictBool = Field(True, alias="auto-convert")


class FilePaths(Strict):
    normalize: StrictBool = True
    working_directory: str | None = Field(None, alias="working-directory")
    temp_directory: str | None = Field(None, alias="temp-directory")
    cross_platform: CrossPlatform | None = Field(None, alias="cross-platform")


class Metadata(BaseModel):
    """Free-form: these four are known, any other key is kept as written."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)
    category: str | None = None
    subcategory: str | None = None
    tags: list[str] = Field(default_factory=list)
    search_keywords: list[str] = Field(default_factory=list, alias="search-keywords")


ParameterMapping = dict[str, str]


class SchemaGeneration(Strict):
    parameter_mapping: ParameterMapping = Field(default_factory=dict, alias="parameter-mapping")
    include_descriptions: StrictBool = Field(True, alias="include-descriptions")
    include_defaults: StrictBool = Field(True, alias="include-defaults")
    example_generation: StrictBool = Field(True, alias="example-generation")


class FunctionCalling(Strict):
    schema_generation: SchemaGeneration | None = Field(None, alias="schema-generation")


class ChangelogEntry(Strict):
    version: str | int | float
    changes: str | list[str]
    date: str | None = None


def _output_shorthand(value: Any) -> Any:
    return {"variable": value} if isinstance(value, str) else value


class StepOutputSpec(Strict):
    """`output:` of a step: how it is kept, and the variable later steps read it from."""

    mode: Literal["buffer", "stream"] = "buffer"
    buffer_limit: Size | None = Field(None, alias="buffer-limit")
    stream_callback: Literal["console", "file", "function"] | None = Field(
        None, alias="stream-callback")
    variable: str | None = Field(None, pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


StepOutput = Annotated[StepOutputSpec, BeforeValidator(_output_shorthand)]

PLATFORM_KEYS = ("windows", "linux", "macos", "darwin", "unix", "posix")


class CommandsSpec(Strict):
    """`commands:` one command per platform, and the one for every other platform."""

    default: str | None = None
    platforms: dict[Literal["windows", "linux", "macos", "darwin", "unix", "posix"], str] = \
        Field(default_factory=dict)

    def for_platform(self, platform: str) -> str | None:
        """The command for `platform` (a `sys.platform` value): its own, else its family's,
        else the default."""
        own = {"linux": ("linux",), "darwin": ("macos", "darwin"), "win32": ("windows",)}
        for key in (*own.get(platform, ()), *(() if platform == "win32" else ("unix", "posix"))):
            if key in self.platforms:
                return self.platforms[key]
        return self.default


TRANSFORMS = {
    "toLowerCase": str.lower, "toUpperCase": str.upper, "trim": str.strip,
    "trimStart": str.lstrip, "trimEnd": str.rstrip,
    "lower": str.lower, "upper": str.upper, "strip": str.strip,
    "lstrip": str.lstrip, "rstrip": str.rstrip,
}


def transform_steps(expression: str) -> list[str] | None:
    """The method names of `value.m1().m2()`, or None when squadd cannot evaluate it."""
    text = expression.strip()
    if not text.startswith("value"):
        return None
    rest = text[len("value"):]
    steps: list[str] = []
    while rest:
        if not rest.startswith(".") or "()" not in rest:
            return None
        name, _, rest = rest[1:].partition("()")
        if name not in TRANSFORMS:
            return None
        steps.append(name)
    return steps


# A key that is not known at its place: the closest known key there, for the error message.

def _unwrap(annotation: Any) -> list[Any]:
    """The model, list, dict or plain types an annotation may hold."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) for t in _unwrap(arg)]
    return [annotation]


def _models_at(root: type[BaseModel], path: tuple[Any, ...]) -> list[type[BaseModel]]:
    current: list[Any] = [root]
    for part in path:
        following: list[Any] = []
        for annotation in current:
            for kind in _unwrap(annotation):
                origin = typing.get_origin(kind)
                if isinstance(kind, type) and issubclass(kind, BaseModel):
                    for name, info in kind.model_fields.items():
                        if part in (name, info.alias):
                            following.append(info.annotation)
                    if part == kind.__name__:  # pydantic names union members in locations
                        following.append(kind)
                elif origin is list and isinstance(part, int):
                    following.append(typing.get_args(kind)[0])
                elif origin is dict and isinstance(part, str):
                    following.append(typing.get_args(kind)[1])
        current = following
    return [k for a in current for k in _unwrap(a)
            if isinstance(k, type) and issubclass(k, BaseModel)]


def known_keys(root: type[BaseModel], path: tuple[Any, ...]) -> list[str]:
    """The keys a file may write at `path` (a pydantic error location without the key)."""
    keys: list[str] = []
    for model in _models_at(root, path):
        keys += [info.alias or name for name, info in model.model_fields.items()]
    return keys


def suggest_key(root: type[BaseModel], loc: tuple[Any, ...]) -> str | None:
    """The known key that an unknown key at `loc` is most likely a typo of."""
    if not loc or not isinstance(loc[-1], str):
        return None
    close = difflib.get_close_matches(loc[-1], known_keys(root, loc[:-1]), n=1, cutoff=0.75)
    return close[0] if close else None
