"""What bash and common programs do with their words: which builtins evaluate text, which
commands run other commands or code, which variables the shell itself reads.

`command_constructs` names the places in one simple command where a value could be run as
code; `template` refuses placeholders that could reach them.
"""

from __future__ import annotations

import re
import shlex

from squadd.tools.yaml.scan import ASSIGNMENT_RE, Command, Word, scan

_MAX_DEPTH = 3
"""Nested shells looked into (`sh -c "bash -c '...'"`)."""

EVALUATING_BUILTINS = frozenset({"eval", "let", "source", ".", "trap", "alias", "bind",
                                 "complete", "compgen", "enable", "fc"})
DECLARING_BUILTINS = frozenset({"declare", "typeset", "local", "readonly", "export"})
"""With an option (`-i`, `-n`, `-a`, ...) these evaluate assigned values or names."""
COMPOUND_DECLARERS = frozenset({"declare", "typeset", "local"})
"""These re-read an assigned value shaped like `(...)` as an array assignment."""
ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-v", "-R"})
EVALUATED_VARIABLES = frozenset({
    "RANDOM", "SRANDOM", "OPTIND", "OPTERR", "LINENO", "SECONDS", "HISTCMD", "COLUMNS",
    "LINES", "PS0", "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND", "BASH_ENV", "ENV",
    "SHELLOPTS", "BASHOPTS", "BASH_XTRACEFD", "BASH_ARGV0", "IFS", "PATH", "CDPATH",
    "GLOBIGNORE", "BASH_COMPAT", "EPOCHREALTIME", "FUNCNEST", "HISTSIZE", "HISTFILESIZE",
    "TMOUT", "LD_PRELOAD", "LD_LIBRARY_PATH", "SHELL"})
"""Variables whose value bash (or the loader) evaluates, runs or searches."""
WRAPPERS = frozenset({
    "env", "nohup", "setsid", "timeout", "nice", "ionice", "stdbuf", "time", "exec",
    "command", "builtin", "sudo", "doas", "xargs", "chroot", "taskset", "chrt", "flock",
    "unbuffer", "strace", "ltrace", "nsenter", "unshare", "coproc", "-exec", "-execdir",
    "-ok", "-okdir", "prlimit", "systemd-run", "firejail", "catchsegv"})
"""Commands that run another command named by a later word."""
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh",
                    "busybox", "yash", "rbash"})
INTERPRETERS = frozenset({
    "python", "python2", "python3", "perl", "ruby", "node", "nodejs", "php", "lua", "Rscript",
    "tclsh", "osascript", "pwsh", "powershell", "sed", "gsed", "awk", "gawk", "mawk", "nawk",
    "jq", "deno", "bun"})
"""Programs whose first operand (or `-c`/`-e` argument) is code."""
REMOTE_SHELLS = frozenset({"ssh", "su", "runuser", "watch", "parallel", "script", "tmux",
                           "screen", "rsh", "mosh", "docker", "podman", "kubectl"})
"""Programs that join their arguments into a command line for a shell."""
NAMING_BUILTINS = frozenset({"read", "mapfile", "readarray", "getopts", "unset", "wait"})
"""Builtins whose arguments name variables (`a[$(cmd)]` would run as a subscript)."""
BUILTIN_PREFIXES = frozenset({"builtin", "command", "coproc"})
"""Words before a builtin that still run it as that builtin (`builtin declare ...`)."""
VALUE_OPTIONS = {"read": "dinNptu", "mapfile": "dnOsuCc", "readarray": "dnOsuCc"}
"""For each naming builtin, the options whose argument is a value, not a variable name."""


def builtin_index(words: list[Word], index: int) -> int:
    """The index of the command that `words[index]` runs as a builtin: past `builtin`,
    `command` and `coproc` (and their options), so `builtin declare` is judged as `declare`."""
    while index < len(words) and words[index].literal in BUILTIN_PREFIXES:
        index += 1
        while index < len(words) and words[index].literal.startswith("-"):
            index += 1
    return min(index, len(words) - 1)


def name_part(word: Word) -> str:
    """The part of an argument of `declare` & co. that names a variable: before its `=`."""
    return word.text.split("=", 1)[0]


def named_words(name: str, words: list[Word], index: int) -> list[Word]:
    """The words after a naming builtin at `index` that bash takes as variable names (not its
    options, nor the argument of an option that takes a value, such as `read -p PROMPT`)."""
    rest = words[index + 1:]
    if name in DECLARING_BUILTINS:
        return [w for w in rest if not w.literal.startswith(("-", "+"))]
    if name in ("printf", "wait"):  # printf -v NAME, wait -p NAME
        flag = "v" if name == "printf" else "p"
        return [rest[at + 1] for at, w in enumerate(rest[:-1])
                if w.literal.startswith("-") and w.literal.endswith(flag)]
    found: list[Word] = []
    skip = False
    for word in rest:
        text = word.literal
        if skip:
            skip = False
        elif text.startswith("-") and len(text) > 1:
            skip = text[-1] in VALUE_OPTIONS.get(name, "")
        else:
            found.append(word)
    return found[1:2] if name == "getopts" else found


def code_word(words: list[Word], index: int) -> int | None:
    """Index of the word holding the code of the shell or interpreter at `index`: the word
    after `-c`/`-e` (or an option ending in them), else the first operand."""
    for at in range(index + 1, len(words)):
        text = words[at].literal
        if text in ("--command", "--eval", "--expression", "--exec", "--file", "-f"):
            return at + 1 if at + 1 < len(words) else None
        if text.startswith("--"):
            continue
        if text.startswith("-") and len(text) > 1:
            if text[-1] in "ceEr" or (text[-1] == "f" and len(text) == 2):
                return at + 1 if at + 1 < len(words) else None
            continue
        return at
    return None


def command_constructs(command: Command, depth: int = 0) -> list[tuple[str, int]]:
    """Builtins and words that make bash evaluate text: `eval`, `let`, `declare -i`,
    `[[ a -eq b ]]`, `a[i]=`, assignments to its integer or prompt variables; shells or
    interpreters that read their code from input rather than from the template; the same
    inside the literal code of a nested shell (`sh -c '(( $1 > 2 ))' sh {N}`); `xargs -I`
    putting its input into code; awk and sed programs that run commands."""
    found: list[tuple[str, int]] = []
    words = command.arguments()
    for word in command.words:
        match = ASSIGNMENT_RE.match(word.literal)
        if word.list_item and word.literal.startswith("["):
            found.append(("an array subscript [...]=", word.start))
        elif match and match.group(2) is not None:
            found.append((f"an array subscript {match.group(1)}[...]=", word.start))
        elif match and match.group(1) in EVALUATED_VARIABLES and "$" in word.text:
            found.append((f"an assignment to {match.group(1)}", word.start))
    index = command.name_index()
    if index is None:
        return found
    if _expands(words[index]):
        found.append((f"a command named by an expansion ({words[index].text})",
                      words[index].start))
    index = builtin_index(words, index)
    name = words[index].literal
    options = [w.literal for w in words[index + 1:] if w.literal[:1] in "-+"]
    at = words[index].start
    if name in DECLARING_BUILTINS | NAMING_BUILTINS | {"printf"}:
        for word in named_words(name, words, index):
            # `declare v="$x"` re-reads a value shaped like `(...)` as an array assignment,
            # evaluating its subscripts: for declarations the value counts too.
            if _expands(word if name in COMPOUND_DECLARERS else Word(0, text=name_part(word))):
                found.append((f"a variable named or declared by an expansion ({word.text}) "
                              f"for '{name}'", word.start))
    if name in ("mapfile", "readarray"):  # -C CALLBACK runs its argument as code
        callback = next((words[i + 1] for i in range(index + 1, len(words) - 1)
                         if words[i].literal.startswith("-") and "C" in words[i].literal), None)
        if callback is not None and _expands(callback):
            found.append((f"a '{name} -C' callback taken from an expansion ({callback.text})",
                          callback.start))
    if name in EVALUATING_BUILTINS:
        found.append((f"'{name}'", at))
    elif name in DECLARING_BUILTINS and options:
        found.append((f"'{name} {options[0]}'", at))
    elif name == "[[" and any(w.literal in ARITHMETIC_TESTS for w in words):
        found.append(("an arithmetic test in [[ ... ]]", at))
    elif name in ("[", "test") and any(w.literal in ("-v", "-R") for w in words):
        found.append((f"'{name} -v'", at))
    for position in range(index, len(words)):
        program = program_name(words[position])
        if program in SHELLS or program in INTERPRETERS or program in REMOTE_SHELLS:
            code = code_word(words, position)
            if code is None or words[code].literal == "-":
                found.append((f"'{program}' reading code from its input", words[position].start))
            elif program in SHELLS | INTERPRETERS:
                found.extend(_code_constructs(program, words[code], depth))
        if program in WRAPPERS:
            wrapped = next((w for w in words[position + 1:] if _operand(w)), None)
            if wrapped is not None and _expands(wrapped):
                found.append((f"a command named by an expansion ({wrapped.text}) that "
                              f"'{program}' runs", wrapped.start))
        if program == "xargs" and any(w.literal.startswith(("-I", "-i", "--replace", "-J"))
                                      for w in words[position + 1:]):
            found.append(("'xargs -I', which puts its input into a command line",
                          words[position].start))
    return found


def _expands(word: Word) -> bool:
    """True when bash expands something in `word` (`$V`, `"$@"`, `$(...)`, backticks)."""
    return "$" in word.text or "`" in word.text


def _operand(word: Word) -> bool:
    """A word that is not an option, an assignment or a number (the command a wrapper runs)."""
    text = word.literal
    return bool(text) and not text.startswith(("-", "+")) and "=" not in text \
        and not text.replace(".", "").rstrip("smhd").isdigit()


_AWK_RUNS = re.compile(r"system\s*\(|\|\s*getline|print[^;}]*\|")
_SED_RUNS = re.compile(r"(^|[;\n{}])\s*e(\s|;|$)|/[gpiImMw0-9]*e[gpiImM0-9]*\s*($|[;}\n])")


def _code_constructs(program: str, word: Word, depth: int) -> list[tuple[str, int]]:
    """Constructs in the literal code given to a nested shell, awk or sed."""
    try:
        code = " ".join(shlex.split(word.text))
    except ValueError:
        return []
    where = word.start
    if program in ("awk", "gawk", "mawk", "nawk") and _AWK_RUNS.search(code):
        return [(f"an {program} program that runs commands", where)]
    if program in ("sed", "gsed") and _SED_RUNS.search(code):
        return [(f"a {program} script that runs commands (e)", where)]
    if program not in SHELLS or depth >= _MAX_DEPTH:
        return []
    inner = scan(code, ())
    found = list(inner.constructs)
    for command in inner.commands:
        found.extend(command_constructs(command, depth + 1))
    return [(f"{what} in the code '{program}' runs", where) for what, _ in found]


def program_name(word: Word) -> str:
    """`/usr/bin/python3.12` -> `python`, `bash` -> `bash`: the name the lists above use."""
    base = word.literal.rsplit("/", 1)[-1]
    stripped = base.rstrip("0123456789.")
    return stripped if stripped in INTERPRETERS else base
