"""Reading a YAML tool file: its text parsed as YAML 1.2, then checked (`load_shell_file`).

YAML 1.2's core schema, through ruamel.yaml: booleans are only `true` and `false` (`yes`, `no`,
`on`, `off`, `y`, `n` stay strings), `1:20` is a string and not a sexagesimal number, `010` is
ten. PyYAML reads YAML 1.1, where a description of `on` became `True`. A document that declares
`%YAML 1.1` itself is read as 1.1, as the YAML spec says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from squadd.errors import ConditionError, ShellToolError, TemplateError, UntrustedInputError
from squadd.tools.yaml.checks import check_spec
from squadd.tools.yaml.schema import (
    MAX_DOCUMENT_VALUES,
    MAX_FILE_BYTES,
    ShellToolFile,
    describe_problems,
)
from squadd.untrusted import check_document


def parse_yaml(path: Path, text: str) -> Any:
    """The document in `text` (from `path`, named in errors), read as YAML 1.2 with only YAML's
    own tags; `ShellToolError` when it is not valid YAML."""
    # A new reader each time: a reader keeps the version a `%YAML` directive set for the next
    # document, and it is not safe to share between threads.
    reader = YAML(typ="safe", pure=True)
    try:
        return reader.load(text)
    except YAMLError as exc:
        raise ShellToolError(f"{path}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ShellToolError(f"{path}: not valid YAML: nested too deeply") from None


def load_shell_file(path: Path, *, content: bytes | None = None) -> ShellToolFile:
    """Read (or take its bytes `content`) and check a YAML tool file; `ShellToolError` says what
    is wrong, and where."""
    try:
        raw = path.read_bytes() if content is None else content
        if len(raw) > MAX_FILE_BYTES:
            raise ShellToolError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ShellToolError(f"{path}: cannot be read: {exc}") from None
    data = parse_yaml(path, text)
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
        raise ShellToolError(f"{path}: {describe_problems(exc)}") from None
    try:
        check_spec(spec)
    except (ValueError, TemplateError, ConditionError) as exc:
        raise ShellToolError(f"{path}: {exc}") from None
    return spec
