"""The command provider: a real agent CLI stand-in run as a subprocess."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest

from squadd.config import ProviderSettings
from squadd.contracts.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from squadd.errors import ConfigError, ProviderError, ProviderTimeoutError
from squadd.providers.base import CompletionRequest
from squadd.providers.command import CommandProvider, render_prompt
from squadd.providers.factory import make_provider
from tests.providers._shared import ask

PY = sys.executable


def _group_members(pgid: int) -> list[int]:
    """Processes of group `pgid` still alive (a zombie is dead: reaping it is init's job)."""
    alive = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def wait_until_group_gone(pgid: int, within_s: float = 60.0) -> None:
    """Fails unless no live process of group `pgid` is left within `within_s` (a bound for a
    loaded machine, where a killed process may wait a while in the kernel before it ends)."""
    deadline = time.monotonic() + within_s
    while _group_members(pgid):
        if time.monotonic() > deadline:
            pytest.fail(f"process group {pgid} still has {_group_members(pgid)} "
                        f"{within_s}s after the kill")
        time.sleep(0.05)


def test_the_prompt_renders_system_first_then_every_message() -> None:
    prompt = render_prompt([
        UserMessage(content="Pick a database."),
        SystemMessage(content="You are lead."),
        AssistantMessage(content="Deciding.",
                tool_calls=[ToolCall(id="c1", name="squad_decide", arguments={"title": "PG"})]),
        ToolMessage(tool_call_id="c1", name="squad_decide", content="written"),
        ToolMessage(tool_call_id="c2", content="boom", is_error=True),
    ])
    assert prompt == (
        "You are lead.\n\n## User\n\nPick a database.\n\n## Assistant\n\nDeciding.\n"
        '[called tool squad_decide with {"title": "PG"}]\n\n'
        "## Tool squad_decide result (c1)\n\nwritten\n\n## Tool failed (c2)\n\nboom\n")


async def test_the_prompt_goes_on_stdin_when_no_argument_holds_the_placeholder() -> None:
    provider = CommandProvider(
        [PY, "-c", "import sys; print(len(sys.argv), sys.stdin.read().upper())"],
        timeout_s=30)
    completion = await provider.complete(ask("pick a database"))
    assert completion.text == "1 " + render_prompt(ask("pick a database").messages).upper(
        ).strip()
    assert completion.stop_reason == "end" and completion.tool_calls == []
    assert completion.model == Path(PY).name


async def test_the_placeholder_becomes_one_argument_and_stdin_is_dev_null() -> None:
    script = ("import os, sys; print(repr(sys.argv[1:])); "
              "print(os.path.samestat(os.fstat(0), os.stat('/dev/null')))")
    provider = CommandProvider([PY, "-c", script, "--prompt={prompt}", "-q"], timeout_s=30)
    request = CompletionRequest(messages=[UserMessage(content="a; rm -rf / $(id) 'x'")])
    completion = await provider.complete(request)
    argv_line, stdin_line = completion.text.splitlines()
    assert argv_line == repr([f"--prompt={render_prompt(request.messages)}", "-q"])
    assert stdin_line == "True"


SHOW_INPUT = ("import sys; data = sys.stdin.read(); "
              "print(repr(sys.argv[1:])); print(len(data)); print(data[-40:] == EXPECT_END)")


@pytest.mark.parametrize("size", [200 * 1024, 3 * 1024 * 1024], ids=["one-arg", "arg-max"])
async def test_a_prompt_past_the_argument_limit_goes_on_stdin(size: int) -> None:
    # 200 KiB passes Linux's limit for one argument; 3 MiB passes ARG_MAX as well.
    request = CompletionRequest(messages=[UserMessage(content="x" * size + " end")])
    prompt = render_prompt(request.messages)
    script = SHOW_INPUT.replace("EXPECT_END", repr(prompt[-40:]))
    for command, kept in (([PY, "-c", script, "-p", "{prompt}"], ["-p"]),
                          ([PY, "-c", script, "-p", "--prompt={prompt}"], ["-p", "--prompt="])):
        completion = await CommandProvider(command, timeout_s=60).complete(request)
        argv_line, stdin_length, whole = completion.text.splitlines()
        assert argv_line == repr(kept)  # `{prompt}` taken out: dropped when it was all
        assert int(stdin_length) == len(prompt) and whole == "True"


async def test_a_prompt_within_the_limit_stays_an_argument() -> None:
    request = CompletionRequest(messages=[UserMessage(content="y" * 100_000)])
    script = "import sys; print(len(sys.argv[-1]), len(sys.stdin.read()))"
    completion = await CommandProvider([PY, "-c", script, "{prompt}"],
                                       timeout_s=60).complete(request)
    assert completion.text == f"{len(render_prompt(request.messages))} 0"


async def test_a_non_zero_exit_names_the_code_and_the_tail_of_stderr() -> None:
    provider = CommandProvider(
        ["sh", "-c", "i=0; while [ $i -lt 500 ]; do echo noise $i >&2; i=$((i+1)); done; "
                     "echo 'model quota exhausted' >&2; exit 3"], timeout_s=30)
    with pytest.raises(ProviderError) as caught:
        await provider.complete(ask())
    message = str(caught.value)
    assert message.startswith("command: `sh` exited with code 3: ")
    assert message.endswith("model quota exhausted") and "noise 0\n" not in message


async def test_a_missing_program_is_a_provider_error() -> None:
    provider = CommandProvider(["squadd-no-such-agent-cli", "{prompt}"], timeout_s=5)
    with pytest.raises(ProviderError, match="cannot start `squadd-no-such-agent-cli`"):
        await provider.complete(ask())


async def test_output_beyond_the_bound_is_cut_and_said_so() -> None:
    provider = CommandProvider([PY, "-c", "print('x' * 300_000)"], timeout_s=30,
                               max_output_bytes=1024)
    completion = await provider.complete(ask())
    assert completion.text == "x" * 1024 + "\n[output cut at 1024 bytes]"
    assert completion.stop_reason == "max_tokens"


@pytest.mark.slow
async def test_a_timeout_kills_the_whole_process_group_grandchildren_included(
        tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    provider = CommandProvider(
        ["sh", "-c", f"sleep 60 & echo $$ $! > {pidfile}; sleep 60"], timeout_s=3.0,
        kill_grace_s=2.0)
    started = time.monotonic()
    with pytest.raises(ProviderTimeoutError, match=r"did not finish within 3s"):
        await provider.complete(ask())
    assert time.monotonic() - started < 50  # not waiting for the 60 s sleeps
    leader, grandchild = (int(p) for p in pidfile.read_text().split())
    wait_until_group_gone(leader)
    assert not _exists(grandchild)


@pytest.mark.slow
async def test_cancelling_a_turn_kills_the_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    provider = CommandProvider(
        ["sh", "-c", f"sleep 60 & echo $$ > {pidfile}; sleep 60"], timeout_s=60)
    with anyio.CancelScope() as scope:
        async def cancel_once_started() -> None:
            while not pidfile.exists() or not pidfile.read_text().strip():  # noqa: ASYNC110
                await anyio.sleep(0.02)
            scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(cancel_once_started)
            await provider.complete(ask())
    assert scope.cancelled_caught
    wait_until_group_gone(int(pidfile.read_text()))


@pytest.mark.slow
async def test_a_child_left_holding_stdout_does_not_keep_the_turn_waiting(
        tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    provider = CommandProvider(
        ["sh", "-c", f"echo $$ > {pidfile}; echo answer; sleep 60 &"], timeout_s=30)
    started = time.monotonic()
    completion = await provider.complete(ask())
    assert completion.text == "answer"
    assert time.monotonic() - started < 50  # not waiting for the 60 s sleep
    wait_until_group_gone(int(pidfile.read_text()))


def test_make_provider_builds_the_command_provider_from_settings() -> None:
    provider = make_provider(ProviderSettings(kind="command", command=["claude", "-p",
                                                                        "{prompt}"],
                                              command_timeout_s=42,
                                              command_max_output_bytes=2048))
    assert isinstance(provider, CommandProvider)
    assert (provider.command, provider.timeout_s, provider.max_output_bytes) == (
        ["claude", "-p", "{prompt}"], 42, 2048)
    with pytest.raises(ConfigError, match=r"provider\.command"):
        make_provider(ProviderSettings(kind="command"))


def _exists(pid: int) -> bool:
    """Whether `pid` still runs (a zombie has ended: reaping it is init's job)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_the_command_learns_its_agent_and_session_for_squadd_mcp() -> None:
    script = "import os; print(os.environ['SQUADD_AGENT'], os.environ['SQUADD_SESSION_ID'])"
    provider = CommandProvider([PY, "-c", script], timeout_s=30)
    request = CompletionRequest(messages=[UserMessage(content="hi")], agent="lead",
                                session_id="20261126-000000-abcd1234")
    completion = await provider.complete(request)
    assert completion.text == "lead 20261126-000000-abcd1234"
