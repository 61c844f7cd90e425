"""The `squadd` click group (`main`): it imports each command's module only when it runs.

`COMMANDS` maps a command name to the "module:attribute" of its click command. Errors derived
from `SquaddError` are shown as ``Error: <message>`` with exit code 1, never as a traceback.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from squadd._version import __version__
from squadd.errors import SquaddError

COMMANDS: dict[str, str] = {
    "init": "squadd.cli.init:init",
    "agent": "squadd.cli.agent:agent",
    "doctor": "squadd.cli.doctor:doctor",
    "scribe": "squadd.cli.scribe:scribe",
    "run": "squadd.cli.run:run",
    "tools": "squadd.cli.tools:tools",
    "serve": "squadd.cli.serve:serve",
    "route": "squadd.cli.route:route",
    "status": "squadd.cli.status:status",
    "events": "squadd.cli.events:events",
    "sessions": "squadd.cli.sessions:sessions",
    "stop": "squadd.cli.control:stop",
    "approve": "squadd.cli.control:approve",
    "deny": "squadd.cli.control:deny",
    "reload": "squadd.cli.control:reload",
    "approvals": "squadd.cli.approvals:approvals",
    "var": "squadd.cli.var:var",
    "hooks": "squadd.cli.hooks:hooks",
    "mcp": "squadd.cli.mcp:mcp",
    "mcp-config": "squadd.cli.mcp:mcp_config",
    "demo": "squadd.cli.demo:demo",
    "ui": "squadd.cli.ui:ui",
    "top": "squadd.cli.top:top",
    "land": "squadd.cli.workspaces:land",
    "workspaces": "squadd.cli.workspaces:workspaces",
    "worker": "squadd.cli.worker:worker",
}
"""Every `squadd` command: name -> "module:attribute". Add new commands here."""

CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"],
                                    "max_content_width": 100}


class CommandLoadError(click.ClickException):
    """A registered command's module could not be imported."""


def load_command(name: str) -> click.Command:
    """Import and return the command registered as `name` (a `CommandLoadError` if it fails)."""
    target = COMMANDS[name]
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandLoadError(
            f"the '{name}' command could not be loaded from {module_name}: {exc}"
        ) from exc
    command = getattr(module, attribute, None)
    if not isinstance(command, click.Command):
        raise CommandLoadError(
            f"the '{name}' command is registered as {target}, which is not a click command"
        )
    return command


class LazyGroup(click.Group):
    """A group whose subcommands live in `COMMANDS` and are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        return load_command(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing every command imports every module; one that fails to load is still shown.
        rows = []
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        for name in self.list_commands(ctx):
            try:
                summary = load_command(name).get_short_help_str(limit)
            except CommandLoadError as exc:
                summary = f"(unavailable: {exc.message})"
            rows.append((name, summary))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SquaddError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="squadd",
                      message="%(prog)s %(version)s")
def main() -> None:
    """squadd runs a Squad: a team of AI agents that live in your repository's .squad/ folder.

    \b
    Start a squad in a repository, add agents and check the setup:
      squadd init
      squadd agent add lead --role "Lead"
      squadd agent list
      squadd doctor

    Run 'squadd COMMAND --help' for the details of one command.
    """
