"""The agent loop: order of tool calls, durable transcript, max_turns, errors, continuation."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from squadd import tool
from squadd.config import SessionSettings, Settings
from squadd.contracts.events import AgentCompleted, AgentError, BaseEvent
from squadd.contracts.messages import Completion, ToolCall
from squadd.errors import NotFoundError, ProviderError
from squadd.providers.base import CompletionRequest
from squadd.providers.replay import ReplayProvider, parse_script
from squadd.runtime.conversation import INTERRUPTED_TOOL_TEXT, NOT_STARTED_TOOL_TEXT
from squadd.runtime.session import AgentSession, SessionOutcome
from squadd.runtime.session_info import SessionInfo, choose_model, session_toolset
from squadd.state.charters import parse_charter, read_charter
from squadd.state.journal import GroupCommit
from squadd.state.journal import writer as journal_writer
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import TranscriptWriter, read_transcript
from squadd.tools.base import ToolContext, ToolSet
from squadd.tools.invoke import ToolInvoker
from squadd.tools.squad import file_tools
from tests.runtime.scripted import make_session
from tests.support.held import Held, hold


class Events:
    def __init__(self) -> None:
        self.items: list[BaseEvent] = []

    def publish(self, event: BaseEvent) -> None:
        self.items.append(event)


class Spy:
    """Wraps a provider and keeps every request it was sent."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.default_model = inner.default_model
        self.requests: list[CompletionRequest] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request.model_copy(deep=True))
        result: Completion = await self.inner.complete(request)
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()


def _replay(script: dict[str, Any]) -> Spy:
    import json

    return Spy(ReplayProvider(parse_script(json.dumps(script), source="test",
                                           yaml_syntax=False)))


def _session(layout: SquadLayout, provider: Any, settings: Settings | None = None,
             session_id: str = "s-1",
             commits: GroupCommit | None = None) -> tuple[AgentSession, Events]:
    settings = settings or Settings()
    events = Events()
    session = make_session(
        layout, SessionInfo(session_id=session_id, agent="fenster", model="m", task="t"),
        provider, ToolInvoker(layout, settings, events), ToolSet(file_tools(layout, settings)),
        events, settings=settings, commits=commits)
    return session, events


DECIDE = {"name": "squad_decide",
          "arguments": {"title": "Use JWT", "body": "b", "agentName": "fenster"}}
REMEMBER = {"name": "squad_memory",
            "arguments": {"agentName": "fenster", "learning": "JWT lives in auth/"}}


async def test_tool_calls_run_in_order_and_results_reach_the_next_request(
    squad: SquadLayout,
) -> None:
    spy = _replay({"default": [{"tool_calls": [DECIDE, REMEMBER]}, {"text": "all done"}]})
    session, events = _session(squad, spy)
    outcome = await session.start("decide and remember", None)
    assert outcome.status == "completed" and outcome.answer == "all done"
    second = spy.requests[1].messages
    assert [m.role for m in second] == ["system", "user", "assistant", "tool", "tool"]
    assert [m.name for m in second[3:]] == ["squad_decide", "squad_memory"]
    assert second[3].tool_call_id == second[2].tool_calls[0].id
    assert (squad.inbox_dir / "fenster-use-jwt.md").is_file()
    assert any(isinstance(e, AgentCompleted) for e in events.items)


async def test_transcript_holds_every_message_and_the_final_state(squad: SquadLayout) -> None:
    spy = _replay({"default": [{"tool_calls": [DECIDE]}, {"text": "ok"}]})
    session, _ = _session(squad, spy)
    await session.start("go", None)
    transcript = read_transcript(squad.transcript("s-1"))
    assert [m["role"] for m in transcript.messages] == [
        "system", "user", "assistant", "tool", "assistant"]
    assert transcript.meta["agent"] == "fenster"
    assert transcript.last_state == "completed" and transcript.final_answer == "ok"


async def test_system_prompt_carries_memory_into_the_next_session(squad: SquadLayout) -> None:
    first = _replay({"default": [{"tool_calls": [REMEMBER]}, {"text": "ok"}]})
    await _session(squad, first)[0].start("learn", None)
    second = _replay({"default": [{"text": "hi"}]})
    await _session(squad, second, session_id="s-2")[0].start("again", None)
    assert "JWT lives in auth/" in second.requests[0].messages[0].content


async def test_max_turns_stops_with_a_clear_failure(squad: SquadLayout) -> None:
    loop = [{"tool_calls": [{"name": "squad_skill", "arguments": {"action": "list"}}]}] * 5
    settings = Settings(session=SessionSettings(max_turns=3))
    session, events = _session(squad, _replay({"default": loop}), settings)
    outcome = await session.start("spin", None)
    assert outcome.status == "error" and "stopped after 3 turns" in (outcome.error or "")
    assert isinstance(events.items[-1], AgentError)
    assert read_transcript(squad.transcript("s-1")).last_state == "error"


async def test_provider_error_ends_the_session_with_its_message(squad: SquadLayout) -> None:
    class Broken:
        name = "broken"
        default_model = "x"

        async def complete(self, request: CompletionRequest) -> Completion:
            raise ProviderError("broken: HTTP 401: bad key", provider="broken", status=401)

        async def aclose(self) -> None:
            return None

    outcome = await _session(squad, Broken())[0].start("go", None)
    assert outcome.status == "error" and "HTTP 401: bad key" in (outcome.error or "")


async def test_tool_failure_is_a_message_not_a_stop(squad: SquadLayout) -> None:
    bad = {"name": "squad_decide", "arguments": {"title": "", "body": "b", "agentName": "x"}}
    spy = _replay({"default": [{"tool_calls": [bad, {"name": "nope", "arguments": {}}]},
                               {"text": "recovered"}]})
    outcome = await _session(squad, spy)[0].start("go", None)
    assert outcome.status == "completed"
    tool_messages = [m for m in spy.requests[1].messages if m.role == "tool"]
    assert all(m.is_error for m in tool_messages)
    assert "unknown tool 'nope'" in tool_messages[1].content


async def test_continue_rereads_the_transcript(squad: SquadLayout) -> None:
    spy = _replay({"default": [{"text": "first"}, {"text": "second"}]})
    session, _ = _session(squad, spy)
    await session.start("one", None)
    again, _ = _session(squad, spy)  # a fresh object: nothing in memory but the transcript
    outcome = await again.continue_with("two")
    assert outcome.answer == "second"
    assert [m.content for m in spy.requests[1].messages if m.role == "user"] == ["one", "two"]


async def test_resume_answers_dangling_tool_calls(squad: SquadLayout) -> None:
    spy = _replay({"default": [{"tool_calls": [DECIDE]}, {"text": "finished"}]})
    # What a crash leaves: the assistant asked for a tool, and no result was written.
    writer = TranscriptWriter(squad.transcript("s-1"))
    writer.add("meta", session_id="s-1", agent="fenster")
    for message in ({"role": "system", "content": "You are fenster"},
                    {"role": "user", "content": "go"},
                    {"role": "assistant", "tool_calls": [
                        {"id": "call_0_0", "name": "squad_decide", "arguments": {}}]}):
        writer.add("message", message=message)
    writer.flush()
    resumed, _ = _session(squad, spy)
    outcome = await resumed.continue_with(None)
    assert outcome.status == "completed" and outcome.answer == "finished"
    tool = [m for m in spy.requests[-1].messages if m.role == "tool"]
    assert tool[0].content == INTERRUPTED_TOOL_TEXT and tool[0].is_error


@pytest.mark.parametrize(("message_id", "second"), [
    ("msg-1", NOT_STARTED_TOOL_TEXT),  # results were durable per call: call 2 never started
    (None, INTERRUPTED_TOOL_TEXT),     # an older transcript promised nothing about call 2
])
async def test_resume_says_not_started_only_where_the_transcript_proves_it(
        squad: SquadLayout, message_id: str | None, second: str) -> None:
    spy = _replay({"default": [{"tool_calls": [DECIDE, DECIDE]}, {"text": "finished"}]})
    writer = TranscriptWriter(squad.transcript("s-1"))
    writer.add("meta", session_id="s-1", agent="fenster")
    assistant: dict[str, Any] = {"role": "assistant", "tool_calls": [
        {"id": "c1", "name": "squad_decide", "arguments": {}},
        {"id": "c2", "name": "squad_decide", "arguments": {}}]}
    if message_id is not None:
        assistant["id"] = message_id
    for message in ({"role": "system", "content": "You are fenster"},
                    {"role": "user", "content": "go"}, assistant):
        writer.add("message", message=message)
    writer.flush()
    resumed, _ = _session(squad, spy)
    assert (await resumed.continue_with(None)).status == "completed"
    tool = [m.content for m in spy.requests[-1].messages if m.role == "tool"]
    assert tool == [INTERRUPTED_TOOL_TEXT, second]


async def test_timeout_ends_in_error_and_says_so(squad: SquadLayout) -> None:
    class Slow:
        name = "slow"
        default_model = "x"

        async def complete(self, request: CompletionRequest) -> Completion:
            await anyio.sleep(30)
            return Completion(text="late")

        async def aclose(self) -> None:
            return None

    with anyio.fail_after(30):
        outcome = await _session(squad, Slow())[0].start("go", None, timeout_s=0.2)
    assert outcome.status == "error" and "timed out after 0.2s" in (outcome.error or "")


class Waiting:
    """A provider that says when it is asked, and answers "done" when let go (it notes
    whether it was cancelled instead)."""

    name = "waiting"
    default_model = "x"

    def __init__(self) -> None:
        self.asked = anyio.Event()
        self.go = anyio.Event()
        self.cancelled = False

    async def complete(self, request: CompletionRequest) -> Completion:
        self.asked.set()
        try:
            await self.go.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        return Completion(text="done")

    async def aclose(self) -> None:
        return None


@dataclass
class HeldStart:
    held: Held
    """The journal's syncs: the first is held until `held.release` is set."""
    events: Events
    outcomes: list[SessionOutcome]
    commits: GroupCommit


@contextlib.asynccontextmanager
async def started_with_its_sync_held(squad: SquadLayout, monkeypatch: pytest.MonkeyPatch,
                                     provider: Any, task: str) -> AsyncIterator[HeldStart]:
    """A session started on a running group commit, yielded once the first journal sync has
    begun and is held; on leaving, the sync goes on and the session's outcome is awaited."""
    held = hold(monkeypatch, journal_writer, "_datasync")
    commits = GroupCommit(squad)
    outcomes: list[SessionOutcome] = []
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        session, events = _session(squad, provider, commits=commits)

        async def run() -> None:
            outcomes.append(await session.start(task, None))

        tg.start_soon(run)
        with anyio.fail_after(30):
            await held.wait_entered()
        yield HeldStart(held, events, outcomes, commits)
        held.release.set()
        with anyio.fail_after(30):
            while not outcomes:  # noqa: ASYNC110 - the commit thread ends the sync
                await anyio.sleep(0.01)
        commits.close()


async def test_the_first_request_goes_out_during_its_records_sync_and_its_reply_waits_for_it(
        squad: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = Waiting()
    async with started_with_its_sync_held(squad, monkeypatch, provider, "go") as started:
        # the prompt and the task are in their sync, held
        with anyio.fail_after(30):
            await provider.asked.wait()  # and the request went out meanwhile
        provider.go.set()  # its reply is in, after its records left: it waits for the sync
        await anyio.wait_all_tasks_blocked()
        assert started.outcomes == []
        on_disk = read_transcript(squad.transcript("s-1"))
        assert [m["role"] for m in on_disk.messages] == ["system", "user"]
    assert started.outcomes[0].status == "completed" and started.outcomes[0].answer == "done"
    transcript = read_transcript(squad.transcript("s-1"))
    assert [m["role"] for m in transcript.messages] == ["system", "user", "assistant"]
    assert len(started.held.calls) == 2  # the opening records, then the answer


async def test_records_that_cannot_be_made_durable_cancel_the_request_and_fail_the_session(
        squad: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(self: TranscriptWriter) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(TranscriptWriter, "append_unsynced", full_disk)
    provider = Waiting()
    commits = GroupCommit(squad)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        session = _session(squad, provider, commits=commits)[0]
        with anyio.fail_after(30), pytest.raises(OSError, match="No space left"):
            await session.start("go", None)  # never let go: it ends only if cancelled
        commits.close()
    assert provider.cancelled  # the request was not left running for a reply nobody takes


class Instant:
    """A provider that answers at once, without a pause: each turn in order (a tool call's
    name and arguments, or the final text)."""

    name = "instant"
    default_model = "x"

    def __init__(self, *turns: dict[str, Any] | str) -> None:
        self.turns = list(turns)

    async def complete(self, request: CompletionRequest) -> Completion:
        turn = self.turns.pop(0)
        if isinstance(turn, str):
            return Completion(text=turn)
        return Completion(tool_calls=[ToolCall(id=f"c{len(self.turns)}", **turn)])

    async def aclose(self) -> None:
        return None


async def test_a_reply_back_before_its_records_left_goes_with_them_and_the_end_waits_for_both(
        squad: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    async with started_with_its_sync_held(squad, monkeypatch, Instant("done"), "go") as started:
        # one batch in its sync: the prompt, the task, the answer and the end
        await anyio.wait_all_tasks_blocked()
        assert started.outcomes == []  # the caller waits for the sync
        assert not any(isinstance(e, AgentCompleted) for e in started.events.items)
        on_disk = read_transcript(squad.transcript("s-1"))
        assert [m["role"] for m in on_disk.messages] == ["system", "user", "assistant"]
        assert on_disk.last_state == "completed"
    assert started.outcomes[0].status == "completed" and started.outcomes[0].answer == "done"
    assert len(started.held.calls) == 1 and started.commits.batches == 1
    assert any(isinstance(e, AgentCompleted) for e in started.events.items)


async def test_tool_calls_in_a_reply_back_before_its_records_left_run_only_once_durable(
        squad: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = Instant(DECIDE, "decided")
    async with started_with_its_sync_held(squad, monkeypatch, provider, "decide") as started:
        await anyio.wait_all_tasks_blocked()
        on_disk = read_transcript(squad.transcript("s-1"))
        assert [m["role"] for m in on_disk.messages] == ["system", "user", "assistant"]
        assert not (squad.inbox_dir / "fenster-use-jwt.md").exists()  # the call waits
    assert started.outcomes[0].answer == "decided"
    assert (squad.inbox_dir / "fenster-use-jwt.md").is_file()


async def test_a_session_cancelled_while_its_reply_rides_the_sync_keeps_it_and_says_interrupted(
        squad: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    held = hold(monkeypatch, journal_writer, "_datasync")
    commits = GroupCommit(squad)
    ended = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        session = _session(squad, Instant(DECIDE, "decided"), commits=commits)[0]
        stopping = anyio.CancelScope()

        async def run() -> None:
            with stopping:
                await session.start("decide", None)
            ended.set()

        tg.start_soon(run)
        with anyio.fail_after(30):
            await held.wait_entered()  # the request's records and the reply's, in one sync
        stopping.cancel()
        await anyio.wait_all_tasks_blocked()
        assert not ended.is_set()  # the sync is not abandoned half way
        held.release.set()
        with anyio.fail_after(30):
            await ended.wait()
        commits.close()
    transcript = read_transcript(squad.transcript("s-1"))
    assert [m["role"] for m in transcript.messages][:3] == ["system", "user", "assistant"]
    assert transcript.messages[2]["tool_calls"][0]["name"] == "squad_decide"
    assert transcript.last_state == "interrupted"
    assert transcript.torn_lines == 0


async def test_a_reply_back_before_its_records_failed_to_sync_fails_the_session_untold(
        squad: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(self: TranscriptWriter) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(TranscriptWriter, "append_unsynced", full_disk)
    commits = GroupCommit(squad)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        session, events = _session(squad, Instant("done"), commits=commits)
        with anyio.fail_after(30), pytest.raises(OSError, match="No space left"):
            await session.start("go", None)
        commits.close()
    assert not any(isinstance(e, AgentCompleted) for e in events.items)


def test_unknown_agent_lists_the_agents_that_exist(squad: SquadLayout) -> None:
    with pytest.raises(NotFoundError, match=r"ghost.*fenster"):
        read_charter(squad, "ghost")


def test_model_choice_order() -> None:
    settings = Settings.model_validate({"agents": {"a": {"model": "from-config"}},
                                        "provider": {"model": "from-provider"}})
    charter = parse_charter("a", "## Model\nPreferred: from-charter\n")
    assert choose_model("from-route", charter, settings, "a", "d") == "from-route"
    assert choose_model(None, charter, settings, "a", "d") == "from-charter"
    assert choose_model(None, None, settings, "a", "d") == "from-config"
    assert choose_model(None, None, settings, "b", "d") == "from-provider"
    assert choose_model(None, None, Settings(), "b", "d") == "d"


def test_charter_tools_narrow_available_tools(squad: SquadLayout) -> None:
    tools = ToolSet(file_tools(squad, Settings()))
    charter = parse_charter("a", "## Tools\n- squad_decide\n- squad_skill\n")
    narrowed = session_toolset(tools, ["squad_decide", "squad_memory"], charter)
    assert narrowed.names == ["squad_decide"]


async def test_each_call_knows_its_assistant_message_and_details_stay_out_of_the_model(
        squad: SquadLayout) -> None:
    seen: list[str] = []
    contexts: list[tuple[str, str, Path, str, bool]] = []
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()

    @tool
    def look(ctx: ToolContext) -> dict[str, Any]:
        """Look at the screen."""
        seen.append(ctx.message_id)
        contexts.append((ctx.session_id, ctx.agent, ctx.repo_dir, ctx.call_id,
                         ctx.cancel.cancelled))
        return {"content": [{"type": "text", "text": "a window"},
                            {"type": "image", "data": png, "mimeType": "image/png"}],
                "details": {"secret_sauce": "for people only"}}

    spy = _replay({"default": [{"tool_calls": [{"name": "look"}, {"name": "look"}]},
                               {"tool_calls": [{"name": "look"}]}, {"text": "seen"}]})
    settings = Settings()
    events = Events()
    session = make_session(
        squad, SessionInfo(session_id="s-1", agent="fenster", model="m", task="t"), spy,
        ToolInvoker(squad, settings, events),
        ToolSet([look.bound("look", source="project", file=None)]), events, settings=settings)
    assert (await session.start("look twice", None)).status == "completed"

    transcript = read_transcript(squad.transcript("s-1"))
    assistants = [m for m in transcript.messages if m["role"] == "assistant"]
    ids = [m["id"] for m in assistants]
    assert len(set(ids)) == 3 and all(i.startswith("msg-") for i in ids)
    assert seen == [ids[0], ids[0], ids[1]]
    assert contexts == [("s-1", "fenster", squad.repo, call_id, False)
                        for call_id in ("call_0_0", "call_0_1", "call_1_0")]
    records = [r for r in transcript.records
               if r.get("kind") == "message" and r["message"]["role"] == "tool"]
    assert all(r["details"] == {"secret_sauce": "for people only"} for r in records)
    assert all(r["message"]["images"][0]["mime_type"] == "image/png" for r in records)
    sent = spy.requests[-1].messages
    tool_messages = [m for m in sent if m.role == "tool"]
    assert [m.content for m in tool_messages] == ["a window"] * 3
    assert all(len(m.images) == 1 for m in tool_messages)
    assert not any("secret_sauce" in m.content for m in sent)


def test_tool_output_is_cut_at_50000_bytes_and_2000_lines_by_default() -> None:
    limits = Settings().tools
    assert (limits.max_output_bytes, limits.max_output_lines) == (50_000, 2000)
