"""Finding secret values in text, as they are and in the encodings a tool's output commonly
carries them in, and replacing each with `[secret:NAME]` (`[secret:NAME:base64]`, ...).

Caught, for each value: the value itself; base64 (standard and URL-safe alphabets, at each of
the three byte alignments, so a value inside a longer encoded blob is found too); hex (any
case); URL-encoding (escapes in any case, `+` for spaces, and every byte escaped); and each of
these split across lines (a line break, optionally after a `\\` and before indentation, between
any two characters). Not caught: other encodings (base32, rot13, gzip, reversed, every other
character), a value cut into pieces the output never shows side by side, and the encodings of a
value shorter than `MIN_ENCODED` bytes. See docs/security.md.
"""

from __future__ import annotations

import base64
import bisect
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import quote, quote_plus

MIN_ENCODED = 8
"""The encodings of a value shorter than this (in bytes), and any encoded form shorter than
this (in characters), are not looked for: too likely to match by chance."""
MIN_SPLIT = 8
"""A value (or form) shorter than this is only found whole, never split across lines."""
_BREAK_RE = re.compile(r"\\?\r?\n[ \t]*")
"""What may stand between two characters of a value split across lines."""
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_URLSAFE = str.maketrans("+/", "-_")


def _base64_forms(data: bytes) -> set[str]:
    """The characters of `data`'s base64 that depend on `data` alone, at each alignment."""
    forms: set[str] = set()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + data).decode("ascii")
        core = encoded[-(-8 * shift // 6):(8 * (shift + len(data))) // 6]
        forms.update((core, core.translate(_URLSAFE)))
    return forms


def _url_forms(value: str, data: bytes) -> set[str]:
    """URL-encodings of `value` (looked for in any case: `%2F`, `%2f`, mixed)."""
    forms = {quote(value, safe=""), quote_plus(value, safe=""),
             "".join(f"%{byte:02X}" for byte in data)}
    forms.discard(value)
    return forms


def forms_of(value: str) -> list[tuple[str, str, bool]]:
    """(form, encoding, case-insensitive) for each way `value` is looked for."""
    data = value.encode("utf-8")
    found: list[tuple[str, str, bool]] = [(value, "", False)]
    if len(data) < MIN_ENCODED:
        return found
    found += [(f, "base64", False) for f in sorted(_base64_forms(data))]
    found.append((data.hex(), "hex", True))
    found += [(f, "url", True) for f in sorted(_url_forms(value, data))]
    return [(form, how, fold) for form, how, fold in found
            if form and (not how or len(form) >= MIN_ENCODED)]


@lru_cache(maxsize=64)
def _searched(secrets: tuple[tuple[str, str], ...]) -> tuple[tuple[str, bool, str], ...]:
    """(form, case-insensitive, marker) for every form of every secret, longest first."""
    found: list[tuple[str, bool, str]] = []
    for name, value in secrets:
        for form, how, fold in forms_of(value):
            marker = f"[secret:{name}:{how}]" if how else f"[secret:{name}]"
            found.append((form.lower() if fold else form, fold, marker))
    found.sort(key=lambda item: -len(item[0]))
    return tuple(found)


class _Joined:
    """`text` with its line breaks (and the indentation after them) taken out, and the way
    back from a position in it to one in `text`."""

    def __init__(self, text: str):
        pieces: list[str] = []
        self.starts: list[int] = []    # where each kept piece starts, in the joined text
        self.origins: list[int] = []   # ... and in `text`
        at = joined = 0
        for match in _BREAK_RE.finditer(text):
            if match.start() > at:
                self.starts.append(joined)
                self.origins.append(at)
                pieces.append(text[at:match.start()])
                joined += match.start() - at
            at = match.end()
        if at < len(text):
            self.starts.append(joined)
            self.origins.append(at)
            pieces.append(text[at:])
        self.text = "".join(pieces)
        self._folded: str | None = None

    @property
    def folded(self) -> str:
        if self._folded is None:
            self._folded = self.text.translate(_ASCII_LOWER)
        return self._folded

    def origin(self, position: int) -> int:
        piece = bisect.bisect_right(self.starts, position) - 1
        return self.origins[piece] + position - self.starts[piece]


def _spans(text: str, searched: tuple[tuple[str, bool, str], ...]
           ) -> list[tuple[int, int, str]]:
    """(start, end, marker) in `text` of every form found, overlapping ones included."""
    joined: _Joined | None = None
    spans: list[tuple[int, int, str]] = []
    folded_text: str | None = None
    for form, fold, marker in searched:
        if len(form) < MIN_SPLIT:
            if fold and folded_text is None:
                folded_text = text.translate(_ASCII_LOWER)
            hay = folded_text if fold and folded_text is not None else text
            spans += [(at, at + len(form), marker) for at in _find_all(hay, form)]
            continue
        if joined is None:
            joined = _Joined(text)
        hay = joined.folded if fold else joined.text
        for at in _find_all(hay, form):
            spans.append((joined.origin(at), joined.origin(at + len(form) - 1) + 1, marker))
    return spans


def _find_all(hay: str, needle: str) -> list[int]:
    found: list[int] = []
    at = hay.find(needle)
    while at >= 0:
        found.append(at)
        at = hay.find(needle, at + 1)
    return found


def redact(text: str, secrets: Mapping[str, str]) -> str:
    """`text` with every secret value of `secrets` (name -> value), in every form looked for,
    replaced by its marker."""
    if not secrets or not text:
        return text
    searched = _searched(tuple(sorted((n, v) for n, v in secrets.items() if v)))
    spans = _spans(text, searched)
    if not spans:
        return text
    spans.sort(key=lambda span: (span[0], -(span[1] - span[0])))
    out: list[str] = []
    at = 0
    for start, end, marker in spans:
        if start < at:
            continue  # inside a longer match already replaced
        out += (text[at:start], marker)
        at = end
    out.append(text[at:])
    return "".join(out)


def redact_any(value: Any, secrets: Mapping[str, str]) -> Any:
    """`redact` applied through strings nested in dicts and lists."""
    if not secrets:
        return value
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {k: redact_any(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_any(v, secrets) for v in value]
    return value
