"""`squadd mcp` (serve the squad's tools to an MCP client over stdio, through the daemon) and
`squadd mcp-config` (print what to paste into Claude Code, Copilot CLI or OpenCode).
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from squadd.cli._squad import TEXT, dir_option, find_layout
from squadd.contracts.names import safe_name
from squadd.state.layout import safe_id

SERVER_KEY = "squadd"
"""The name the squadd server gets in each client's configuration."""
CLIENTS = ("claude", "copilot", "opencode")
LOG_LEVELS = ("debug", "info", "warning", "error")


@click.command("mcp")
@click.option("--agent", type=TEXT, default=None, metavar="NAME", envvar="SQUADD_AGENT",
              help="Make the tool calls as this agent (default: $SQUADD_AGENT, which a "
                   "command-provider session sets, else user).")
@click.option("--session", "session_id", type=TEXT, default=None, metavar="ID",
              envvar="SQUADD_SESSION_ID",
              help="Make the tool calls from this session, so routes nest under it "
                   "(default: $SQUADD_SESSION_ID, which a command-provider session sets).")
@click.option("--log-level", type=click.Choice(LOG_LEVELS), default="warning",
              show_default=True, help="What to log on stderr (stdout carries the protocol).")
@dir_option
def mcp(agent: str | None, session_id: str | None, log_level: str,
        directory: Path | None) -> None:
    """Serve the squad's tools to an MCP client on stdin/stdout.

    Every tool of this repo's daemon (the squad tools and the custom tools) is offered with
    its JSON schema, and every call runs in the daemon. Start the daemon first with
    'squadd serve'; without one, each call fails with a message that says so.
    'squadd mcp-config --client NAME' prints the configuration for Claude Code, Copilot CLI
    and OpenCode.

    \b
    Examples:
      squadd mcp
      squadd mcp --dir ~/src/my-repo --agent lead
    """
    import anyio

    from squadd.logs import configure_logging
    from squadd.mcp_server import serve_stdio
    from squadd.tools.secrets import SecretRegistry

    layout = find_layout(directory)
    if agent is not None:
        agent = safe_name(agent)
    if session_id is not None:
        session_id = safe_id(session_id)
    # Every call runs in the daemon, which resolves (and redacts) the secrets: none come here.
    configure_logging(redact=SecretRegistry().redact_log_event, console_level=log_level)
    anyio.run(functools.partial(serve_stdio, layout, agent=agent, session_id=session_id))


def squadd_command() -> list[str]:
    """How to start this squadd by absolute path: its script beside this Python, else the
    one on PATH, else `python -m squadd`."""
    beside = Path(sys.executable).parent / "squadd"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("squadd")
    if found:
        return [str(Path(found).absolute())]
    return [sys.executable, "-m", "squadd"]


def server_command(repo: Path | None) -> list[str]:
    """The argv a client runs: absolute paths for `repo`, or (None) `squadd mcp` as it is,
    found on PATH and run in the client's working directory."""
    if repo is None:
        return ["squadd", "mcp"]
    return [*squadd_command(), "mcp", "--dir", str(repo)]


def client_config(client: str, argv: list[str]) -> dict[str, Any]:
    """The JSON `client` reads for one local (stdio) MCP server named `squadd`."""
    if client == "claude":
        return {"mcpServers": {SERVER_KEY: {"command": argv[0], "args": argv[1:]}}}
    if client == "copilot":
        return {"mcpServers": {SERVER_KEY: {"type": "local", "command": argv[0],
                                            "args": argv[1:], "tools": ["*"]}}}
    if client == "opencode":
        return {"$schema": "https://opencode.ai/config.json",
                "mcp": {SERVER_KEY: {"type": "local", "command": argv, "enabled": True}}}
    raise click.BadParameter(f"unknown client {client!r} (known: {', '.join(CLIENTS)})",
                             param_hint="--client")


def where_to_paste(client: str, argv: list[str], portable: bool) -> tuple[list[str], list[str]]:
    """Lines to show before and after the JSON for `client`."""
    if client == "claude":
        add = shlex.join(["claude", "mcp", "add", "--scope",
                          "project" if portable else "local", SERVER_KEY, "--", *argv])
        mine = "" if portable else " (a setting of your own, kept in ~/.claude.json)"
        return ([f"Claude Code: run this in the repository{mine}:", "", f"  {add}", "",
                 "or put this in .mcp.json at the repository's root"
                 + (" (commit it: it has no machine paths):" if portable else ":")],
                ["", "Check with 'claude mcp list', or /mcp inside Claude Code."])
    if client == "copilot":
        return (["Copilot CLI: add the \"squadd\" entry to the mcpServers of "
                 "~/.copilot/mcp-config.json (or of .mcp.json at the repository's root):"],
                ["", "Check with /mcp show inside copilot."])
    return (["OpenCode: merge this into opencode.json at the repository's root (or into "
             "~/.config/opencode/opencode.json):"],
            ["", "Check with 'opencode mcp list'."])


@click.command("mcp-config")
@click.option("--client", type=click.Choice(CLIENTS), required=True,
              help="The MCP client to configure.")
@click.option("--portable", is_flag=True,
              help="Run 'squadd mcp' from PATH in the client's working directory, with no "
                   "machine paths: for a file committed to the repository.")
@click.option("--json", "as_json", is_flag=True,
              help="Print only the JSON (e.g. to write it to the file).")
@dir_option
def mcp_config(client: str, portable: bool, as_json: bool, directory: Path | None) -> None:
    """Print the configuration that connects an MCP client to this repo's squad.

    The client then starts 'squadd mcp', which offers the squad's tools and runs them in this
    repo's daemon ('squadd serve' must be running). By default the snippet holds the absolute
    path of this squadd and of the repository.

    \b
    Examples:
      squadd mcp-config --client claude
      squadd mcp-config --client opencode --portable
      squadd mcp-config --client claude --portable --json > .mcp.json
    """
    repo = None if portable else find_layout(directory).repo
    argv = server_command(repo)
    snippet = json.dumps(client_config(client, argv), indent=2)
    if as_json:
        click.echo(snippet)
        return
    before, after = where_to_paste(client, argv, portable)
    for line in [*before, "", snippet, *after]:
        click.echo(line)
