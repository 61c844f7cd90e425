"""Tool docstrings: the summary a model reads and each parameter's description, parsed by griffe.

Google (``Args:`` then ``name (type): text``), Sphinx (``:param name: text``) and NumPy styles
are told apart by griffe's heuristics; a docstring in none of them is all summary. Continuation
lines of a description are joined with spaces, as a model reads them best.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import griffe

_QUIET: dict[str, dict[str, Any]] = {
    # A tool author's docstring is not API documentation: no warnings about missing types.
    "google": {"warnings": False},
    "numpy": {"warnings": False},
    "sphinx": {"warn_unknown_params": False, "warn_missing_types": False},
}

_TEXT = griffe.DocstringSectionKind.text
_PARAMETERS = griffe.DocstringSectionKind.parameters


def _joined(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The summary (the text before the first section) and per-parameter descriptions.

    >>> parse_docstring('''Search the code.
    ...
    ...     Args:
    ...         query: What to look for,
    ...             a word or a phrase.
    ...     ''')
    ('Search the code.', {'query': 'What to look for, a word or a phrase.'})
    """
    if not doc or not doc.strip():
        return "", {}
    docstring = griffe.Docstring(inspect.cleandoc(doc))
    logger = logging.getLogger("griffe")
    level = logger.level
    logger.setLevel(logging.ERROR)  # griffe reports doubtful sections as warnings: not ours
    try:
        sections = griffe.parse_auto(docstring, per_style_options=_QUIET)  # type: ignore[arg-type]
    finally:
        logger.setLevel(level)
    summary = ""
    params: dict[str, str] = {}
    for index, section in enumerate(sections):
        if section.kind is _TEXT and index == 0:
            summary = str(section.value).strip()
        elif section.kind is _PARAMETERS:
            for parameter in section.value:
                params.setdefault(parameter.name, _joined(parameter.description or ""))
    return summary, params
