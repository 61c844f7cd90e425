"""The interpreters a YAML tool's command may be written for: POSIX shells (`bash`, `script`),
PowerShell (`pwsh`) and Windows CMD (`cmd`), with the quoting of `{PARAM}` values for each.

POSIX shells use `template`. In PowerShell a value becomes one single-quoted string (no
expansion there); a placeholder inside quotes, a here-string or after `--%` is refused at load.
CMD has no quoting that holds for every value, so a value for `cmd` may only hold letters,
digits, spaces and ``. , : / \\ = + @ # ~ - _ * ?``; anything else fails the call, saying so.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Collection, Mapping
from typing import Any, Literal

from squadd.errors import TemplateError
from squadd.tools.yaml.template import (
    PLACEHOLDER_RE,
    NoWord,
    check_shell_template,
    refuse_nul,
    substitute_shell,
    value_text,
)

Dialect = Literal["posix", "pwsh", "cmd"]
POSIX_SHELLS = ("bash", "sh", "dash", "zsh", "ksh")
PWSH_SHELLS = ("pwsh", "powershell")
SHELLS = (*POSIX_SHELLS, *PWSH_SHELLS, "cmd")
_PWSH_QUOTES = "'\u2018\u2019\u201a\u201b"
"""PowerShell ends a single-quoted string at any of these; doubling one keeps it literal."""
_CMD_SAFE = re.compile(r"^[A-Za-z0-9 .,:/\\=+@#~_*?-]*$")


def dialect_of(shell: str) -> Dialect:
    if shell in PWSH_SHELLS:
        return "pwsh"
    return "cmd" if shell == "cmd" else "posix"


def missing_interpreter(shell: str) -> str | None:
    """Why `shell` cannot run here, or None when it can."""
    if shell == "cmd":
        return None if sys.platform == "win32" else "cmd runs only on Windows"
    if shutil.which(shell) is None:
        return f"{shell} is not installed (not found on PATH)"
    return None


def check_template(template: str, params: Collection[str], dialect: Dialect, *,
                   kinds: Mapping[str, str] | None = None) -> None:
    """Refuse placeholders where the dialect's quoting would not keep a value one word (POSIX
    shells: or where the shell would evaluate it; `kinds` gives each parameter's type)."""
    if dialect == "posix":
        check_shell_template(template, params, kinds=kinds)
        return
    for name, _, _, context in _scan(template, params, dialect):
        _refuse(name, context, dialect)


def _refuse(name: str, context: str, dialect: Dialect) -> None:
    if context == "bare" or (dialect == "cmd" and context == "quoted"):
        return
    where = {"quoted": "inside quotes", "here": "inside a here-string",
             "escaped": "after a ` escape", "verbatim": "after --% (passed on unparsed)"}[context]
    raise TemplateError(f"{{{name}}} is {where}: write it bare, as in 'Get-Item {{{name}}}'; "
                        "squadd quotes every value itself")


_DOUBLE = '"\u201c\u201d\u201e'


def _scan(text: str, params: Collection[str], dialect: Dialect
          ) -> list[tuple[str, int, int, str]]:
    """(parameter, start, end, context) of each placeholder: "bare", "quoted", "here",
    "escaped" or "verbatim"."""
    found: list[tuple[str, int, int, str]] = []
    quote = ""
    verbatim = False
    i = 0
    while i < len(text):
        c = text[i]
        match = PLACEHOLDER_RE.match(text, i) if c == "{" else None
        if match and match.group(1) in params:
            context = ("verbatim" if verbatim else "here" if quote in ("@'", '@"')
                       else "quoted" if quote else "bare")
            found.append((match.group(1), i, match.end(), context))
            i = match.end()
            continue
        if dialect == "cmd":
            if c == '"':
                quote = "" if quote else '"'
            i += 1
            continue
        if c == "`" and (not quote or (len(quote) == 1 and quote in _DOUBLE)):
            after = PLACEHOLDER_RE.match(text, i + 1)
            if after and after.group(1) in params:
                found.append((after.group(1), i + 1, after.end(), "escaped"))
            i += 2
            continue
        if not quote:
            if text.startswith("--%", i):
                verbatim = True
            if c == "@" and text[i + 1:i + 2] in ("'", '"'):
                quote = text[i:i + 2]
                i += 2
                continue
            if c in _PWSH_QUOTES or c in _DOUBLE:
                quote = c
        elif quote in ("@'", '@"'):
            if text.startswith(quote[1] + "@", i):
                quote = ""
                i += 2
                continue
        elif quote in _DOUBLE:
            if c in _DOUBLE:
                quote = ""
        elif c in _PWSH_QUOTES:
            quote = ""
        i += 1
    return found


def pwsh_quote(value: Any) -> str:
    text = value_text(value)
    for mark in _PWSH_QUOTES:
        text = text.replace(mark, mark * 2)
    return f"'{text}'"


def cmd_quote(value: Any, name: str) -> str:
    text = value_text(value)
    if not _CMD_SAFE.match(text):
        raise TemplateError(f"the value of {name} holds a character that cmd could read as "
                            "syntax: for cmd, use letters, digits, spaces and . , : / \\ = + @ "
                            "# ~ - _ * ? only")
    return f'"{text}"'


def substitute(template: str, values: Mapping[str, Any], dialect: Dialect) -> str:
    """`template` with each `{PARAM}` of `values` quoted for `dialect`."""
    if dialect == "posix":
        return substitute_shell(template, values)
    refuse_nul(dict(values), "a parameter value")
    pieces: list[str] = []
    position = 0
    for name, start, end, context in _scan(template, values, dialect):
        _refuse(name, context, dialect)
        pieces.append(template[position:start])
        pieces.append(_quoted(values[name], name, dialect, context))
        position = end
    pieces.append(template[position:])
    return "".join(pieces)


def _quoted(value: Any, name: str, dialect: Dialect, context: str) -> str:
    if isinstance(value, NoWord):
        return ""
    items = value if isinstance(value, list | tuple) else [value]
    if dialect == "pwsh":
        return ", ".join(pwsh_quote(v) for v in items) or "''"
    quoted = [cmd_quote(v, name) for v in items]
    if context == "quoted":
        quoted = [q[1:-1] for q in quoted]
    return " ".join(quoted) or '""'


def interpreter_argv(shell: str, command: str) -> list[str]:
    """argv that runs `command` (already substituted) with `shell`."""
    dialect = dialect_of(shell)
    if dialect == "pwsh":
        return [shell, "-NoLogo", "-NoProfile", "-NonInteractive", "-Command", command]
    if dialect == "cmd":
        return ["cmd.exe", "/d", "/s", "/c", command]
    return [shell, "-c", command]
