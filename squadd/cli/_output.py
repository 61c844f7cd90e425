"""Shared printing for the `squadd` commands: aligned tables for people, JSON for scripts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from squadd.cli._report import bold, format_table, json_text


def print_json(data: Any) -> None:
    """Print `data` as indented JSON (paths become strings)."""
    click.echo(json_text(data))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a table; the header is bold on a terminal."""
    lines = format_table([header.upper() for header in headers], rows)
    click.echo(bold(lines[0]))
    for line in lines[1:]:
        click.echo(line)
