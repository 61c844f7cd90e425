"""`squadd mcp-config` prints each client's configuration; `squadd mcp` needs a squad dir."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from squadd.cli.app import main
from squadd.cli.mcp import squadd_command
from squadd.state.layout import SquadLayout


def config_json(squad: SquadLayout, client: str, *extra: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["mcp-config", "--client", client, "--json",
                                       "--dir", str(squad.repo), *extra])
    assert result.exit_code == 0, result.output
    parsed: dict[str, Any] = json.loads(result.output)
    return parsed


def test_claude_config_runs_this_squadd_by_absolute_path_for_the_repo(
        squad: SquadLayout) -> None:
    config = config_json(squad, "claude")
    server = config["mcpServers"]["squadd"]
    assert server["command"] == squadd_command()[0]
    assert Path(server["command"]).is_absolute()
    assert server["args"][-3:] == ["mcp", "--dir", str(squad.repo)]


def test_portable_config_has_no_machine_paths(squad: SquadLayout) -> None:
    config = config_json(squad, "claude", "--portable")
    assert config == {"mcpServers": {"squadd": {"command": "squadd", "args": ["mcp"]}}}


def test_copilot_config_is_a_local_server_with_every_tool(squad: SquadLayout) -> None:
    server = config_json(squad, "copilot")["mcpServers"]["squadd"]
    assert server["type"] == "local"
    assert server["tools"] == ["*"]
    assert [server["command"], *server["args"]] == [*squadd_command(), "mcp", "--dir",
                                                      str(squad.repo)]


def test_opencode_config_is_a_local_command_array(squad: SquadLayout) -> None:
    config = config_json(squad, "opencode")
    server = config["mcp"]["squadd"]
    assert server["type"] == "local" and server["enabled"] is True
    assert server["command"] == [*squadd_command(), "mcp", "--dir", str(squad.repo)]
    assert config["$schema"] == "https://opencode.ai/config.json"


def test_claude_text_gives_the_claude_mcp_add_command(squad: SquadLayout) -> None:
    result = CliRunner().invoke(main, ["mcp-config", "--client", "claude",
                                       "--dir", str(squad.repo)])
    assert result.exit_code == 0, result.output
    add_line = next(line for line in result.output.splitlines()
                    if line.strip().startswith("claude mcp add"))
    argv = shlex.split(add_line)
    assert argv[:6] == ["claude", "mcp", "add", "--scope", "local", "squadd"]
    assert argv[6] == "--" and argv[7:] == [*squadd_command(), "mcp", "--dir", str(squad.repo)]
    assert '"mcpServers"' in result.output


def test_mcp_config_outside_a_squad_names_squadd_init(repo: Path) -> None:
    result = CliRunner().invoke(main, ["mcp-config", "--client", "opencode",
                                       "--dir", str(repo)])
    assert result.exit_code == 1
    assert "squadd init" in result.output


def test_unknown_client_is_refused_with_the_known_ones(squad: SquadLayout) -> None:
    result = CliRunner().invoke(main, ["mcp-config", "--client", "vim",
                                       "--dir", str(squad.repo)])
    assert result.exit_code == 2
    assert "claude" in result.output and "opencode" in result.output


def test_mcp_refuses_a_bad_agent_name_before_serving(squad: SquadLayout) -> None:
    result = CliRunner().invoke(main, ["mcp", "--dir", str(squad.repo), "--agent", "../x"])
    assert result.exit_code == 1
    assert "../x" in result.output


@pytest.mark.skipif(os.name != "posix", reason="executables by path")
def test_squadd_command_is_an_executable_file() -> None:
    command = squadd_command()
    assert os.access(command[0], os.X_OK)
