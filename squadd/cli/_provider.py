"""The provider flags `squadd run` and `squadd serve` share, and how they become settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from squadd.cli._squad import TEXT

F = TypeVar("F", bound=Callable[..., Any])

PROVIDER_KINDS = ("openai", "anthropic", "command", "replay")


def provider_options(function: F) -> F:
    """`--provider`, `--model`, `--base-url` and `--replay-file`, all overriding `[provider]`."""
    options = [
        click.option("--provider", "provider_kind", type=click.Choice(PROVIDER_KINDS),
                     default=None, help="Which provider runs the model (default: provider.kind)."),
        click.option("--model", type=TEXT, default=None,
                     help="Model name (default: route > charter > [agents.NAME] > provider)."),
        click.option("--base-url", type=TEXT, default=None,
                     help="API root, e.g. http://127.0.0.1:11434/v1 for Ollama."),
        click.option("--replay-file", type=click.Path(dir_okay=False, path_type=Path),
                     default=None, help="For --provider replay: the recording to play."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def provider_overrides(provider_kind: str | None, base_url: str | None,
                       replay_file: Path | None, model: str | None = None) -> dict[str, Any]:
    """The `[provider]` settings the flags override (unset flags override nothing)."""
    overrides: dict[str, Any] = {}
    if provider_kind:
        overrides["kind"] = provider_kind
    if base_url:
        overrides["base_url"] = base_url
    if replay_file:
        overrides["replay_file"] = str(replay_file.resolve())
    if model:
        overrides["model"] = model
    return overrides
