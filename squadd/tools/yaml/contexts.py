"""The grammar of the places where bash evaluates a word instead of passing it on as data.

Each context names where in bash's grammar it lies and what bash does with the text there; the
template checks (`scan`, `words`, `template`) find these places and refuse a
`{PARAM}` in them, quoting the context's entry. A quoted word is data everywhere else, so this
table, not a list of attacks, is what decides: a new bash feature that evaluates text is one new
entry here and one place in the scanner that recognises it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvaluationContext:
    """One place in bash's grammar where a word is evaluated, named or used as a number."""

    key: str
    grammar: str
    """Where it lies, in bash's own terms."""
    evaluation: str
    """What bash does with the text found there (why a value may not stand in it)."""
    reachable: bool
    """True when a value reaches it through a variable too (`v={X}; (( v ))`), so that a
    template having this context at all refuses its string parameters."""


CONTEXTS: dict[str, EvaluationContext] = {c.key: c for c in (
    EvaluationContext(
        "arithmetic", "$((...)), ((...)), $[...], for ((...)), ${s:offset:length}",
        "evaluates it as arithmetic, where a[$(cmd)] runs cmd and a bare name is read and "
        "its value evaluated in turn", True),
    EvaluationContext(
        "arithmetic-test", "[[ A -eq B ]] (and -ne -lt -le -gt -ge), [[ -v NAME ]]",
        "evaluates both operands as arithmetic", True),
    EvaluationContext(
        "code", "eval, let, source and ., trap, alias, bind, complete, compgen, enable, fc, "
        "the callback of mapfile -C",
        "runs the text as shell code or arithmetic", True),
    EvaluationContext(
        "declaration", "declare, typeset, local, export, readonly with -i -n -a -A and the "
        "like", "evaluates assigned values as arithmetic or follows them as variable names",
        True),
    EvaluationContext(
        "variable-name", "the NAME of declare/typeset/local/export/readonly NAME=..., read "
        "NAME, mapfile/readarray NAME, printf -v NAME, getopts OPTS NAME, unset NAME, wait -p "
        "NAME, test -v NAME and [ -v NAME ]",
        "takes the word as a variable name and evaluates a subscript NAME[...] in it as "
        "arithmetic (a[$(cmd)] runs cmd); a value starting with - becomes an option", True),
    EvaluationContext(
        "array-subscript", "NAME[...]=value, ${NAME[...]}, ( [KEY]=value )",
        "evaluates an indexed array's subscript as arithmetic", True),
    EvaluationContext(
        "indirection", "${!NAME} (not ${!NAME[@]} or ${!PREFIX*}), ${NAME@P}",
        "takes the value as the name of another variable (subscript evaluated) or expands "
        "it as a prompt string, which runs $(...)", True),
    EvaluationContext(
        "file-descriptor", ">&WORD, <&WORD, N>&WORD, and a word written against a "
        "redirection ({NAME}>file, WORD>file)",
        "reads the word as a file descriptor number, evaluating it as arithmetic", True),
    EvaluationContext(
        "evaluated-variable", "an assignment to PATH, IFS, PS1-PS4, PROMPT_COMMAND, BASH_ENV, "
        "ENV, LD_PRELOAD, RANDOM, OPTIND, SECONDS and the like",
        "evaluates, runs or searches the variable's value", False),
    EvaluationContext(
        "command-name", "the first word of a simple command, or the command a wrapper "
        "(env, timeout, xargs, sudo, builtin, command, ...) runs",
        "runs the program the word names", False),
    EvaluationContext(
        "nested-code", "the code of sh -c, bash -c, python -c, awk and sed programs, and the "
        "command line ssh, su, watch, docker exec ... hand to a shell",
        "gives the text to another interpreter as code", False),
    EvaluationContext(
        "quoting", "inside '...', $'...', `...`, ${...} or a heredoc",
        "keeps quote characters literal there, so no quoting of the value can hold", False),
)}


def context_reason(key: str) -> str:
    """`in the {key} context ({grammar}), where bash {evaluation}`, for a refusal."""
    context = CONTEXTS[key]
    return f"in the {key} context ({context.grammar}), where bash {context.evaluation}"
