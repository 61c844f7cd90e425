"""The sandbox policy of a tool call or a land check, from the settings and the charter.

The one place `[sandbox]`, `[agents.NAME] network` and a charter's `## Sandbox` section become a
`SandboxPolicy` (the sandbox package itself reads no setting). An agent's network:
`[agents.NAME] network` > its charter's `## Sandbox` (a line such as `network: on`) >
`sandbox.network`.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Literal

from squadd.config import Settings
from squadd.contracts.names import safe_name
from squadd.errors import SquaddError
from squadd.sandbox import SandboxPolicy, build_policy
from squadd.state.charters import split_sections
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolContext

_NETWORK_LINE = re.compile(r"^\W*network\W+(on|off)\b", re.IGNORECASE | re.MULTILINE)


def charter_network(squad_dir: Path, agent: str) -> Literal["on", "off"] | None:
    """`network: on|off` in the `## Sandbox` section of `agent`'s charter, or None."""
    layout = SquadLayout.at(squad_dir)
    try:
        sections = split_sections(layout.read_text(layout.charter(safe_name(agent))))
    except (OSError, SquaddError, UnicodeDecodeError):
        return None
    match = _NETWORK_LINE.search(sections.get("sandbox", ""))
    return None if match is None else "on" if match.group(1).lower() == "on" else "off"


def policy_for(settings: Settings, *, agent: str, workspace: Path, repo: Path,
               squad_dir: Path) -> SandboxPolicy:
    """The policy a command of `agent`'s, run in `workspace`, runs under."""
    box = settings.sandbox
    own = settings.agents.get(agent)
    network, source = box.network, "sandbox.network"
    if own is not None and own.network is not None:
        network, source = own.network, f"agents.{agent}.network"
    elif (chartered := charter_network(squad_dir, agent)) is not None:
        network, source = chartered, f"charter of {agent} (## Sandbox)"
    policy = build_policy(mode=box.mode, network=network == "on", workspace=workspace,
                          repo=repo, squad_dir=squad_dir, writable=box.writable,
                          deny_read=box.deny_read, max_processes=box.max_processes,
                          max_file_bytes=box.max_file_mb << 20)
    if source != "sandbox.network":
        return dataclasses.replace(policy, extra=(("network_from", source),))
    return policy


def call_policy(settings: Settings, ctx: ToolContext) -> SandboxPolicy:
    """The policy of one tool call: its session's workspace, its agent's network."""
    return policy_for(settings, agent=ctx.agent, workspace=ctx.workspace, repo=ctx.repo_dir,
                      squad_dir=ctx.squad_dir)
