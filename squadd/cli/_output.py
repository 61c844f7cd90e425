"""Shared printing for the `squadd` commands: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from squadd.cli._report import format_table


def _default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot show {type(value).__name__} as JSON")


def print_json(data: Any) -> None:
    """Print `data` as indented JSON (paths become strings)."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=_default))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a table; the header is bold on a terminal."""
    lines = format_table([header.upper() for header in headers], rows)
    click.echo(click.style(lines[0], bold=True))
    for line in lines[1:]:
        click.echo(line)
