"""Options and helpers the `squadd` commands share: finding the squad dir from `--dir`, and
the parameter types that refuse text that is not UTF-8 and numbers that are not finite."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from squadd.state.layout import SquadLayout
from squadd.untrusted import has_surrogate, shown_name

F = TypeVar("F", bound=Callable[..., Any])

DIR_HELP = "Look for the squad dir from this folder up (default: the working directory)."


class Utf8Text(click.types.StringParamType):
    """Text from the command line, which must be UTF-8: the shell can pass any bytes."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        text = super().convert(value, param, ctx)
        if has_surrogate(text):
            shown = shown_name(text)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            self.fail(f"{shown!r} is not valid UTF-8 text", param, ctx)
        return text


TEXT = Utf8Text()


class FiniteFloatRange(click.FloatRange):
    """A `click.FloatRange` that also refuses nan and inf (which compare false to any bound)."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number", param, ctx)
        return number


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
