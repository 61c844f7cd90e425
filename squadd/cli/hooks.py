"""`squadd hooks`: the hooks a squad runs (`.squad/hooks.json`, and `.claude/settings.json` with
`hooks.import_claude`), checked as the daemon reads them, with what it skips and why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from squadd.cli._output import print_json, print_table
from squadd.cli._squad import dir_option, find_layout
from squadd.errors import ConfigError, StateError


@click.command("hooks")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@dir_option
def hooks(as_json: bool, directory: Path | None) -> None:
    """List the hooks this squad runs, by event, and check their files.

    Hooks use Claude Code's format (docs/hooks.md). A file that cannot be used is an error
    naming the file and the place in it (exit status 1).

    \b
    Example:
      squadd hooks
      squadd hooks --json | jq '.hooks[] | select(.event == "PreToolUse")'
    """
    from squadd.config import load_settings
    from squadd.tools.hooks.config import EVENTS, HooksSource

    layout = find_layout(directory)
    settings = load_settings(layout.root)
    source = HooksSource(layout, import_claude=settings.hooks.import_claude)
    try:
        files = source.files()
    except (ConfigError, StateError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    rows: list[dict[str, Any]] = []
    ignored: list[str] = []
    for hooks_file in files:
        ignored.extend(hooks_file.ignored)
        for event in EVENTS:
            for group in hooks_file.events.get(event, ()):
                for hook in group.hooks:
                    rows.append({"event": event, "matcher": group.matcher or "*",
                                 "command": hook.command,
                                 "timeout_s": hook.timeout_s or settings.hooks.timeout_s,
                                 "source": hook.source})
    if as_json:
        print_json({"hooks": rows, "ignored": ignored,
                    "import_claude": settings.hooks.import_claude,
                    "fail_closed": settings.hooks.fail_closed})
        return
    if not rows:
        click.echo(f"no hooks: write them in {layout.hooks_json} (docs/hooks.md)"
                   + ("" if settings.hooks.import_claude else
                      ", or set hooks.import_claude = true to run .claude/settings.json's"))
    else:
        print_table(["EVENT", "MATCHER", "COMMAND", "TIMEOUT", "FROM"],
                    [[r["event"], r["matcher"], r["command"][:60], f"{r['timeout_s']:g}s",
                      r["source"]] for r in rows])
    for note in ignored:
        click.echo(f"skipped: {note}")
