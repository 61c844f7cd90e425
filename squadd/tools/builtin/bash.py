"""`bash`: run a command in the workspace, in its own process group, with a deadline.

It runs on the shell tools' process machinery (`commands.process.run_command`): output streams to
a file and, line by line, to `tool.updated`; on timeout or cancel the whole process tree is
stopped; long output is spilled to `tool-output/{session}/{call}.txt`. squadd's own secrets
(the provider's API key, anything named like a key, token, secret or password) are left out of
the command's environment. It runs in the OS sandbox (`[sandbox]`, docs/sandbox.md); the
result's details record the policy it ran under.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field

from squadd.config import Settings
from squadd.errors import SandboxError
from squadd.state.layout import SquadLayout
from squadd.tools.base import ProgressFn, ToolContext, ToolResult
from squadd.tools.builtin.common import WorkspaceTool
from squadd.tools.commands.environment import command_environment
from squadd.tools.commands.output import Block, OutputSink, model_view, part_id
from squadd.tools.commands.process import DRAIN_S, KILL_GRACE_S, Command, run_command
from squadd.tools.sandboxing import call_policy

PROGRESS_CHARS = 400


class BashArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, description="The bash command line to run")
    timeout: float | None = Field(None, gt=0, description="Seconds it may run (default: the "
                                                          "workspace_tools.bash_timeout_s setting)")


class StreamingSink(OutputSink):
    """An `OutputSink` that also reports each chunk's last line as progress."""

    def __init__(self, *args: Any, progress: ProgressFn, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._report = progress

    async def _put(self, data: bytes) -> None:
        await super()._put(data)
        if data:
            tail = data.rstrip(b"\n").rsplit(b"\n", 1)[-1][-PROGRESS_CHARS:]
            if tail.strip():
                self._report(tail.decode("utf-8", errors="replace"), None)


class Bash(WorkspaceTool[BashArgs]):
    name = "bash"
    label = "Bash"
    description = (
        "Run a bash command in the workspace folder (tests, builds, git, scripts). Output "
        "(stdout and stderr together) comes back with the exit code; long output is cut and "
        "saved to a file you can read. The command is stopped at its timeout."
    )
    args_model = BashArgs
    default_approval = "ask"

    def __init__(self, settings: Settings):
        super().__init__(settings)
        # The invoker's limit is a backstop: the tool stops its processes itself, in time.
        self.timeout_s = self.limits.bash_max_timeout_s + KILL_GRACE_S + 2 * DRAIN_S + 1.0

    async def run(self, args: BashArgs, ctx: ToolContext) -> ToolResult:
        seconds = args.timeout or self.limits.bash_timeout_s
        if seconds > self.limits.bash_max_timeout_s:
            return ToolResult.failure(
                f"bash refused: timeout {seconds:g}s is over the most allowed, "
                f"{self.limits.bash_max_timeout_s:g}s (workspace_tools.bash_max_timeout_s)")
        layout = SquadLayout.at(ctx.squad_dir)
        session = part_id(ctx.session_id, "session id")
        call = part_id(ctx.call_id, "tool call id")
        limits = self.settings.tools
        # Every secret the pipeline knows stays out of the spill file and the progress lines.
        sink = StreamingSink(layout.tool_output_part(session, call, "1"), ctx.known_secrets,
                             limits.max_output_bytes, progress=ctx.progress)
        command = Command(argv=["bash", "-c", args.command], cwd=ctx.workspace,
                          env=command_environment(self.settings, os.environ,
                                                  ctx.hidden_variables))
        try:
            await sink.open()
            try:
                outcome = await run_command(command, sink, deadline=anyio.current_time() +
                                            seconds, cancel=ctx.cancel,
                                            sandbox=call_policy(self.settings, ctx))
            except SandboxError as exc:
                return ToolResult.failure(f"bash refused: {exc}")
            finally:
                with anyio.CancelScope(shield=True):
                    await sink.close()
            view, full_output = await model_view([Block(sink=sink)], layout, session, call,
                                                 limits)
            details: dict[str, Any] = {"exit_code": outcome.exit_code,
                                       "timed_out": outcome.timed_out}
            if full_output is not None:
                details["full_output"] = str(full_output)
            if outcome.sandbox is not None:
                details["sandbox"] = outcome.sandbox
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(sink.discard)
        body = view.rstrip("\n") if view.strip() else "(no output)"
        if outcome.timed_out:
            status = f"[timed out after {seconds:g}s: the command and its children were stopped]"
        elif outcome.cancelled:
            status = "[cancelled: the command and its children were stopped]"
        else:
            status = f"[exit code {outcome.exit_code}]"
        text = f"{body}\n{status}"
        return ToolResult.success(text, **details) if outcome.ok else \
            ToolResult.failure(text, **details)
