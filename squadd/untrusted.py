"""Input squadd does not control, made safe to hold: JSON parsed with a nesting limit and without
NaN, text checked (or mended) for unpaired surrogates, regular expressions run in linear time,
delimited spans replaced in linear time, and file names shown readably.

The HTTP API, MCP, the command line, model answers and the files squadd reads all use these, so
a hostile value gets the same clear error wherever it enters.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from squadd.errors import UntrustedInputError

MAX_JSON_DEPTH = 100
"""Deepest nesting of arrays and objects accepted in JSON from outside (no real call nests so)."""
_SURROGATE = re.compile("[\ud800-\udfff]")
_PATH_SHOWN = 80
_MAYBE_SURROGATE = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F]")
"""Where JSON text may hold a surrogate: as a character, or as an escape (of a pair too, or
after an escaped backslash: those only send the text the slow way)."""


def _refuse_constant(name: str) -> Any:
    raise UntrustedInputError(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise UntrustedInputError(f"{shown} is too large for a number (it would be infinite)")
    return number


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def parse_json(data: str | bytes, *, max_depth: int = MAX_JSON_DEPTH,
               mend_surrogates: bool = False) -> Any:
    """Parse JSON text from outside; `UntrustedInputError` when it is not valid JSON, nests
    deeper than `max_depth`, holds NaN, Infinity or a number too large for a float (1e400), or
    (unless `mend_surrogates`, which turns them into U+FFFD) holds a string with an unpaired
    surrogate escape such as ``"\\ud800"``."""
    try:
        # As `json.loads` reads bytes (UTF-8, -16 or -32), with one decoder made once.
        text = data if isinstance(data, str) \
            else data.decode(json.detect_encoding(data), "surrogatepass")
        value = _DECODER.decode(text)
    except UntrustedInputError:
        raise
    except RecursionError:
        raise UntrustedInputError(f"nested deeper than {max_depth} levels") from None
    except UnicodeDecodeError as exc:
        raise UntrustedInputError(f"not UTF-8: {exc}") from None
    except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
        raise UntrustedInputError(str(exc)) from None
    if text.count("{") + text.count("[") <= max_depth and not _MAYBE_SURROGATE.search(text):
        # Too few brackets to nest that deep and no surrogate written either way, so nothing
        # to refuse or mend: the common answer skips the walk (C scans, not a Python one).
        return value
    check_json_value(value, max_depth=max_depth, surrogates=not mend_surrogates)
    return mend(value) if mend_surrogates else value


def check_json_value(value: Any, *, max_depth: int = MAX_JSON_DEPTH,
                     surrogates: bool = True) -> None:
    """Refuse a parsed value nested deeper than `max_depth` or (with `surrogates`) holding an
    unpaired surrogate in a string or key; the error names where, as `a.b[2]`."""
    stack: list[tuple[Any, int, str]] = [(value, 0, "")]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, dict | list):
            if depth >= max_depth:
                raise UntrustedInputError(f"nested deeper than {max_depth} levels (at "
                                          f"{_shown_path(path)})")
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(key, str):
                    if surrogates and _SURROGATE.search(key):
                        raise _surrogate_error(f"the key {_shown_key(key)}", path)
                    where = f"{path}.{key}" if path else key
                else:
                    where = f"{path}[{key}]"
                stack.append((child, depth + 1, where))
        elif surrogates and isinstance(item, str) and _SURROGATE.search(item):
            raise _surrogate_error("the string", path)


def check_document(data: Any, *, max_values: int) -> None:
    """Refuse a parsed YAML or TOML document that expands past `max_values` values (YAML
    aliases can make a small file a huge one) or holds a NaN or an infinity; names where."""
    stack: list[tuple[Any, str]] = [(data, "")]
    count = 0
    while stack:
        item, path = stack.pop()
        count += 1
        if count > max_values:
            raise UntrustedInputError(f"the file expands to more than {max_values} values "
                                      "(through YAML aliases?)")
        if isinstance(item, float) and not math.isfinite(item):
            raise UntrustedInputError(f"'{_shown_path(path)}' = {item} is not a finite number")
        if isinstance(item, dict | list):
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend((child, f"{path}.{key}" if path else str(key)) for key, child in pairs)


def _shown_path(path: str) -> str:
    if not path:
        return "the top level"
    return path if len(path) <= _PATH_SHOWN else path[:_PATH_SHOWN - 3] + "..."


def _shown_key(key: str) -> str:
    return ascii(key if len(key) <= 40 else key[:37] + "...")


def _surrogate_error(what: str, path: str) -> UntrustedInputError:
    where = f" at {_shown_path(path)}" if path else ""
    return UntrustedInputError(f"{what}{where} holds an unpaired surrogate (such as \\ud800): "
                               "text must be valid Unicode")


def has_surrogate(text: str) -> bool:
    """True when `text` holds a lone surrogate (it cannot be written as UTF-8)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def mend_text(text: str) -> str:
    """`text` with every unpaired surrogate replaced by U+FFFD, as a UTF-8 decoder would."""
    if text.isascii():  # the common case, answered from the string's header
        return text
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def mend(value: Any) -> Any:
    """`mend_text` applied to every string and key in a parsed JSON value (nesting bounded)."""
    if isinstance(value, str):
        return mend_text(value)
    if isinstance(value, dict):
        return {mend(k): mend(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mend(v) for v in value]
    return value


def replace_spans(text: str, opening: str, closing: str, replace: Callable[[str], str]) -> str:
    """`text` with each span from `opening` to the nearest `closing` after it (both included)
    replaced by `replace(span)`, left to right, as `re.sub` of the lazy `opening.*?closing`
    (with DOTALL) does; an unclosed `opening` is left as it is. One pass with `str.find`: the
    lazy pattern rescans the rest of the text from each unclosed opening, quadratic in a
    hostile text."""
    parts: list[str] = []
    done = 0
    while (start := text.find(opening, done)) >= 0:
        end = text.find(closing, start + len(opening))
        if end < 0:  # unclosed, and so is every opening after it
            break
        end += len(closing)
        parts += (text[done:start], replace(text[start:end]))
        done = end
    parts.append(text[done:])
    return "".join(parts)


def shown_name(name: str) -> str:
    """A file name as read from disk, as text: bytes that are not UTF-8 become U+FFFD."""
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:
        return mend_text(name)


class LinearPattern:
    """A regular expression run by pydantic's Rust engine: matching takes time linear in the
    text whatever the pattern, so a pattern or a text from outside cannot stall the loop."""

    def __init__(self, pattern: str):
        # Imported here: the command line imports this module, and most commands never need it.
        from pydantic_core import SchemaError, SchemaValidator, core_schema

        try:
            self._validator = SchemaValidator(core_schema.str_schema(pattern=pattern))
        except SchemaError as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            reason = next((line for line in lines if line.startswith("error:")), lines[-1])
            construct = nonlinear_construct(pattern)
            why = (f"it uses {construct}, which only a backtracking engine can run"
                   if construct else reason.removeprefix("error:").strip())
            shown = pattern if len(pattern) <= 80 else pattern[:77] + "..."
            raise UntrustedInputError(
                f"the pattern {shown!r} cannot be used: {why} (patterns run in a linear-time "
                "engine: write it without look-around, backreferences, atomic groups, "
                "possessive quantifiers or conditionals)") from None
        self.pattern = pattern

    def search(self, text: str) -> bool:
        """True when the pattern matches somewhere in `text`."""
        return bool(self._validator.isinstance_python(text))


@lru_cache(maxsize=256)
def linear_pattern(pattern: str) -> LinearPattern:
    """`LinearPattern(pattern)`, cached (`UntrustedInputError` when it cannot be compiled)."""
    return LinearPattern(pattern)


_GROUP_CONSTRUCTS = (
    ("(?<=", "a look-behind (?<=...)"), ("(?<!", "a negative look-behind (?<!...)"),
    ("(?=", "a look-ahead (?=...)"), ("(?!", "a negative look-ahead (?!...)"),
    ("(?P=", "a named backreference (?P=name)"), ("(?>", "an atomic group (?>...)"),
    ("(?(", "a conditional group (?(...)...)"),
)
"""Group openings that need a backtracking engine, each with the name an error shows."""


def nonlinear_construct(pattern: str) -> str | None:
    """The first construct of `pattern` that no linear-time engine can run (look-around,
    backreferences, atomic groups, possessive quantifiers, conditionals), named for an error;
    None when there is none. One pass, minding escapes and character classes."""
    i, size, in_class = 0, len(pattern), False
    while i < size:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1:i + 2]
            if not in_class and nxt.isdigit() and nxt != "0":
                return f"a backreference \\{nxt}"
            if not in_class and nxt == "g":
                return "a backreference \\g<...>"
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            i += 2 if pattern[i + 1:i + 2] == "^" else 1
            i += 1 if pattern[i:i + 1] == "]" else 0  # `[]...]`, `[^]...]`: a literal ] first
            continue
        elif c == "(":
            for opening, name in _GROUP_CONSTRUCTS:
                if pattern.startswith(opening, i):
                    return name
        elif c in "*+?}" and pattern[i + 1:i + 2] == "+":
            return f"a possessive quantifier {c}+"
        i += 1
    return None
