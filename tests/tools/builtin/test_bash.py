"""`bash`: runs in the workspace, streams progress, spills long output, stops its whole tree,
keeps squadd's secrets out of the command's environment, and asks for approval by default."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from squadd.config import Settings
from squadd.contracts.events import BaseEvent, ToolCompleted, ToolUpdated
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.tools.approvals import approval_policy
from squadd.tools.base import CancelSignal
from squadd.tools.builtin.bash import Bash
from squadd.tools.invoke import CallOrigin
from tests.tools.builtin.conftest import Calls


def _running(token: str) -> list[int]:
    """The pids (as this host sees them) of live processes whose command line holds `token`:
    the sandbox's PID namespace gives a command pids of its own, so it cannot report them."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "status").read_text(encoding="utf-8")
        except (OSError, ValueError):
            continue
        if token.encode() in cmdline and "\nState:\tZ" not in status:
            found.append(int(entry.name))
    return found


async def test_runs_in_the_workspace_and_reports_the_exit_code(calls: Calls,
                                                               repo: Path) -> None:
    done = await calls("bash", command="pwd")
    assert done.ok and done.text == f"{repo.resolve()}\n[exit code 0]"
    assert done.details["exit_code"] == 0
    failed = await calls("bash", command="echo oops >&2; exit 3")
    assert not failed.ok and failed.text == "oops\n[exit code 3]"


async def test_output_streams_to_tool_updated_before_the_call_completes(calls: Calls) -> None:
    result = await calls("bash", command="echo one; echo two")
    assert result.ok
    kinds = [(type(e).__name__, getattr(e, "message", "")) for e in calls.events
             if isinstance(e, ToolUpdated | ToolCompleted)]
    updates = [message for kind, message in kinds if kind == "ToolUpdated"]
    assert updates and updates[-1] == "two"
    assert kinds[-1][0] == "ToolCompleted"


async def test_long_output_is_spilled_to_a_file(repo: Path) -> None:
    settings = Settings.model_validate({"tools": {"max_output_bytes": 1024,
                                                  "max_output_lines": 50}})
    calls = Calls(SquadLayout.at(repo / ".squad"), settings)
    result = await calls("bash", command="seq 1 5000")
    assert result.ok
    assert "[output truncated" in result.text and result.text.endswith("[exit code 0]")
    spilled = Path(result.details["full_output"])
    assert spilled.read_text(encoding="utf-8") == "".join(f"{n}\n" for n in range(1, 5001))


async def test_timeout_stops_the_command(calls: Calls) -> None:
    result = await calls("bash", command="sleep 30", timeout=0.5)
    assert not result.ok
    assert result.text.endswith(
        "[timed out after 0.5s: the command and its children were stopped]")
    assert result.details["timed_out"] is True


async def test_a_timeout_over_the_most_allowed_is_refused(calls: Calls) -> None:
    result = await calls("bash", command="true", timeout=5000)
    assert not result.ok and "workspace_tools.bash_max_timeout_s" in result.text


async def test_cancel_kills_the_whole_process_tree(calls: Calls, repo: Path) -> None:
    cancel = CancelSignal()
    token = f"squadd-test-sleeper-{os.getpid()}"
    seen: list[int] = []

    def publish(event: BaseEvent) -> None:
        calls.events.append(event)
        if isinstance(event, ToolUpdated) and "ready" in event.message:
            seen.extend(_running(token))
            cancel.set()

    calls.invoker.sink = type("Sink", (), {"publish": staticmethod(publish)})()
    command = (f"(exec -a {token} sleep 60) & until pgrep -f {token} >/dev/null; "
               "do sleep 0.05; done; echo ready; wait")
    call = ToolCall(id="c-1", name="bash", arguments={"command": command})
    with anyio.fail_after(30):
        result = await calls.invoker.invoke(calls.tools, call, CallOrigin(
            session_id="s-1", agent="fenster", cancel=cancel))
    assert not result.ok and "[cancelled: the command and its children were stopped]" \
        in result.text
    assert seen, "the sleeper never ran"
    assert not _running(token)


async def test_squadds_secrets_are_not_in_the_commands_environment(
        calls: Calls, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret")
    monkeypatch.setenv("SOME_TOKEN", "tok-secret")
    monkeypatch.setenv("PLAIN_SETTING", "visible")
    result = await calls("bash", command="env")
    assert "sk-very-secret" not in result.text and "tok-secret" not in result.text
    assert "PLAIN_SETTING=visible" in result.text
    assert f"PATH={os.environ['PATH']}" in result.text


def test_bash_asks_by_default_and_the_read_only_tools_are_allowed() -> None:
    from squadd.tools.builtin import workspace_tools

    policy = {t.name: approval_policy(t, {}).approval for t in workspace_tools(Settings())}
    assert policy["bash"] == "ask"
    assert policy["read"] == policy["find"] == policy["grep"] == "allow"
    assert approval_policy(Bash(Settings()), {"bash": "allow"}).approval == "allow"
