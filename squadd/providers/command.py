"""The `command` provider: an agent CLI (`claude -p`, `copilot -p`, ...) run once per turn.

The conversation is rendered to text and handed over on stdin, or as one argv element where an
argument holds `{prompt}` (stdin is then /dev/null); no shell is involved. A prompt too long
for the system's argument limits (128 KiB for one argument on Linux) goes on stdin instead, and
`{prompt}` is taken out of the command. The command runs in its own process group
(`squadd.procs`), which is killed whole on timeout or cancellation.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
import structlog

from squadd.config import ProviderSettings
from squadd.contracts.messages import AssistantMessage, Completion, Message, image_note
from squadd.errors import ProviderError, ProviderTimeoutError
from squadd.procs import Command, run_group
from squadd.providers.arguments import arguments_json
from squadd.providers.base import CompletionRequest

log = structlog.get_logger("squadd.providers")

PROMPT_PLACEHOLDER = "{prompt}"
MAX_ARGUMENT_BYTES = 32 * 4096
"""Linux's limit on one argument (MAX_ARG_STRLEN), its terminating NUL included."""
ARG_HEADROOM_BYTES = 4096
"""Room kept under ARG_MAX for what `exec` adds (the program's path, auxiliary vectors)."""
STDERR_TAIL_BYTES = 4096
DEFAULT_KILL_GRACE_S = 2.0
# After the command's group is gone, how long its output pipes may stay open (held by a process
# that left the group) before squadd stops reading them.
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
            parts.append(f"## {tool} {status} ({message.tool_call_id})\n\n{message.content}"
                         f"{image_note(message.images)}")
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
        env = session_env(request)
        cwd = Path(request.cwd) if request.cwd else self.cwd
        argv, stdin_text = place_prompt(self.command, prompt, env)
        try:
            stdout, stderr, code, truncated = await self._run(argv, stdin_text, env, cwd)
        except OSError as exc:
            if exc.errno != errno.E2BIG or stdin_text is not None:
                raise ProviderError(f"{self.name}: cannot start `{argv[0]}`: {exc}",
                                    provider=self.name) from exc
            # The system's limit was lower than reckoned: the prompt goes on stdin after all.
            argv, stdin_text = without_prompt_argument(self.command), prompt
            try:
                stdout, stderr, code, truncated = await self._run(argv, stdin_text, env, cwd)
            except OSError as again:
                raise ProviderError(f"{self.name}: cannot start `{argv[0]}`: {again}",
                                    provider=self.name) from again
        program = self.command[0]
        if (code is None or code != 0) and not truncated:
            how = ("was killed by signal " + str(-code) if code is not None and code < 0
                   else f"exited with code {code}")
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
                   cwd: Path | None = None) -> tuple[bytes, bytes, int | None, bool]:
        out = _Bounded(self.max_output_bytes)
        err = _Tail(STDERR_TAIL_BYTES)
        command = Command(argv, cwd or self.cwd, env,
                          None if stdin_text is None else stdin_text.encode("utf-8"))
        outcome = await run_group(command, out, err,
                                  deadline=anyio.current_time() + self.timeout_s, cancel=out,
                                  kill_grace_s=self.kill_grace_s, drain_s=_DRAIN_AFTER_EXIT_S)
        if outcome.timed_out:
            raise ProviderTimeoutError(
                f"{self.name}: `{argv[0]}` did not finish within {self.timeout_s:g}s "
                "(provider.command_timeout_s); its process group was killed",
                provider=self.name)
        return bytes(out.data), bytes(err.data), outcome.exit_code, out.truncated


class _Bounded:
    """Keeps the first `limit` bytes of a stream and whether more came; once more came, `wait`
    returns, which stops the command (nothing past the bound is worth waiting for)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.data = bytearray()
        self.truncated = False
        self._full = anyio.Event()

    async def write(self, data: bytes) -> None:
        room = self.limit - len(self.data)
        self.data.extend(data[:max(room, 0)])
        if len(data) > room:
            self.truncated = True
            self._full.set()

    async def wait(self) -> None:
        await self._full.wait()


class _Tail:
    """Keeps the last `limit` bytes of a stream."""

    def __init__(self, limit: int):
        self.limit = limit
        self.data = bytearray()

    async def write(self, data: bytes) -> None:
        self.data.extend(data)
        del self.data[:-self.limit]


def _arg_max() -> int:
    try:
        return int(os.sysconf("SC_ARG_MAX"))
    except (ValueError, OSError):
        return 131072


def argv_fits(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether `exec` takes these arguments: each within the system's limit for one argument
    (128 KiB on Linux), and all of them with the environment within `ARG_MAX`."""
    sizes = [len(arg.encode("utf-8", "surrogateescape")) + 1 for arg in argv]
    if max(sizes, default=0) > MAX_ARGUMENT_BYTES:
        return False
    environment = sum(len(k.encode("utf-8", "surrogateescape"))
                      + len(v.encode("utf-8", "surrogateescape")) + 2 for k, v in env.items())
    pointers = 8 * (len(argv) + len(env) + 2)
    return sum(sizes) + environment + pointers + ARG_HEADROOM_BYTES <= _arg_max()


def without_prompt_argument(command: Sequence[str]) -> list[str]:
    """The command with `{prompt}` taken out: an argument that is only `{prompt}` is dropped,
    and other text around a `{prompt}` is kept."""
    return [arg.replace(PROMPT_PLACEHOLDER, "") for arg in command if arg != PROMPT_PLACEHOLDER]


def place_prompt(command: Sequence[str], prompt: str,
                 env: Mapping[str, str]) -> tuple[list[str], str | None]:
    """The argv to run and the text for stdin (None: stdin is /dev/null).

    The prompt goes in place of `{prompt}` when the command has one and the result fits the
    system's argument limits; otherwise it goes on stdin (and `{prompt}` is taken out).
    """
    if not any(PROMPT_PLACEHOLDER in arg for arg in command):
        return list(command), prompt
    argv = [arg.replace(PROMPT_PLACEHOLDER, prompt) for arg in command]
    if argv_fits(argv, env):
        return argv, None
    log.info("command.prompt_on_stdin", program=command[0],
             prompt_bytes=len(prompt.encode("utf-8")))
    return without_prompt_argument(command), prompt
