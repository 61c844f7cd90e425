"""Options and helpers the `squadd` commands share: finding the squad dir from `--dir`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from squadd.state.layout import SquadLayout

F = TypeVar("F", bound=Callable[..., Any])

DIR_HELP = "Look for the squad dir from this folder up (default: the working directory)."


def dir_option(function: F) -> F:
    """The `--dir PATH` option: where to start looking for the squad dir."""
    option = click.option(
        "--dir", "directory", type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None, help=DIR_HELP,
    )
    return option(function)


def find_layout(directory: Path | None) -> SquadLayout:
    """The squad dir at or above `directory` (a `SquadNotFoundError` naming 'squadd init')."""
    return SquadLayout.find(directory)


def show_path(path: Path, base: Path | None = None) -> str:
    """`path` relative to `base` (default: the working directory) when it lies below it."""
    base = (base or Path.cwd()).resolve()
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)
