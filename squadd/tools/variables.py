"""Where the values of a tool's declared variables come from, and the user's secrets file.

Text variables: the environment, then `.squad/config.toml [variables]` (the project file only),
then the user's secrets file. Secret variables: the environment, then the secrets file, which
must be the user's own and mode 0600. Never from `.squad/`, which is committed to git.

The secret values handed out are remembered in the owner's `secrets.SecretRegistry`.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squadd.config import Settings
from squadd.errors import VariablesMissing, VariableValueError
from squadd.fsio import atomic_write, file_lock
from squadd.state.layout import SquadLayout
from squadd.tools.base import VariableSpec
from squadd.tools.gates import ResolvedVariables
from squadd.tools.secrets import SecretRegistry

_LINE_RE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s?(.*)$")
VARIABLE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_VALUE_BYTES = 65_536
MAX_SECRETS_FILE_BYTES = 1_048_576


def default_secrets_file(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CONFIG_HOME/squadd/secrets`, else `~/.config/squadd/secrets`."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "squadd" / "secrets"


def secrets_file_path(settings: Settings, environ: Mapping[str, str] | None = None) -> Path:
    configured = settings.tools.secrets_file
    if configured:
        return Path(configured).expanduser()
    return default_secrets_file(environ)


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


@dataclass(frozen=True)
class SecretsFileState:
    """What the secrets file gave: its values, or why it was refused (never a value)."""

    values: Mapping[str, str]
    problem: str | None = None


class SecretsFile:
    """The user's `NAME=value` secrets file: read only when it is 0600 and the user's own."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._cache: tuple[tuple[int, int, int, int, int], SecretsFileState] | None = None

    def read(self) -> SecretsFileState:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return SecretsFileState({})
        except OSError as exc:
            return SecretsFileState({}, f"secrets file {self.path} cannot be read: {exc.strerror}")
        key = _stat_key(st)
        with self._lock:
            if self._cache is not None and self._cache[0] == key:
                return self._cache[1]
            state = self._load(st)
            self._cache = (key, state)
            return state

    def _load(self, st: os.stat_result) -> SecretsFileState:
        where = self.path
        if not stat.S_ISREG(st.st_mode):
            return SecretsFileState({}, f"secrets file {where} is not a regular file")
        if st.st_uid != os.getuid():
            return SecretsFileState({}, f"secrets file {where} is not owned by you: refused")
        loose = st.st_mode & 0o077
        if loose:
            who = " and ".join(w for w, bits in (("group", 0o070), ("others", 0o007))
                               if loose & bits)
            return SecretsFileState(
                {}, f"secrets file {where} is refused: it has mode {stat.S_IMODE(st.st_mode):04o}"
                    f", so {who} can access it; run 'chmod 600 {where}'")
        if st.st_size > MAX_SECRETS_FILE_BYTES:
            return SecretsFileState({}, f"secrets file {where} is larger than "
                                        f"{MAX_SECRETS_FILE_BYTES} bytes: refused")
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            return SecretsFileState({}, f"secrets file {where} cannot be read: "
                                        f"{type(exc).__name__}")
        values: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            match = _LINE_RE.match(stripped)
            if match is None:  # the message never shows the line: it may hold a secret
                return SecretsFileState({}, f"secrets file {where}, line {number}: expected "
                                            "NAME=value")
            values[match.group(1)] = _unquote(match.group(2).strip())
        return SecretsFileState(values)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def store_variable(path: Path, name: str, value: str) -> None:
    """Set `name` in the secrets file at `path` (blocking): created 0600 in a 0700 folder,
    rewritten atomically under a lock, other lines kept as they are. Refused (never
    loosened) when the file is not the user's own or not 0600."""
    if not VARIABLE_NAME_RE.fullmatch(name):
        raise VariableValueError(f"{name!r} is not a variable name (names match "
                                 f"{VARIABLE_NAME_RE.pattern})")
    if any(c in value for c in "\n\r\0"):
        raise VariableValueError(f"the value of {name} has a line break or NUL: a secrets file "
                                 "line holds one line")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_VALUE_BYTES:
        raise VariableValueError(f"the value of {name} is longer than {MAX_VALUE_BYTES} bytes")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with file_lock(path.with_name(f".{path.name}.lock")):
        state = SecretsFile(path).read()
        if state.problem:
            raise VariableValueError(f"{name} was not stored: {state.problem}")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            lines = []
        quoted = '"' + value + '"'  # the reader takes off one pair of quotes, keeping spaces
        replaced = False
        kept: list[str] = []
        for line in lines:
            match = _LINE_RE.match(line.strip())
            if match is not None and match.group(1) == name:
                if not replaced:
                    kept.append(f"{name}={quoted}")
                    replaced = True
                continue
            kept.append(line)
        if not replaced:
            kept.append(f"{name}={quoted}")
        atomic_write(path, "\n".join(kept) + "\n", mode=0o600)


class ProjectVariables:
    """`[variables]` of the project's own `.squad/config.toml`: text values, never secrets."""

    def __init__(self, path: Path | None):
        self.path = path
        self._lock = threading.Lock()
        self._cache: tuple[tuple[int, int, int, int, int], dict[str, str]] | None = None

    def read(self) -> dict[str, str]:
        if self.path is None:
            return {}
        try:
            st = self.path.stat()
        except OSError:
            return {}
        key = _stat_key(st)
        with self._lock:
            if self._cache is not None and self._cache[0] == key:
                return self._cache[1]
            try:
                with self.path.open("rb") as handle:
                    data = tomllib.load(handle)
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
                data = {}  # the settings loader reports a broken config.toml, with its line
            table = data.get("variables", {})
            values = {str(k): _text(v) for k, v in table.items()} if isinstance(table, dict) else {}
            self._cache = (key, values)
            return values


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class SquadVariables:
    """The resolver the daemon and `squadd tools call` use (a `VariableResolver`)."""

    def __init__(self, layout: SquadLayout | None, settings: Settings, *,
                 registry: SecretRegistry, environ: Mapping[str, str] | None = None):
        """`registry` remembers every secret handed out, for the owner's log redaction (it is
        required: a resolver whose secrets no log processor knows would leak them);
        `environ` is where variables are looked up (default: the process environment)."""
        self.environ = os.environ if environ is None else environ
        self.project = ProjectVariables(layout.config_toml if layout is not None else None)
        self.secrets_file = SecretsFile(secrets_file_path(settings))
        self.registry = registry

    def resolve(self, specs: tuple[VariableSpec, ...]) -> ResolvedVariables:
        values: dict[str, str] = {}
        secrets: dict[str, str] = {}
        problems: list[str] = []
        missing: list[VariableSpec] = []
        project = self.project.read() if any(s.type == "text" for s in specs) else {}
        from_file = self.secrets_file.read() if specs else SecretsFileState({})
        for spec in specs:
            value = self.environ.get(spec.name)
            if value is None and spec.type == "text":
                value = project.get(spec.name)
            if value is None:
                value = from_file.values.get(spec.name)
            if value is None:
                if spec.required:
                    problems.append(self._missing(spec, project, from_file))
                    missing.append(spec)
                continue
            values[spec.name] = value
            if spec.type == "secret":
                secrets[spec.name] = value
        if problems:
            raise VariablesMissing("; ".join(problems), tuple(missing))
        self.registry.remember(secrets)
        return ResolvedVariables(values, secrets)

    def _missing(self, spec: VariableSpec, project: Mapping[str, str],
                 from_file: SecretsFileState) -> str:
        name = spec.name
        what = f"required {'secret' if spec.type == 'secret' else 'variable'} {name}"
        if spec.description:
            what += f" ({spec.description})"
        places = [f"the environment (export {name}=...)"]
        if spec.type == "text":
            places.append(f"{self.project.path or '.squad/config.toml'} under [variables]")
        places.append(f"the secrets file {self.secrets_file.path} (a {name}=value line, "
                      "mode 0600)")
        message = f"{what} is not set: set it in " + ", or ".join(places)
        if spec.type == "secret" and name in self.project.read():
            message += (f". It is in {self.project.path}, but secrets are never read from "
                        ".squad/ (it is committed to git): move it out of there")
        if from_file.problem:
            message += f". Note: {from_file.problem}"
        return message
