"""SquadRuntime's API: refusals that say why, routing rules, continuing, resuming, the logs."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import anyio
import pytest

from squadd.contracts.events import ProviderRetry
from squadd.contracts.routes import RouteRequest, RouteResult
from squadd.runtime.planner import Planner
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import read_transcript
from tests.runtime.scripted import (
    Gauge,
    Recorder,
    add_agent,
    call,
    eventually,
    script,
    settings,
    text,
)
from tests.support.model_servers import OpenAIServer


def _tool_results(layout: SquadLayout, session_id: str) -> list[str]:
    transcript = read_transcript(layout.transcript(session_id))
    return [m["content"] for m in transcript.messages if m["role"] == "tool"]


async def test_unknown_agent_is_a_failure_that_lists_the_agents(layout: SquadLayout) -> None:
    gauge = Gauge(script([text("x")]))
    async with SquadRuntime(layout, settings(), gauge) as runtime:
        result = await runtime.route(RouteRequest(target_agent="mcmanus", task="t"))
    assert not result.ok and result.reason == "unknown_agent" and result.session_id is None
    assert "mcmanus" in result.message and "fenster, hockney, lead" in result.message
    assert gauge.turns == 0
    assert not layout.orchestration_dir.exists() or not any(layout.orchestration_dir.iterdir())


async def test_bad_agent_name_is_refused_with_the_rule(layout: SquadLayout) -> None:
    async with SquadRuntime(layout, settings(), script([text("x")])) as runtime:
        result = await runtime.route(RouteRequest(target_agent="../etc", task="t"))
    assert not result.ok and result.reason == "invalid" and "must match" in result.message


async def test_auto_route_follows_routing_md_and_mentions(layout: SquadLayout) -> None:
    gauge = Gauge(script([text("ok")]))
    async with SquadRuntime(layout, settings(), gauge) as runtime:
        by_rule = await runtime.route(RouteRequest(task="write tests for the parser"))
        by_auto = await runtime.route(RouteRequest(target_agent="auto",
                                                   task="add an endpoint for users"))
        by_mention = await runtime.route(RouteRequest(task="@lead write tests for the parser"))
        nothing = await runtime.route(RouteRequest(task="bake a cake"))
    assert (by_rule.agent, by_rule.routed_by) == ("hockney", "rules")
    assert (by_auto.agent, by_auto.routed_by) == ("fenster", "rules")
    assert (by_mention.agent, by_mention.routed_by) == ("lead", "mention")
    assert not nothing.ok and nothing.reason == "no_route"
    assert "| Tests and quality | hockney |" in nothing.message


async def test_cycle_is_a_failure_result_the_agent_can_read(layout: SquadLayout) -> None:
    provider = script(
        lead=[call("squad_route", targetAgent="fenster", task="help"), text("lead done")],
        fenster=[call("squad_route", targetAgent="lead", task="back to you"),
                 text("fenster gave up")],
    )
    async with SquadRuntime(layout, settings(), provider) as runtime:
        result = await runtime.route(RouteRequest(target_agent="lead", task="start"))
        fenster = next(v for v in runtime.snapshot().sessions if v.agent == "fenster")
    assert result.ok and result.answer == "lead done"
    [refusal] = _tool_results(layout, fenster.session_id)
    assert "cycle" in refusal and "lead -> fenster -> lead" in refusal
    assert [v.agent for v in runtime.snapshot().sessions].count("lead") == 1


async def test_route_to_itself_is_a_cycle(layout: SquadLayout) -> None:
    provider = script(lead=[call("squad_route", targetAgent="lead", task="me again"),
                            text("fine")])
    async with SquadRuntime(layout, settings(), provider) as runtime:
        result = await runtime.route(RouteRequest(target_agent="lead", task="start"))
    assert result.session_id is not None
    assert "cycle" in _tool_results(layout, result.session_id)[0]


async def test_too_deep_route_is_a_failure_that_names_the_limit(layout: SquadLayout) -> None:
    provider = script(
        lead=[call("squad_route", targetAgent="fenster", task="a"), text("lead done")],
        fenster=[call("squad_route", targetAgent="hockney", task="b"), text("fenster done")],
        hockney=[text("never asked")],
    )
    gauge = Gauge(provider)
    async with SquadRuntime(layout, settings(route_max_depth=2), gauge) as runtime:
        result = await runtime.route(RouteRequest(target_agent="lead", task="start"))
        fenster = next(v for v in runtime.snapshot().sessions if v.agent == "fenster")
    assert result.ok
    refusal = _tool_results(layout, fenster.session_id)[0]
    assert "3 routes deep" in refusal and "route.max_depth is 2" in refusal
    assert "hockney" not in {r.agent for r in gauge.requests}
    assert fenster.depth == 2


async def test_route_with_session_id_continues_from_the_transcript(layout: SquadLayout) -> None:
    gauge = Gauge(script([text("first answer"), text("second answer")]))
    async with SquadRuntime(layout, settings(idle_timeout_s=0.1), gauge) as runtime:
        first = await runtime.route(RouteRequest(target_agent="fenster", task="one"))
        assert first.session_id is not None
        # reaped: nothing of it is left in memory
        await eventually(lambda: runtime.pool.get(first.session_id) is None)
        second = await runtime.route(RouteRequest(session_id=first.session_id, task="two"))
    assert second.ok and second.answer == "second answer"
    assert second.session_id == first.session_id and second.routed_by == "session"
    sent = [m.content for m in gauge.requests[-1].messages if m.role != "system"]
    assert sent == ["one", "first answer", "two"]


async def test_a_session_continued_by_another_runtime_sends_the_system_prompt_kept_once(
        layout: SquadLayout) -> None:
    first_gauge = Gauge(script([text("first answer"), text("other answer")]))
    async with SquadRuntime(layout, settings(), first_gauge) as runtime:
        first = await runtime.route(RouteRequest(target_agent="fenster", task="one"))
        other = await runtime.route(RouteRequest(target_agent="fenster", task="another"))
    session_id = first.session_id or ""
    records = [json.loads(line) for line in
               layout.transcript(session_id).read_text(encoding="utf-8").splitlines()]
    [system] = [r for r in records if r.get("message", {}).get("role") == "system"]
    assert "content" not in system["message"]  # named by digest, its text kept once
    assert [p.name for p in layout.transcript_prompts_dir.iterdir()] == [
        f"{system['prompt']}.txt"]  # both sessions' prompts are the same text
    assert other.ok and first_gauge.requests[1].messages[0].content == \
        first_gauge.requests[0].messages[0].content
    gauge = Gauge(script([text("first answer"), text("second answer")]))  # the second turn
    async with SquadRuntime(layout, settings(), gauge) as runtime:  # nothing of it in memory
        second = await runtime.route(RouteRequest(session_id=session_id, task="two"))
    assert second.ok and second.answer == "second answer"
    [request] = gauge.requests
    assert request.messages[0].role == "system"
    assert request.messages[0].content == first_gauge.requests[0].messages[0].content
    assert request.messages[0].content.startswith("You are fenster, a Squad agent.")


async def test_a_session_whose_kept_prompt_is_lost_continues_with_a_prompt_built_anew(
        layout: SquadLayout) -> None:
    async with SquadRuntime(layout, settings(), script([text("first answer")])) as runtime:
        first = await runtime.route(RouteRequest(target_agent="fenster", task="one"))
    for kept in layout.transcript_prompts_dir.iterdir():
        kept.unlink()  # someone cleaned run/ by hand
    gauge = Gauge(script([text("first answer"), text("second answer")]))
    async with SquadRuntime(layout, settings(), gauge) as runtime:
        second = await runtime.route(RouteRequest(session_id=first.session_id, task="two"))
    assert second.ok and second.answer == "second answer"
    [request] = gauge.requests
    assert request.messages[0].role == "system"
    assert request.messages[0].content.startswith("You are fenster, a Squad agent.")
    assert "missing" not in request.messages[0].content
    assert [m.content for m in request.messages[1:]] == ["one", "first answer", "two"]


async def test_a_prompt_that_cannot_be_kept_fails_its_route_and_names_nothing(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    from squadd.state import transcripts

    def disk_full(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    gauge = Gauge(script([text("done")]))
    async with SquadRuntime(layout, settings(), gauge) as runtime:
        with monkeypatch.context() as patch:
            patch.setattr(transcripts, "atomic_write", disk_full)
            failed = await runtime.route(RouteRequest(target_agent="fenster", task="one"))
        assert not failed.ok and "No space left on device" in (failed.error or "")
        assert gauge.requests == []  # the model never saw a prompt that is not on disk
        path = layout.transcript(failed.session_id or "")
        assert not path.exists() or '"prompt"' not in path.read_text(encoding="utf-8")
        after = await runtime.route(RouteRequest(target_agent="fenster", task="two"))
    assert after.ok and after.answer == "done"
    assert read_transcript(layout.transcript(after.session_id or "")).messages[0][
        "content"].startswith("You are fenster, a Squad agent.")


async def test_a_route_whose_records_the_disk_does_not_make_durable_fails_at_the_timeout(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    from squadd.state.journal import writer as journal
    from tests.support.held import hold

    async with SquadRuntime(layout, settings(), script([text("done")])) as runtime:
        runtime.commits.timeout_s = 0.2
        held = hold(monkeypatch, journal, "_datasync")
        with anyio.fail_after(30):
            failed = await runtime.route(RouteRequest(target_agent="fenster", task="one"))
        assert not failed.ok and "not made durable within 0.2 s" in (failed.error or "")
        assert failed.answer is None  # nobody hears an answer its records do not back
        held.release.set()
        after = await runtime.route(RouteRequest(target_agent="fenster", task="two"))
    assert after.ok and after.answer == "done"  # the runtime goes on once the disk answers


async def test_a_session_left_in_sessions_by_an_older_squadd_continues_in_place(
        layout: SquadLayout) -> None:
    gauge = Gauge(script([text("first answer"), text("second answer")]))
    async with SquadRuntime(layout, settings(idle_timeout_s=0.1), gauge) as runtime:
        first = await runtime.route(RouteRequest(target_agent="fenster", task="one"))
        session_id = first.session_id or ""
        await eventually(lambda: runtime.pool.get(session_id) is None)
        old = layout.root / "sessions" / f"{session_id}.jsonl"
        old.parent.mkdir()
        (layout.transcripts_dir / f"{session_id}.jsonl").rename(old)
        second = await runtime.route(RouteRequest(session_id=session_id, task="two"))
    assert second.ok and second.answer == "second answer"
    assert not (layout.transcripts_dir / f"{session_id}.jsonl").exists()
    assert read_transcript(old).final_answer == "second answer"


async def test_busy_and_unknown_sessions_are_refused(layout: SquadLayout) -> None:
    gauge = Gauge(script([text("x")]), hold={"long": anyio.Event()})  # runs until cancelled
    async with SquadRuntime(layout, settings(), gauge) as runtime:
        running = await runtime.route(RouteRequest(target_agent="fenster", task="long",
                                                   wait_for_result=False))
        busy = await runtime.route(RouteRequest(session_id=running.session_id, task="more"))
        unknown = await runtime.route(RouteRequest(session_id="20260101-000000-deadbeef",
                                                   task="more"))
        await runtime.cancel(running.session_id or "")
    assert not busy.ok and busy.reason == "busy"
    assert not unknown.ok and unknown.reason == "unknown_session"


async def test_resume_finishes_an_interrupted_session_after_a_restart(
        layout: SquadLayout) -> None:
    slow = Gauge(script([text("never")]), delay_s=5)
    async with SquadRuntime(layout, settings(), slow) as runtime:
        started = await runtime.route(RouteRequest(target_agent="fenster", task="big job",
                                                   wait_for_result=False))
        await eventually(lambda: slow.active)
    # leaving the runtime interrupted the session; a new runtime picks it up
    session_id = started.session_id or ""
    assert read_transcript(layout.transcript(session_id)).last_state == "interrupted"
    fresh = Gauge(script([text("resumed answer")]))
    async with SquadRuntime(layout, settings(), fresh) as runtime:
        resumed = await runtime.resume(session_id)
        again = await runtime.resume(session_id)
    assert resumed.ok and resumed.answer == "resumed answer"
    assert [m.content for m in fresh.requests[0].messages if m.role == "user"] == ["big job"]
    assert not again.ok and again.reason == "invalid"


async def test_orchestration_log_is_written_at_spawn_and_completed(layout: SquadLayout) -> None:
    release = anyio.Event()
    gauge = Gauge(script([text("done", tokens=(120, 30))]), hold={"fix the query": release})
    async with SquadRuntime(layout, settings(), gauge) as runtime:
        result = await runtime.route(RouteRequest(target_agent="fenster", task="fix the query",
                                                  priority="urgent", wait_for_result=False,
                                                  requested_by="cli"))
        await eventually(lambda: list(layout.orchestration_dir.glob("*-fenster.md")))
        [path] = list(layout.orchestration_dir.glob("*-fenster.md"))
        at_spawn = path.read_text(encoding="utf-8")
        release.set()
        assert await runtime.settle(timeout_s=30)
    final = path.read_text(encoding="utf-8")
    assert "**Outcome**" not in at_spawn and final.startswith(at_spawn)  # completed by append
    for line in ("| **Agent routed** | fenster", "| **Why chosen** | named by the caller |",
                 "| **Mode** | `background` |", "| **Requested by** | cli |",
                 "| **Task** | fix the query |", "| **Priority** | urgent |",
                 f"| **Session** | {result.session_id} |", "| **Outcome** | Completed |",
                 "| **Tokens** | 120 in, 30 out |"):
        assert line in final, line
    assert "| **Duration (s)** | - |" not in final


async def test_leaving_the_runtime_interrupts_background_sessions(layout: SquadLayout) -> None:
    gauge = Gauge(script([text("never")]), delay_s=60)
    async with SquadRuntime(layout, settings(), gauge) as runtime:
        started = await runtime.route(RouteRequest(target_agent="fenster", task="long",
                                                   wait_for_result=False))
        await eventually(lambda: gauge.active == 1)  # the turn is under way
    refused = await runtime.route(RouteRequest(target_agent="fenster", task="after"))
    assert not refused.ok and refused.reason == "shutting_down"
    record = runtime.pool.get(started.session_id or "")
    assert record is not None and record.state == "interrupted"
    [log] = list(layout.orchestration_dir.glob("*-fenster.md"))
    assert "| **Outcome** | Interrupted: cancelled |" in log.read_text(encoding="utf-8")


async def test_available_tools_and_model_reach_the_provider(layout: SquadLayout) -> None:
    add_agent(layout, "keaton", tools=("squad_decide", "squad_status"), model="charter-model")
    gauge = Gauge(script([text("x")]))
    async with SquadRuntime(layout, settings(), gauge) as runtime:
        await runtime.route(RouteRequest(target_agent="keaton", task="t"))
        await runtime.route(RouteRequest(target_agent="keaton", task="t", model="route-model",
                                         available_tools=["squad_status", "squad_route"]))
        await runtime.route(RouteRequest(target_agent="fenster", task="t"))
    first, second, third = gauge.requests
    assert [t.name for t in first.tools] == ["squad_decide", "squad_status"]
    assert first.model == "charter-model" and second.model == "route-model"
    assert [t.name for t in second.tools] == ["squad_status"]
    assert {t.name for t in third.tools} == {"squad_decide", "squad_memory", "squad_skill",
                                             "squad_route", "squad_status", "squad_ask",
                                             "read", "write",
                                             "edit", "find", "grep", "bash"}


async def test_provider_retries_become_events(layout: SquadLayout, tmp_path: Path) -> None:
    recorder = Recorder()
    with OpenAIServer() as server:
        server.script(OpenAIServer.error(503, "overloaded", retry_after=0),
                      OpenAIServer.text_turn("after a retry"))
        config = settings().model_copy(update={"provider": settings().provider.model_copy(
            update={"kind": "openai", "base_url": server.url, "retry_backoff_s": 0.0})})
        runtime = SquadRuntime.from_settings(layout, config)
        runtime.bus.add_listener(recorder.publish)
        async with runtime:
            result = await runtime.route(RouteRequest(target_agent="fenster", task="t"))
    assert result.ok and result.answer == "after a retry"
    [retry] = recorder.of("provider.retry")
    assert isinstance(retry, ProviderRetry) and retry.status == 503 and retry.attempt == 1
    assert json.loads(retry.model_dump_json())["type"] == "provider.retry"


async def test_resume_answers_a_tool_call_cut_off_by_the_interruption(
        layout: SquadLayout) -> None:
    provider = script(lead=[call("squad_route", targetAgent="fenster", task="slow part"),
                            text("lead finished anyway")],
                      fenster=[text("too late")])
    slow = Gauge(provider, hold={"slow part": anyio.Event()})  # fenster never finishes
    async with SquadRuntime(layout, settings(), slow) as runtime:
        lead = await runtime.route(RouteRequest(target_agent="lead", task="start",
                                                wait_for_result=False))
        await eventually(lambda: any(s.agent == "fenster" for s in slow.starts))
        assert await runtime.cancel(lead.session_id or "")
        assert await runtime.settle(timeout_s=30)
    recorder = Recorder()
    async with SquadRuntime(layout, settings(), Gauge(provider)) as runtime:
        runtime.bus.add_listener(recorder.publish)
        resumed = await runtime.resume(lead.session_id or "")
    assert resumed.ok and resumed.answer == "lead finished anyway"
    tools = [m for m in read_transcript(layout.transcript(lead.session_id or "")).messages
             if m["role"] == "tool"]
    assert len(tools) == 1 and tools[0]["content"].startswith("interrupted:")
    roles = [e.role for e in recorder.of("session.message")]
    assert roles == ["tool", "assistant"]  # the stand-in was published, from the loop


async def test_two_routes_racing_to_continue_one_session_run_it_once(
        layout: SquadLayout) -> None:
    gauge = Gauge(script([text("first"), text("second"), text("third")]), delay_s=0.05)
    async with SquadRuntime(layout, settings(idle_timeout_s=0.05), gauge) as runtime:
        first = await runtime.route(RouteRequest(target_agent="fenster", task="one"))
        session_id = first.session_id or ""
        await eventually(lambda: runtime.pool.get(session_id) is None)  # only on disk now
        results = []

        async def again(task: str) -> None:
            results.append(await runtime.route(RouteRequest(session_id=session_id, task=task)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(again, "two")
            tg.start_soon(again, "also two")
    assert sorted(r.ok for r in results) == [False, True]
    assert next(r for r in results if not r.ok).reason == "busy"
    users = [m["content"] for m in read_transcript(layout.transcript(session_id)).messages
             if m["role"] == "user"]
    assert len(users) == 2


async def test_an_accepted_route_is_on_disk_before_its_session_starts(
        layout: SquadLayout) -> None:
    release = anyio.Event()
    gauge = Gauge(script([text("done")]), hold={"*": release})
    async with SquadRuntime(layout, settings(max_concurrent=1), gauge) as runtime:
        await runtime.route(RouteRequest(target_agent="lead", task="hold the slot",
                                         wait_for_result=False))
        queued = await runtime.route(RouteRequest(target_agent="fenster", task="wait in line",
                                                  context="ctx-1", wait_for_result=False))
        assert queued.ok and queued.state == "queued"
        waiting = read_transcript(layout.transcript(queued.session_id or ""))
        assert waiting.meta["task"] == "wait in line" and waiting.meta["context"] == "ctx-1"
        assert waiting.last_state == "queued" and waiting.messages == []
        release.set()
        assert await runtime.settle(timeout_s=30)
    ran = read_transcript(layout.transcript(queued.session_id or ""))
    assert [r["kind"] for r in ran.records][:2] == ["meta", "state"]
    assert ran.last_state == "completed" and "squad_decide" in ran.meta["tools"]
    assert [m["role"] for m in ran.messages] == ["system", "user", "assistant"]


async def test_a_route_stopped_before_it_started_resumes_from_its_task_and_context(
        layout: SquadLayout) -> None:
    gauge = Gauge(script([text("never")]), hold={"*": anyio.Event()})
    async with SquadRuntime(layout, settings(max_concurrent=1), gauge) as runtime:
        await runtime.route(RouteRequest(target_agent="lead", task="hold the slot",
                                         wait_for_result=False))
        queued = await runtime.route(RouteRequest(target_agent="fenster", task="wait in line",
                                                  context="ctx-2", wait_for_result=False))
    session_id = queued.session_id or ""
    stopped = read_transcript(layout.transcript(session_id))
    assert stopped.last_state == "interrupted" and stopped.messages == []
    fresh = Gauge(script([text("done at last")]))
    async with SquadRuntime(layout, settings(), fresh) as runtime:
        resumed = await runtime.resume(session_id)
    assert resumed.ok and resumed.answer == "done at last"
    [request] = fresh.requests
    assert [m.role for m in request.messages] == ["system", "user"]
    assert request.messages[1].content == "wait in line" and "ctx-2" in request.messages[0].content


async def test_transcript_files_are_made_ahead_and_routes_use_them(layout: SquadLayout) -> None:
    from squadd.state.transcripts import SPARES_DIRNAME

    spares_dir = layout.sessions_dir / SPARES_DIRNAME
    async with SquadRuntime(layout, settings(), script([text("done")])) as runtime:
        await eventually(lambda: len(runtime.spares) > 0)  # a batch is ready
        before = set(spares_dir.iterdir())
        result = await runtime.route(RouteRequest(target_agent="fenster", task="t"))
        assert result.ok and result.session_id is not None
        assert len(before - set(spares_dir.iterdir())) == 1  # one spare became the transcript
    assert read_transcript(layout.transcript(result.session_id)).final_answer == "done"


async def test_in_a_session_a_tool_outside_its_set_is_refused_naming_the_rule(
        layout: SquadLayout) -> None:
    add_agent(layout, "tester", tools=("squad_status",))
    provider = script(tester=[call("squad_decide", title="t", body="b"), text("one"),
                              call("squad_route", targetAgent="lead", task="x"), text("two")],
                      lead=[call("squad_status"), call("squad_decide", title="t", body="b"),
                            text("three")])
    async with SquadRuntime(layout, settings(), Gauge(provider)) as runtime:
        by_charter = await runtime.route(RouteRequest(target_agent="tester", task="a"))
        again = await runtime.route(RouteRequest(session_id=by_charter.session_id, task="b"))
        by_route = await runtime.route(RouteRequest(target_agent="lead", task="c",
                                                    available_tools=["squad_status"]))
    assert by_charter.ok and again.ok and by_route.ok
    charter_refusals = _tool_results(layout, by_charter.session_id or "")
    assert all("tester's charter allows only squad_status" in r for r in charter_refusals)
    assert len(charter_refusals) == 2
    route_results = _tool_results(layout, by_route.session_id or "")
    assert "availableTools" in route_results[1] and "may not be used" in route_results[1]


async def test_each_runtime_keeps_its_own_spare_python_worker_and_ends_it_on_exit(
        layout: SquadLayout) -> None:
    from squadd.config import Settings
    from squadd.state.owner import process_start

    layout.tools_dir.mkdir(parents=True, exist_ok=True)
    (layout.tools_dir / "echo.py").write_text(
        'from squadd import tool\n\n\n@tool\ndef echo(text: str) -> str:\n'
        '    """Say it back."""\n    return text\n', encoding="utf-8")
    configured = Settings.model_validate({"provider": {"kind": "openai",
                                                       "base_url": "http://127.0.0.1:9"}})
    first = SquadRuntime.from_settings(layout, configured)
    second = SquadRuntime.from_settings(layout, configured)
    assert first.python_workers is not None and second.python_workers is not None
    assert first.extra_tools is not None
    async with first:
        found = await anyio.to_thread.run_sync(first.extra_tools)  # discovery starts a spare
        assert "echo" in [tool.name for tool in found]
        [spare] = first.python_workers.waiting()
        assert second.python_workers.waiting() == []
    assert first.python_workers.waiting() == []
    assert process_start(spare) is None  # killed and reaped when the runtime ended


def _charter_reads(monkeypatch: pytest.MonkeyPatch, *, fail_first: bool = False) -> list[str]:
    """The agents whose charter is read from disk (not a cached hit), as they are read; with
    `fail_first` the first such read raises `StateError`."""
    from squadd.errors import StateError
    from squadd.runtime.planning import CharterCache

    reads: list[str] = []
    read = CharterCache.get

    def counting(self: CharterCache, agent: str) -> object:
        reads.append(agent)
        if fail_first and len(reads) == 1:
            raise StateError("the charter could not be read this time")
        return read(self, agent)

    monkeypatch.setattr(CharterCache, "get", counting)
    return reads


async def _routes_at_once(layout: SquadLayout, count: int) -> list[RouteResult | None]:
    """`count` routes to lead started together; None for one that raised `StateError`."""
    from squadd.errors import StateError

    results: list[RouteResult | None] = []
    async with SquadRuntime(layout, settings(max_concurrent=4), script([text("ok")])) as runtime:
        async def one(n: int) -> None:
            try:
                results.append(await runtime.route(RouteRequest(target_agent="lead",
                                                                task=f"t {n}")))
            except StateError:
                results.append(None)

        with anyio.fail_after(30):  # nobody waits forever on a read
            async with anyio.create_task_group() as tg:
                for n in range(count):
                    tg.start_soon(one, n)
    return results


async def test_a_burst_of_routes_to_an_uncached_charter_reads_it_once(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _charter_reads(monkeypatch)
    results = await _routes_at_once(layout, 20)
    assert len(results) == 20 and all(result is not None and result.ok for result in results)
    assert reads == ["lead"]  # one read in a worker thread; the other 19 waited for it


async def test_when_the_one_charter_read_fails_the_routes_waiting_on_it_read_again(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _charter_reads(monkeypatch, fail_first=True)
    results = await _routes_at_once(layout, 5)
    assert reads == ["lead", "lead"]  # the failed read, then one more for the four waiting
    assert sum(1 for r in results if r is not None and r.ok) == 4


def _held_planning(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], anyio.Event]:
    """Each route's planning, recorded by task, holds its admission place until the event."""
    planning: list[str] = []
    go = anyio.Event()
    plan = Planner.plan

    async def held(self: Planner, request: RouteRequest, origin: object,
                   settings: object) -> object:
        planning.append(request.task)
        await go.wait()
        return await plan(self, request, origin, settings)  # type: ignore[arg-type]

    monkeypatch.setattr(Planner, "plan", held)
    return planning, go


async def test_a_burst_of_routes_is_planned_a_bounded_number_at_a_time_in_arrival_order(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    from squadd.runtime import runtime as runtime_module

    planning, go = _held_planning(monkeypatch)
    count = runtime_module.ADMITTING + 36
    results: list[RouteResult] = []
    async with SquadRuntime(layout, settings(max_queued=count), script([text("ok")])) as runtime:
        async def one(n: int) -> None:
            results.append(await runtime.route(RouteRequest(target_agent="lead",
                                                            task=f"job {n}")))

        async with anyio.create_task_group() as tg:
            for n in range(count):
                tg.start_soon(one, n)
            await eventually(lambda: len(planning) >= runtime_module.ADMITTING)
            for _ in range(20):  # the rest wait their turn, however long this one takes
                await anyio.lowlevel.checkpoint()
            assert len(planning) == runtime_module.ADMITTING
            go.set()
    assert planning == [f"job {n}" for n in range(count)]  # every one, in the order they came
    assert len(results) == count and all(result.ok for result in results)


async def test_a_route_cancelled_in_or_waiting_for_its_admission_place_gives_it_back(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    from squadd.runtime import runtime as runtime_module

    planning, go = _held_planning(monkeypatch)
    places = runtime_module.ADMITTING
    count = places + 3
    cancelled = {0, places + 1}  # one holding a place (being planned), one waiting for one
    scopes = {n: anyio.CancelScope() for n in cancelled}
    results: list[RouteResult] = []
    async with SquadRuntime(layout, settings(max_queued=count), script([text("ok")])) as runtime:
        async def one(n: int) -> None:
            with scopes.get(n, anyio.CancelScope()):
                results.append(await runtime.route(RouteRequest(target_agent="lead",
                                                                task=f"job {n}")))

        async with anyio.create_task_group() as tg:
            for n in range(count):
                tg.start_soon(one, n)
            await eventually(lambda: len(planning) >= places)
            for n in cancelled:
                scopes[n].cancel()
            # The place job 0 held goes to the first in line; the cancelled waiter gets none.
            await eventually(lambda: len(planning) == places + 1)
            go.set()
        assert runtime._admitting.value == places  # every place is back
    assert planning == [f"job {n}" for n in range(count) if n != places + 1]
    assert len(results) == count - 2 and all(result.ok for result in results)


async def test_settings_applied_while_running_reach_the_tools_the_pool_and_the_workspaces(
        layout: SquadLayout) -> None:
    """What a reload hands the runtime: the next tool call meets the new approval rule, the
    pool its new size, the next landing its new land_check."""
    from squadd.contracts.messages import ToolCall
    from squadd.tools.invoke import CallOrigin

    provider = script(lead=[call("squad_decide", title="Ship it", body="b", agentName="lead"),
                            text("done")])
    async with SquadRuntime(layout, settings(max_concurrent=2), provider) as runtime:
        changed = runtime.settings.model_copy(update={
            "tools": runtime.settings.tools.model_copy(
                update={"approvals": {"squad_decide": "deny"}}),
            "pool": runtime.settings.pool.model_copy(update={"max_concurrent": 5}),
            "workspace": runtime.settings.workspace.model_copy(
                update={"land_check": "make check"})})
        assert runtime.apply_settings(changed) == []
        decide = ToolCall(id="c1", name="squad_decide",
                          arguments={"title": "t", "body": "b", "agentName": "lead"})
        refused = await runtime.invoker.invoke(runtime.tools, decide,
                                               CallOrigin(session_id="outside", agent="user"))
        routed = await runtime.route(RouteRequest(task="decide", target_agent="lead"))
    assert not refused.ok and "denied by tools.approvals rule" in refused.text
    assert runtime.pool.totals().max_concurrent == 5
    assert runtime.workspaces.settings.land_check == "make check"
    assert routed.ok and not any(layout.inbox_dir.glob("*.md"))  # its decide was refused too
