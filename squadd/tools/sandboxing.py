"""The sandbox policy of a tool call, a setup command or a land check, from the settings.

The one place `[sandbox]` and `[agents.NAME] network` become a `SandboxPolicy` (the sandbox
package itself reads no setting).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from squadd.config import Settings
from squadd.sandbox import SandboxPolicy, build_policy
from squadd.tools.base import ToolContext


def policy_for(settings: Settings, *, agent: str, workspace: Path, repo: Path,
               squad_dir: Path) -> SandboxPolicy:
    """The policy a command of `agent`'s, run in `workspace`, runs under."""
    box = settings.sandbox
    own = settings.agents.get(agent)
    network = own.network if own is not None and own.network is not None else box.network
    policy = build_policy(mode=box.mode, network=network == "on", workspace=workspace,
                          repo=repo, squad_dir=squad_dir, writable=box.writable,
                          deny_read=box.deny_read, max_processes=box.max_processes,
                          max_file_bytes=box.max_file_mb << 20)
    if own is not None and own.network is not None:
        return dataclasses.replace(policy, extra=(("network_from", f"agents.{agent}.network"),))
    return policy


def call_policy(settings: Settings, ctx: ToolContext) -> SandboxPolicy:
    """The policy of one tool call: its session's workspace, its agent's network."""
    return policy_for(settings, agent=ctx.agent, workspace=ctx.workspace, repo=ctx.repo_dir,
                      squad_dir=ctx.squad_dir)
