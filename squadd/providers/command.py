"""The `command` provider: an agent CLI (`claude -p`, `copilot -p`, ...) run once per turn.

The conversation is rendered to text and handed over on stdin, or as one argv element where an
argument holds `{prompt}` (stdin is then /dev/null); no shell is involved. The command runs in
its own process group, which is killed whole on timeout or cancellation.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.abc
import structlog

from squadd.config import ProviderSettings
from squadd.contracts.messages import AssistantMessage, Completion, Message
from squadd.errors import ProviderError, ProviderTimeoutError
from squadd.providers.arguments import arguments_json
from squadd.providers.base import CompletionRequest

log = structlog.get_logger("squadd.providers")

PROMPT_PLACEHOLDER = "{prompt}"
STDERR_TAIL_BYTES = 4096
DEFAULT_KILL_GRACE_S = 2.0
# After the command exits, how long its output pipes may stay open (held by a process it left
# behind) before the rest of its group is killed.
_DRAIN_AFTER_EXIT_S = 2.0


def render_prompt(messages: Sequence[Message]) -> str:
    """The conversation as plain text: system first, then each message under its role."""
    system = [m.content for m in messages if m.role == "system" and m.content]
    parts = ["\n\n".join(system)] if system else []
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "tool":
            status = "failed" if message.is_error else "result"
            tool = f"Tool {message.name}" if message.name else "Tool"
            parts.append(f"## {tool} {status} ({message.tool_call_id})\n\n{message.content}")
            continue
        lines = [message.content] if message.content else []
        calls = message.tool_calls if isinstance(message, AssistantMessage) else []
        lines += [f"[called tool {c.name} with {arguments_json(c)}]" for c in calls]
        parts.append(f"## {message.role.capitalize()}\n\n" + "\n".join(lines))
    return "\n\n".join(parts) + "\n"


AGENT_ENV = "SQUADD_AGENT"
SESSION_ENV = "SQUADD_SESSION_ID"


def session_env(request: CompletionRequest) -> dict[str, str]:
    """The command's environment: ours, plus who is asking, so that a `squadd mcp` the agent
    CLI starts makes its tool calls as this agent, from this session."""
    env = dict(os.environ)
    if request.agent:
        env[AGENT_ENV] = request.agent
    if request.session_id:
        env[SESSION_ENV] = request.session_id
    return env


class CommandProvider:
    """Runs `command` for each turn; its stripped stdout is the answer (no tool calls)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        timeout_s: float = 600.0,
        max_output_bytes: int = 1_048_576,
        kill_grace_s: float = DEFAULT_KILL_GRACE_S,
        cwd: Path | None = None,
        model: str = "",
        name: str = "command",
    ):
        if not command or not command[0]:
            raise ProviderError(
                f"{name}: no command to run: set provider.command, e.g. "
                '["claude", "-p", "{prompt}"]', provider=name)
        self.command = list(command)
        self.timeout_s = timeout_s
        self.max_output_bytes = max_output_bytes
        self.kill_grace_s = kill_grace_s
        self.cwd = cwd
        self.name = name
        self.default_model = model or Path(self.command[0]).name

    @classmethod
    def from_settings(cls, settings: ProviderSettings, *, cwd: Path | None = None,
                      ) -> CommandProvider:
        return cls(settings.command, timeout_s=settings.command_timeout_s,
                   max_output_bytes=settings.command_max_output_bytes, cwd=cwd,
                   model=settings.model)

    async def complete(self, request: CompletionRequest) -> Completion:
        """Run the command once for this turn; its stdout is the answer."""
        prompt = render_prompt(request.messages)
        placed = any(PROMPT_PLACEHOLDER in arg for arg in self.command)
        argv = [arg.replace(PROMPT_PLACEHOLDER, prompt) for arg in self.command]
        stdout, stderr, code, truncated = await self._run(
            argv, None if placed else prompt, session_env(request),
            cwd=Path(request.cwd) if request.cwd else self.cwd)
        program = self.command[0]
        if code != 0:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            tail = stderr.decode("utf-8", errors="replace").strip()[-2000:]
            raise ProviderError(
                f"{self.name}: `{program}` {how}: {tail or '(nothing on stderr)'}",
                provider=self.name)
        text = stdout.decode("utf-8", errors="replace").strip()
        if truncated:
            text += f"\n[output cut at {self.max_output_bytes} bytes]"
        return Completion(text=text, stop_reason="max_tokens" if truncated else "end",
                          model=request.model or self.default_model)

    async def aclose(self) -> None:
        return None

    async def _run(self, argv: list[str], stdin_text: str | None,
                   env: dict[str, str] | None = None,
                   cwd: Path | None = None) -> tuple[bytes, bytes, int, bool]:
        out = bytearray()
        err = bytearray()
        truncated = False

        async def read_stdout(stream: anyio.abc.ByteReceiveStream) -> None:
            nonlocal truncated
            async for chunk in stream:
                room = self.max_output_bytes - len(out)
                out.extend(chunk[:max(room, 0)])
                truncated = truncated or len(chunk) > room

        async def read_stderr(stream: anyio.abc.ByteReceiveStream) -> None:
            async for chunk in stream:
                err.extend(chunk)
                del err[:-STDERR_TAIL_BYTES]

        async def feed(stream: anyio.abc.ByteSendStream, data: bytes) -> None:
            # A command that exits without reading its stdin is not an error.
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError,
                                     BrokenPipeError, ConnectionResetError):
                await stream.send(data)
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError,
                                     BrokenPipeError, ConnectionResetError):
                await stream.aclose()

        try:
            process = await anyio.open_process(
                argv, stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                start_new_session=True, env=env)
        except OSError as exc:
            raise ProviderError(f"{self.name}: cannot start `{argv[0]}`: {exc}",
                                provider=self.name) from exc
        try:
            with anyio.fail_after(self.timeout_s):
                async with anyio.create_task_group() as tasks:
                    assert process.stdout is not None and process.stderr is not None
                    tasks.start_soon(read_stdout, process.stdout)
                    tasks.start_soon(read_stderr, process.stderr)
                    if stdin_text is not None and process.stdin is not None:
                        tasks.start_soon(feed, process.stdin, stdin_text.encode("utf-8"))
                    await process.wait()
                    # Output pipes a left-behind child still holds must not keep us waiting.
                    if not await _wait_group_gone(process.pid, _DRAIN_AFTER_EXIT_S):
                        _signal_group(process.pid, signal.SIGKILL)
        except TimeoutError:
            raise ProviderTimeoutError(
                f"{self.name}: `{argv[0]}` did not finish within {self.timeout_s:g}s "
                "(provider.command_timeout_s); its process group was killed",
                provider=self.name) from None
        finally:
            with anyio.CancelScope(shield=True):
                await self._kill_group(process)
        assert process.returncode is not None
        return bytes(out), bytes(err), process.returncode, truncated

    async def _kill_group(self, process: anyio.abc.Process) -> None:
        """SIGTERM the whole group, SIGKILL what is left after the grace, reap the leader."""
        pgid = process.pid  # start_new_session: the leader's pid is the group id
        if _group_alive(pgid):
            _signal_group(pgid, signal.SIGTERM)
            if not await _wait_group_gone(pgid, self.kill_grace_s):
                log.warning("command.sigkill", provider=self.name, pgid=pgid)
                _signal_group(pgid, signal.SIGKILL)
        with anyio.move_on_after(self.kill_grace_s):
            await process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.aclose()


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (zombies waiting to be reaped do not)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # it ended while we looked
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


async def _wait_group_gone(pgid: int, within_s: float) -> bool:
    """Wait until no process of group `pgid` runs; False if some still do after `within_s`."""
    deadline = anyio.current_time() + within_s
    while True:
        if not _group_alive(pgid):
            return True
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(0.02)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
