"""The `run-condition` of a YAML tool step: a small expression language, parsed at load time.

Operands: ``{step.exit-code}``, ``{step.output}``, ``{PARAM}``, numbers, quoted strings, bare
words, ``true``/``false``. Operators: ``== != < <= > >= contains =~``, ``&& || !`` (or ``and``,
``or``, ``not``) and parentheses. Comparisons are numeric when both sides are numbers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from squadd.errors import ConditionError, UntrustedInputError
from squadd.untrusted import linear_pattern

_TOKEN_RE = re.compile(r"""
    \s*(?:
      (?P<ref>\{[A-Za-z0-9_-]+(?:\.(?:exit-code|output))?\})
    | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    | (?P<number>-?\d+(?:\.\d+)?(?![\w.-]))
    | (?P<op>==|!=|<=|>=|=~|&&|\|\||[<>!()])
    | (?P<word>[A-Za-z0-9_.\-/:]+)
    )""", re.VERBOSE)
_REF_RE = re.compile(r"^\{([A-Za-z0-9_-]+)(?:\.(exit-code|output))?\}$")
_COMPARE = ("==", "!=", "<", "<=", ">", ">=", "contains", "=~")
_FALSY = ("", "0", "false", "no")


@dataclass(frozen=True)
class Ref:
    """``{step.exit-code}``, ``{step.output}`` or ``{PARAM}`` (field None)."""

    name: str
    field: str | None


@dataclass(frozen=True)
class Literal_:
    value: str


Operand = Ref | Literal_


@dataclass(frozen=True)
class Compare:
    left: Operand
    op: str | None
    right: Operand | None


@dataclass(frozen=True)
class Not:
    inner: Node


@dataclass(frozen=True)
class BoolOp:
    op: str
    parts: tuple[Node, ...]


Node = Compare | Not | BoolOp


def _unescape(quoted: str) -> str:
    return re.sub(r"\\(.)", r"\1", quoted[1:-1])


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN_RE.match(text, position)
        if match is None or match.end() == position:
            raise ConditionError(f"cannot read {text[position:].strip()[:20]!r} "
                                 f"(at character {position + 1})")
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind == "word" and value.lower() in ("and", "or", "not", "contains"):
            kind, value = "op", {"and": "&&", "or": "||", "not": "!"}.get(value.lower(),
                                                                         "contains")
        tokens.append((kind, value))
        position = match.end()
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = _tokens(text)
        self.index = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise ConditionError("the condition ends too early")
        self.index += 1
        return token

    def parse(self) -> Node:
        if not self.tokens:
            raise ConditionError("the condition is empty")
        node = self.or_()
        if self.peek() is not None:
            raise ConditionError(f"unexpected {self.peek()[1]!r}")  # type: ignore[index]
        return node

    def or_(self) -> Node:
        parts = [self.and_()]
        while self.peek() == ("op", "||"):
            self.take()
            parts.append(self.and_())
        return parts[0] if len(parts) == 1 else BoolOp("||", tuple(parts))

    def and_(self) -> Node:
        parts = [self.unary()]
        while self.peek() == ("op", "&&"):
            self.take()
            parts.append(self.unary())
        return parts[0] if len(parts) == 1 else BoolOp("&&", tuple(parts))

    def unary(self) -> Node:
        token = self.peek()
        if token == ("op", "!"):
            self.take()
            return Not(self.unary())
        if token == ("op", "("):
            self.take()
            node = self.or_()
            if self.peek() != ("op", ")"):
                raise ConditionError("a '(' is not closed")
            self.take()
            return node
        left = self.operand()
        token = self.peek()
        if token is not None and token[0] == "op" and token[1] in _COMPARE:
            self.take()
            right = self.operand()
            if token[1] == "=~" and isinstance(right, Literal_):
                try:
                    linear_pattern(right.value)
                except UntrustedInputError as exc:
                    raise ConditionError(f"bad regular expression: {exc}") from None
            return Compare(left, token[1], right)
        return Compare(left, None, None)

    def operand(self) -> Operand:
        kind, value = self.take()
        if kind == "ref":
            match = _REF_RE.match(value)
            assert match is not None
            return Ref(match.group(1), match.group(2))
        if kind == "string":
            return Literal_(_unescape(value))
        if kind in ("number", "word"):
            return Literal_(value)
        raise ConditionError(f"expected a value, found {value!r}")


@dataclass(frozen=True)
class Condition:
    """A parsed run-condition."""

    text: str
    root: Node

    def refs(self) -> list[Ref]:
        found: list[Ref] = []

        def walk(node: Node) -> None:
            if isinstance(node, Compare):
                for side in (node.left, node.right):
                    if isinstance(side, Ref):
                        found.append(side)
            elif isinstance(node, Not):
                walk(node.inner)
            else:
                for part in node.parts:
                    walk(part)

        walk(self.root)
        return found

    def evaluate(self, lookup: Callable[[Ref], str]) -> bool:
        return _evaluate(self.root, lookup)


def parse_condition(text: str) -> Condition:
    """Parse `text`; `ConditionError` says what is wrong."""
    return Condition(text, _Parser(text).parse())


def _value(operand: Operand, lookup: Callable[[Ref], str]) -> str:
    return lookup(operand) if isinstance(operand, Ref) else operand.value


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def _evaluate(node: Node, lookup: Callable[[Ref], str]) -> bool:
    if isinstance(node, Not):
        return not _evaluate(node.inner, lookup)
    if isinstance(node, BoolOp):
        if node.op == "&&":
            return all(_evaluate(part, lookup) for part in node.parts)
        return any(_evaluate(part, lookup) for part in node.parts)
    left = _value(node.left, lookup)
    if node.op is None or node.right is None:
        return left.strip().lower() not in _FALSY
    right = _value(node.right, lookup)
    if node.op == "contains":
        return right in left
    if node.op == "=~":
        try:  # linear time: the pattern or the text may come from a parameter value
            return linear_pattern(right).search(left)
        except UntrustedInputError:
            return False
    a, b = _number(left), _number(right)
    if a is not None and b is not None:
        return _ORDER[node.op](a, b)
    if node.op in ("==", "!="):
        return (left.strip() == right.strip()) == (node.op == "==")
    return False


_ORDER: Mapping[str, Callable[[float, float], bool]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}
