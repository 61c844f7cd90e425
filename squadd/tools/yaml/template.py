"""`{PARAM}` substitution into YAML tool commands, so that a value is always one literal word.

In a `bash`/`script` command every value is `shlex.quote`d; inside double quotes (`"{P}"`) it
is escaped for double quotes instead. That is only sound where the shell parses quotes and
never evaluates the word, so a template is checked when it is loaded (with `scan` and
`words`) against the grammar of bash's evaluation contexts (`contexts`): a
placeholder inside single quotes, backticks, `${...}`, a heredoc or arithmetic; in a template
that evaluates text (`eval`, `(( ))`, `let`, `[[ -gt ]]`, `declare -i`, subscripts, `${!v}`,
...); as a variable name (`declare {X}=`, `read {X}`, `printf -v {X}`), a declared value, a
file descriptor (`>&{X}`), the command name, or in the code of a nested shell or interpreter
is refused, with the reason.
A `run` command is split into words first and never sees a shell. A value holding NUL is
refused.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from squadd.errors import TemplateError
from squadd.tools.yaml.contexts import context_reason
from squadd.tools.yaml.scan import PLACEHOLDER_RE as PLACEHOLDER_RE
from squadd.tools.yaml.scan import Command, Hit, Scan, Word, scan, scan_words
from squadd.tools.yaml.words import (
    COMPOUND_DECLARERS,
    DECLARING_BUILTINS,
    EVALUATED_VARIABLES,
    INTERPRETERS,
    NAMING_BUILTINS,
    REMOTE_SHELLS,
    SHELLS,
    WRAPPERS,
    builtin_index,
    code_word,
    command_constructs,
    name_part,
    program_name,
)

QUOTABLE = ("command", "dq")
"""The contexts a placeholder may stand in: a bare word, or inside plain double quotes."""
_DQ_SPECIAL = re.compile(r'([\\"$`])')


class NoWord:
    """The value of a parameter that puts no word into the command (an unset `format`)."""

    def __repr__(self) -> str:
        return "NO_WORD"


NO_WORD = NoWord()


_CONTEXTS = {
    "sq": "inside single quotes",
    "ansi": "inside $'...' quotes",
    "param": "inside ${...}",
    "heredoc": "after a heredoc (<<)",
    "backtick": "inside `...` (use $(...) instead)",
}


def _fix(name: str) -> str:
    return (f"write it bare, as in 'grep -- {{{name}}} file'; squadd quotes every value itself "
            "(pass text for a heredoc through 'input' or an environment variable instead)")


def _refusal(hit: Hit, why: str) -> TemplateError:
    return TemplateError(f"{{{hit.name}}} {why}")


def check_shell_template(template: str, params: Collection[str], *,
                         kinds: Mapping[str, str] | None = None) -> None:
    """Refuse placeholders of `params` where quoting them would not make one literal word,
    or where bash would evaluate the word as code. `kinds` maps a parameter to its type
    (`number` values may stand in arithmetic; `array` values must be whole words)."""
    _check(scan(template, params), kinds or {}, shell=True)


def check_run_template(template: str, params: Collection[str], *,
                       kinds: Mapping[str, str] | None = None) -> list[str]:
    """Split a `run` command and refuse placeholders that a program would run as code."""
    words = split_run(template)
    _check(scan_words(words, params), kinds or {}, shell=False)
    return words


def _check(found: Scan, kinds: Mapping[str, str], *, shell: bool) -> None:
    constructs = list(found.constructs)
    if shell:
        written = {w.literal for c in found.commands for w in c.words if w.redirect}
        for command in found.commands:
            constructs.extend(command_constructs(command))
            constructs.extend(_runs_written_file(command, written))
    constructs.sort(key=lambda item: item[1])
    memo: dict[int, _Facts] = {}  # by id of the command, alive in `found` meanwhile
    for hit in found.hits:
        kind = kinds.get(hit.name, "string")
        if hit.context == "arith":
            if kind != "number":
                raise _refusal(hit, "is inside an arithmetic context (((...)), $((...)) or "
                               "$[...]), where bash runs $(...) found in a value: declare the "
                               "parameter with 'type: number', or compare with 'test' outside")
            continue
        if hit.context not in QUOTABLE:
            raise _refusal(hit, f"is {_CONTEXTS[hit.context]}: {_fix(hit.name)}")
        if kind != "number" and constructs:
            what, at = constructs[0]
            raise _refusal(hit, f"is used in a template that has {what} (at character "
                           f"{at + 1}): bash evaluates values there as code, and a value can "
                           "reach it through a variable; declare the parameter with 'type: "
                           "number', or do without it (e.g. 'test X -gt 10' instead of "
                           "'(( X > 10 ))')")
        _check_word(hit, kind, shell=shell, memo=memo)


def _check_word(hit: Hit, kind: str, *, shell: bool, memo: dict[int, _Facts]) -> None:
    command, word = hit.command, hit.word
    assert command is not None and word is not None
    if kind == "array" and (word.text != f"{{{hit.name}}}" or word.redirect
                            or command.dbracket):
        raise _refusal(hit, "is an array parameter where its items cannot be separate words "
                       "(in an assignment, a redirection, [[ ]] or joined to other text): put "
                       "it alone between spaces, as in 'ls -- {" + hit.name + "}`")
    if shell and word.fd:
        raise _refusal(hit, "is " + context_reason("file-descriptor") + ": write the descriptor "
                       "number in the template, or redirect to a file named by the value "
                       f"('> {{{hit.name}}}')")
    if word.redirect or word.list_item:
        return
    words = command.arguments()
    position = word.position
    name_at = command.name_index()
    if name_at is None or position < name_at:
        assignment = word.literal.split("=", 1)[0]
        if assignment in EVALUATED_VARIABLES:
            raise _refusal(hit, f"is assigned to {assignment}, which the shell evaluates or "
                           "searches: use a variable of your own")
        return
    if position == name_at:
        raise _refusal(hit, "would be the command that runs: name the program in the "
                       "template and pass the value as an argument")
    builtin_at = builtin_index(words, name_at) if shell else name_at
    if position == builtin_at:
        raise _refusal(hit, f"would be the command that '{words[name_at].literal}' runs: name "
                       "it in the template and pass the value as an argument")
    name = words[builtin_at].literal
    facts = _facts(command, memo)
    if shell and name in DECLARING_BUILTINS:
        if hit.start - word.start < len(name_part(word)) or "=" not in word.text:
            raise _refusal(hit, f"is the variable name (or an option) of '{name}': it "
                           + "is " + context_reason("variable-name") + "; declare the "
                           f"variable first and assign it apart, as in '{name} v; "
                           f"v={{{hit.name}}}'")
        if name_part(word) in EVALUATED_VARIABLES:
            raise _refusal(hit, f"is assigned to {name_part(word)}, which the shell evaluates "
                           "or searches: use a variable of your own")
        if name in COMPOUND_DECLARERS:
            raise _refusal(hit, f"is a value '{name}' declares: bash re-reads a declared value "
                           "shaped like '(...)' as an array assignment, "
                           + context_reason("array-subscript") + "; declare the variable "
                           f"first and assign it apart, as in '{name} v; v={{{hit.name}}}'")
    if shell and name in NAMING_BUILTINS | {"printf"} and (
            name != "printf" or (facts.dash_v is not None and facts.dash_v < position)):
        raise _refusal(hit, f"names a variable for '{name}' (or an option of it): it is "
                       + context_reason("variable-name"))
    for index in facts.runners:
        if index >= position:
            break
        if index >= name_at and _check_runner(hit, words, index, position, facts):
            return


@dataclass
class _Facts:
    """What the rules need of one command, found once (a template may have many hits)."""

    runners: list[int]
    """Indices of words naming a wrapper, shell, interpreter or remote shell."""
    dash_v: int | None
    plain_after: dict[int, int | None]
    """For each wrapper: the index of the first plain word after it."""


def _facts(command: Command, memo: dict[int, _Facts]) -> _Facts:
    """The command's facts, found once per check (`memo`: by id of the command)."""
    cached = memo.get(id(command))
    if cached is not None:
        return cached
    words = command.arguments()
    runners = [i for i, w in enumerate(words)
               if program_name(w) in WRAPPERS | REMOTE_SHELLS | SHELLS | INTERPRETERS]
    wrappers = {i for i in runners if program_name(words[i]) in WRAPPERS}
    plain_after: dict[int, int | None] = {}
    following: int | None = None  # one backward pass: the first plain word after each index
    for index in range(len(words) - 1, -1, -1):
        if index in wrappers:
            plain_after[index] = following
        if _plain(words[index].literal):
            following = index
    dash_v = next((i for i, w in enumerate(words) if w.literal == "-v"), None)
    facts = _Facts(runners, dash_v, plain_after)
    memo[id(command)] = facts
    return facts


def _check_runner(hit: Hit, words: list[Word], index: int, position: int,
                  facts: _Facts) -> bool:
    """Refuse `hit` (at `position`) where the word at `index` runs it as a command or code;
    True when `hit` is a plain argument of the code found there (nothing further to check)."""
    program = program_name(words[index])
    if program in WRAPPERS:
        assignment = words[position].literal.split("=", 1)[0]
        if (program == "env" and "=" in words[position].text.split("{", 1)[0]
                and assignment not in EVALUATED_VARIABLES):
            return False
        plain = facts.plain_after[index]
        if plain is None or plain >= position:
            raise _refusal(hit, f"comes before the command that '{program}' runs: name that "
                           "command in the template")
    elif program in REMOTE_SHELLS:
        raise _refusal(hit, f"goes to '{program}', which joins its arguments into a command "
                       "for a shell: refused, since the value would be read as shell code")
    elif program in SHELLS or program in INTERPRETERS:
        code = code_word(words, index)
        if code is None or position <= code:
            raise _refusal(hit, f"is in the code that '{program}' runs (a nested shell or "
                           "interpreter reads the value as code): pass it after the code as a "
                           "positional argument, as in `sh -c 'grep -- \"$1\" f' sh {"
                           + hit.name + "}`")
        return True
    return False


def _runs_written_file(command: Command, written: set[str]) -> list[tuple[str, int]]:
    """A shell or interpreter running a file the template itself writes (`> f.sh; bash f.sh`):
    a value written there would run as code."""
    words = command.arguments()
    found = []
    for index, word in enumerate(words):
        program = program_name(word)
        if program in SHELLS or program in INTERPRETERS:
            code = code_word(words, index)
            if code is not None and words[code].literal in written:
                found.append((f"'{program}' running {words[code].literal}, which the template "
                              "writes", word.start))
    return found


def _plain(text: str) -> bool:
    return bool(text) and not text.startswith(("-", "+")) and "=" not in text \
        and not text.replace(".", "").rstrip("smhd").isdigit()


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
    per item). The template must have passed `check_shell_template`; a value that is not a
    number is still refused in an arithmetic context, whatever the check said."""
    refuse_nul(dict(values), "a parameter value")
    pieces: list[str] = []
    position = 0
    for hit in scan(template, values).hits:
        value = values[hit.name]
        if hit.context == "arith":
            if isinstance(value, bool) or not isinstance(value, int | float | NoWord | None):
                raise _refusal(hit, "is in an arithmetic context and its value is not a number")
        elif hit.context not in QUOTABLE:
            raise _refusal(hit, f"is {_CONTEXTS[hit.context]}: {_fix(hit.name)}")
        pieces.append(template[position:hit.start])
        if hit.context == "arith":
            pieces.append(value_text(value))
        else:
            pieces.append(_quoted(value) if hit.context == "command"
                          else _in_double_quotes(value))
        position = hit.end
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
