"""`{PARAM}` substitution into YAML tool commands, so that a value is always one literal word.

In a `bash`/`script` command every value is `shlex.quote`d; inside double quotes (`"{P}"`) it
is escaped for double quotes instead. That is only sound where the shell parses quotes, so a
template is checked when it is loaded: a placeholder inside single quotes, inside `${...}`,
`$((...))`, backticks or after a heredoc is refused, with the reason. A `run` command is split
into words first and never sees a shell. A value holding NUL is refused.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Collection, Mapping
from typing import Any

PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
QUOTABLE = ("command", "dq")
"""The contexts a placeholder may stand in: a bare word, or inside plain double quotes."""
_DQ_SPECIAL = re.compile(r'([\\"$`])')


class NoWord:
    """The value of a parameter that puts no word into the command (an unset `format`)."""

    def __repr__(self) -> str:
        return "NO_WORD"


NO_WORD = NoWord()


class TemplateError(ValueError):
    """A command template that cannot be substituted safely (the message says why)."""


def _context_error(name: str, context: str) -> TemplateError:
    hint = {
        "dq": "inside double quotes",
        "sq": "inside single quotes",
        "ansi": "inside $'...' quotes",
        "param": "inside ${...}",
        "arith": "inside $((...))",
        "heredoc": "after a heredoc (<<)",
        "backtick": "inside `...` (use $(...) instead)",
    }[context]
    return TemplateError(
        f"{{{name}}} is {hint}: write it bare, as in 'grep -- {{{name}}} file'; squadd quotes "
        "every value itself (pass text for a heredoc through 'input' or an environment "
        "variable instead)")


def check_shell_template(template: str, params: Collection[str]) -> None:
    """Refuse placeholders of `params` where quoting them would not make one literal word."""
    for name, _, _, context in _placeholders(template, params):
        if context not in QUOTABLE:
            raise _context_error(name, context)


def _placeholders(text: str, params: Collection[str]) -> list[tuple[str, int, int, str]]:
    """(parameter, start, end, context) for each placeholder; context is "command" where the
    shell reads a quoted word. Bash's quoting is tracked with a stack of contexts."""
    found: list[tuple[str, int, int, str]] = []
    stack: list[list[Any]] = [["command", 0]]  # [kind, paren depth]
    heredoc = False
    i, size = 0, len(text)
    while i < size:
        kind = stack[-1][0]
        c = text[i]
        nxt = text[i + 1] if i + 1 < size else ""
        if c == "{":
            match = PLACEHOLDER_RE.match(text, i)
            if match and match.group(1) in params:
                context = kind
                if kind in ("command", "cmdsub"):
                    context = "heredoc" if heredoc else "command"
                elif kind == "dq" and (heredoc or any(f[0] == "backtick" for f in stack)):
                    # Backticks undo one level of backslashes; a heredoc keeps them.
                    context = "backtick" if not heredoc else "heredoc"
                found.append((match.group(1), i, match.end(), context))
                i = match.end()
                continue
        if kind == "sq":
            if c == "'":
                stack.pop()
            i += 1
            continue
        if kind == "ansi":
            if c == "\\":
                i += 2
                continue
            if c == "'":
                stack.pop()
            i += 1
            continue
        if c == "\\":
            i += 2
            continue
        if c == "$" and nxt == "{":
            inner = PLACEHOLDER_RE.match(text, i + 1)
            if inner and inner.group(1) in params:
                raise TemplateError(
                    f"${{{inner.group(1)}}} reads a shell variable, not the parameter: write "
                    f"{{{inner.group(1)}}} (squadd substitutes and quotes it)")
            stack.append(["param", 0])
            i += 2
            continue
        if c == "$" and text.startswith("((", i + 1):
            stack.append(["arith", 0])
            i += 3
            continue
        if c == "$" and nxt == "(":
            stack.append(["cmdsub", 0])
            i += 2
            continue
        if c == "`":
            if kind == "backtick":
                stack.pop()
            else:
                stack.append(["backtick", 0])
            i += 1
            continue
        if kind == "dq":
            if c == '"':
                stack.pop()
            i += 1
            continue
        if kind == "param":
            if c == "}":
                stack.pop()
            elif c in "'\"":
                stack.append(["sq" if c == "'" else "dq", 0])
            i += 1
            continue
        if kind == "arith":
            if c == "(":
                stack[-1][1] += 1
            elif c == ")":
                if stack[-1][1] == 0 and nxt == ")":
                    stack.pop()
                    i += 2
                    continue
                stack[-1][1] -= 1
            i += 1
            continue
        # A command context: top level, $(...) or `...`.
        if c == "$" and nxt == "'":
            stack.append(["ansi", 0])
            i += 2
            continue
        if c == "$" and nxt == '"':
            stack.append(["dq", 0])
            i += 2
            continue
        if c == "'":
            stack.append(["sq", 0])
        elif c == '"':
            stack.append(["dq", 0])
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n;&|()<>"):
            end = text.find("\n", i)
            i = size if end < 0 else end
            continue
        elif c == "<" and nxt == "<" and not text.startswith("<<<", i):
            heredoc = True
            i += 2
            continue
        elif kind == "cmdsub" and c == "(":
            stack[-1][1] += 1
        elif kind == "cmdsub" and c == ")":
            if stack[-1][1] == 0:
                stack.pop()
            else:
                stack[-1][1] -= 1
        i += 1
    return found


def refuse_nul(value: Any, where: str) -> None:
    """Raise `TemplateError` when `value` (or anything inside it) holds a NUL character."""
    if isinstance(value, str):
        if "\x00" in value:
            raise TemplateError(f"{where} contains a NUL character, which cannot be passed to "
                                "a command")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            refuse_nul(str(key), where)
            refuse_nul(item, where)
    elif isinstance(value, list | tuple):
        for item in value:
            refuse_nul(item, where)


def value_text(value: Any) -> str:
    """A parameter value as the text a command sees."""
    if value is None or isinstance(value, NoWord):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def _quoted(value: Any) -> str:
    if isinstance(value, NoWord):
        return ""
    if isinstance(value, list | tuple):
        return " ".join(shlex.quote(value_text(item)) for item in value) or "''"
    return shlex.quote(value_text(value))


def _in_double_quotes(value: Any) -> str:
    # Inside "...", a backslash quotes exactly these four: $ ` " \\ (POSIX shells, bash -c).
    if isinstance(value, NoWord):
        return ""
    text = (" ".join(value_text(v) for v in value) if isinstance(value, list | tuple)
            else value_text(value))
    return _DQ_SPECIAL.sub(r"\\\1", text)


def substitute_shell(template: str, values: Mapping[str, Any]) -> str:
    """Put each `{PARAM}` of `values` into a shell command as one quoted word (arrays: one word
    per item). The template must have passed `check_shell_template`."""
    refuse_nul(dict(values), "a parameter value")
    pieces: list[str] = []
    position = 0
    for name, start, end, context in _placeholders(template, values):
        if context not in QUOTABLE:
            raise _context_error(name, context)
        pieces.append(template[position:start])
        pieces.append(_quoted(values[name]) if context == "command"
                      else _in_double_quotes(values[name]))
        position = end
    pieces.append(template[position:])
    return "".join(pieces)


def substitute_text(template: str, values: Mapping[str, Any]) -> str:
    """Put parameter values into text that no shell reads (stdin, environment values, paths)."""
    return PLACEHOLDER_RE.sub(
        lambda m: value_text(values[m.group(1)]) if m.group(1) in values else m.group(0),
        template)


def split_run(template: str) -> list[str]:
    """Split a `run` command into words once, at load time (`TemplateError` if it can't)."""
    try:
        words = shlex.split(template, comments=False, posix=True)
    except ValueError as exc:
        raise TemplateError(f"the run command cannot be split into words: {exc}") from None
    if not words:
        raise TemplateError("the run command is empty")
    return words


def substitute_argv(words: list[str], values: Mapping[str, Any]) -> list[str]:
    """argv for a `run` command: a word that is exactly `{ARRAY}` becomes one word per item."""
    refuse_nul(dict(values), "a parameter value")
    argv: list[str] = []
    for word in words:
        whole = PLACEHOLDER_RE.fullmatch(word)
        if whole and isinstance(values.get(whole.group(1)), NoWord):
            continue
        if whole and whole.group(1) in values and isinstance(values[whole.group(1)], list):
            argv.extend(value_text(item) for item in values[whole.group(1)])
            continue
        argv.append(PLACEHOLDER_RE.sub(
            lambda m: (" ".join(value_text(v) for v in values[m.group(1)])
                       if isinstance(values.get(m.group(1)), list)
                       else value_text(values[m.group(1)])) if m.group(1) in values
            else m.group(0), word))
    return argv
