"""Session-level hooks through the runtime: what SessionStart and UserPromptSubmit add reaches
the model, a blocked task never reaches it (and Stop still fires), PreLand keeps a branch off
main, PostLand hears the landing, Notification hooks hear `SquadRuntime.notify`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from squadd.config import PoolSettings, SandboxSettings, Settings, load_settings
from squadd.contracts.messages import Completion
from squadd.contracts.routes import RouteRequest
from squadd.providers.base import CompletionRequest
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import SquadLayout
from tests.runtime.scripted import call, eventually, make_squad, script, text
from tests.support.hook_scripts import RECORDER, REPLY, command_hook, recorded
from tests.support.hook_scripts import script as hook
from tests.workspaces.conftest import git

UNCONFINED = Settings(sandbox=SandboxSettings(mode="off"))
"""These tests keep their hook scripts and logs in tmp_path, which a sandboxed hook cannot see
(its /tmp is its own): tests/tools/hooks has the sandbox's test."""


class Capture:
    """A provider that keeps each request it is sent and answers from a replay script."""

    def __init__(self, **turns: Any):
        self.inner = script(**turns)
        self.name = "capture"
        self.default_model = "replay"
        self.requests: list[CompletionRequest] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _hooks(layout: SquadLayout, table: dict[str, list[dict[str, Any]]]) -> None:
    layout.hooks_json.write_text(json.dumps({"hooks": table}), encoding="utf-8")


def _say(folder: Path, name: str, text_out: str, exit_code: int = 0) -> str:
    kept = folder / f"{name}.txt"
    kept.write_text(text_out, encoding="utf-8")
    return f"{hook(folder, 'reply.py', REPLY)} {kept} {exit_code}"


async def test_what_session_start_and_user_prompt_submit_add_reaches_the_model(
        tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    _hooks(layout, {
        "SessionStart": [{"matcher": "startup", "hooks": [
            command_hook(_say(tmp_path, "start", "The release branch is frozen."))]}],
        "UserPromptSubmit": [{"hooks": [command_hook(_say(tmp_path, "prompt", json.dumps(
            {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                    "additionalContext": "Ticket SQ-12 tracks this."}})))]}]})
    provider = Capture(lead=[text("noted")])
    async with SquadRuntime(layout, UNCONFINED, provider) as runtime:
        result = await runtime.route(RouteRequest(task="plan the release", targetAgent="lead"))
    assert result.ok, result.message
    system = provider.requests[0].messages[0].content
    assert "## Additional Context" in system
    assert "The release branch is frozen.\n\nTicket SQ-12 tracks this." in system


async def test_a_blocked_task_never_reaches_the_model_and_stop_still_fires(
        tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    log = tmp_path / "events.jsonl"
    record = command_hook(f"{hook(tmp_path, 'rec.py', RECORDER)} {log}")
    refuse = hook(tmp_path, "refuse.py",
                  "import sys\nsys.stdin.read()\nprint('tasks must name a ticket', "
                  "file=sys.stderr)\nsys.exit(2)\n")
    _hooks(layout, {"UserPromptSubmit": [{"hooks": [command_hook(refuse), record]}],
                    "Stop": [{"hooks": [record]}]})
    provider = Capture(lead=[text("never")])
    async with SquadRuntime(layout, UNCONFINED, provider) as runtime:
        result = await runtime.route(RouteRequest(task="do something", targetAgent="lead"))
    assert not result.ok and provider.requests == []
    assert result.error == "a UserPromptSubmit hook blocked the task: tasks must name a ticket"
    events = [(d["hook_event_name"], d.get("status")) for d in recorded(log)]
    assert events == [("UserPromptSubmit", None), ("Stop", "error")]


def _git_squad(tmp_path: Path) -> SquadLayout:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "-b", "main")
    (repo / "README.md").write_text("project\n")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "start")
    return make_squad(repo)


class AnswersByTask:
    """A replay provider whose final answers are chosen by the session's task (the replay
    script gives every session the same turns)."""

    def __init__(self, inner: Any, answers: dict[str, str]):
        self.inner, self.answers = inner, answers
        self.name, self.default_model = inner.name, inner.default_model

    async def complete(self, request: CompletionRequest) -> Completion:
        completion: Completion = await self.inner.complete(request)
        task = next(m.content for m in request.messages if m.role == "user")
        if not completion.tool_calls:
            completion.text = self.answers.get(str(task), completion.text)
        return completion

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_pre_land_keeps_a_branch_off_main_and_post_land_hears_a_landing(
        tmp_path: Path) -> None:
    layout = _git_squad(tmp_path)
    log = tmp_path / "land.jsonl"
    guard = hook(tmp_path, "guard.py", """\
import json
import sys

data = json.load(sys.stdin)
if any("WIP" in commit for commit in data["commits"]):
    print(json.dumps({"decision": "block", "reason": "WIP commits do not land"}))
""")
    record = command_hook(f"{hook(tmp_path, 'rec.py', RECORDER)} {log}")
    _hooks(layout, {"PreLand": [{"matcher": "lead", "hooks": [command_hook(guard), record]}],
                    "PostLand": [{"hooks": [record]}]})
    settings = load_settings(layout.root, overrides={
        "workspace": {"isolation": "worktree", "land": "auto"},
        "tools": {"approvals": {"write": "allow"}}, "sandbox": {"mode": "off"}})
    # A landed commit's subject is the agent's answer: the first task's answer says WIP.
    provider = AnswersByTask(script(lead=[call("write", path="a.txt", content="a\n"),
                                          text("done")]),
                             {"WIP first try": "WIP: a try", "Add b": "Add b"})
    async with SquadRuntime(layout, settings, provider) as runtime:
        held = await runtime.route(RouteRequest(task="WIP first try", targetAgent="lead"))
        landed = await runtime.route(RouteRequest(task="Add b", targetAgent="lead"))
    assert held.landing is not None and held.landing.state == "pending"
    assert held.landing.detail == "a PreLand hook blocked the landing: WIP commits do not land"
    assert held.landing.next == f"squadd land {held.session_id}"
    assert landed.landing is not None and landed.landing.state == "landed", landed.landing
    assert git(layout.repo, "log", "--format=%s", "main").splitlines() == ["Add b", "start"]
    events = [(d["hook_event_name"], d["session_id"]) for d in recorded(log)]
    assert events == [("PreLand", held.session_id), ("PreLand", landed.session_id),
                      ("PostLand", landed.session_id)]
    post = recorded(log)[-1]
    assert post["outcome"]["state"] == "landed" and post["target"] == "main"
    assert post["outcome"]["commit"] == git(layout.repo, "rev-parse", "main")


async def test_notify_fires_the_notification_hooks_of_its_type(tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    log = tmp_path / "notes.jsonl"
    _hooks(layout, {"Notification": [{"matcher": "approval_needed", "hooks": [
        command_hook(f"{hook(tmp_path, 'rec.py', RECORDER)} {log}")]}]})
    async with SquadRuntime(layout, UNCONFINED, script()) as runtime:
        await runtime.notify("bash waits for approval", notification_type="approval_needed",
                             session_id="s-9", agent="lead")
        await runtime.notify("a landing failed", notification_type="landing_failed")
    [note] = recorded(log)
    assert note["message"] == "bash waits for approval" and note["session_id"] == "s-9"
    assert note["notification_type"] == "approval_needed" and note["title"] == "squadd"


async def test_a_stop_hook_runs_under_its_session_s_slot(tmp_path: Path) -> None:
    # One slot. With no Stop hook a session's slot goes back when its last turn is over;
    # with one, the next route waits until the hook has run.
    layout = make_squad(tmp_path / "repo")
    ran, go = tmp_path / "stop-ran", tmp_path / "go"
    waits = (f"touch {ran}; i=0; while [ ! -e {go} ] && [ $i -lt 3000 ]; "
             "do sleep 0.01; i=$((i+1)); done")
    _hooks(layout, {"Stop": [{"hooks": [command_hook(waits)]}]})
    provider = Capture(default=[text("done")])
    one_slot = UNCONFINED.model_copy(update={"pool": PoolSettings(max_concurrent=1)})
    async with SquadRuntime(layout, one_slot, provider) as runtime:
        first = await runtime.route(RouteRequest(task="first", targetAgent="lead",
                                                 waitForResult=False))
        second = await runtime.route(RouteRequest(task="second", targetAgent="fenster",
                                                  waitForResult=False))
        assert first.ok and second.ok and second.session_id is not None
        await eventually(ran.exists)  # the first session's Stop hook is running
        assert [r.messages[-1].content for r in provider.requests] == ["first"]
        record = runtime.pool.get(second.session_id)
        assert record is not None and record.state == "queued"
        go.touch()
        await eventually(lambda: len(provider.requests) == 2)
        assert provider.requests[1].messages[-1].content == "second"
