"""One bad file never stops the Scribe for everyone: a history.md that is not UTF-8 is left alone,
named (report, event, log, doctor), and announced again only once it changes; a pass that keeps
failing is retried less and less often and logged in full once."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import anyio
import pytest
import structlog.testing

from squadd.cli.doctor import run_checks
from squadd.config import ScribeSettings, Settings
from squadd.contracts.events import BaseEvent, ScribeRejected
from squadd.errors import NotUtf8Error
from squadd.scribe import ScribeMemory, merge_inbox
from squadd.scribe import worker as scribe_worker
from squadd.state.decisions import format_entry
from squadd.state.history import append_learning
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import templates_dir
from squadd.state.team import add_agent
from tests.state.memory_fixtures import grown_history

OLD = time.time() - 3600
LATIN_1 = "# Project Context\n\n## Learnings\n\n- **[team]** Caf\xe9 talk on Fridays\n".encode(
    "latin-1")
BAD_AT = LATIN_1.index(b"\xe9")


class Sink:
    def __init__(self) -> None:
        self.events: list[BaseEvent] = []

    def publish(self, event: BaseEvent) -> None:
        self.events.append(event)


def decide(layout: SquadLayout, name: str, title: str, body: str) -> None:
    path = layout.inbox_dir / name
    path.write_text(format_entry(title=title, body=body, agent="osprey", category="team",
                                 date=None), encoding="utf-8")
    os.utime(path, (OLD, OLD))


@pytest.fixture
def team(squad: SquadLayout) -> SquadLayout:
    for name in ("osprey", "wren", "tern"):
        add_agent(squad, name, "Engineer", templates=templates_dir())
    squad.history("wren").write_bytes(LATIN_1)
    return squad


def rejected(sink: Sink) -> list[ScribeRejected]:
    return [e for e in sink.events if isinstance(e, ScribeRejected)]


def test_a_history_that_is_not_utf8_is_skipped_and_the_others_are_updated(
    team: SquadLayout, caplog: pytest.LogCaptureFixture,
) -> None:
    decide(team, "osprey-rig.md", "Move the rig", "Wren and Tern move the rig on Monday.")
    sink = Sink()

    with caplog.at_level(logging.WARNING):
        report = merge_inbox(team, Settings(), sink)

    assert report.merged == 1 and report.team_updates == 1
    assert "Team update" in team.history("tern").read_text()
    assert team.history("wren").read_bytes() == LATIN_1
    [problem] = report.problems
    assert problem.file == "agents/wren/history.md"
    assert f"not valid UTF-8 at byte offset {BAD_AT}" in problem.reason
    assert [e.file for e in rejected(sink)] == ["agents/wren/history.md"]
    assert "agents/wren/history.md" in caplog.text


def test_a_remembered_bad_file_is_announced_again_only_once_it_changes(
    team: SquadLayout,
) -> None:
    memory, sink = ScribeMemory(), Sink()
    decide(team, "osprey-a.md", "First", "Wren reads this.")
    merge_inbox(team, Settings(), sink, memory=memory)
    decide(team, "osprey-b.md", "Second", "Wren reads this too.")
    second = merge_inbox(team, Settings(), sink, memory=memory)
    assert [p.file for p in second.problems] == ["agents/wren/history.md"]  # still reported
    assert len(rejected(sink)) == 1  # but announced once

    team.history("wren").write_bytes(LATIN_1 + b"\xff")  # changed, still bad
    decide(team, "osprey-c.md", "Third", "Wren again.")
    merge_inbox(team, Settings(), sink, memory=memory)
    assert len(rejected(sink)) == 2

    team.history("wren").write_text(LATIN_1.decode("latin-1"), encoding="utf-8")  # fixed
    decide(team, "osprey-d.md", "Fourth", "Wren, at last.")
    fixed = merge_inbox(team, Settings(), sink, memory=memory)
    assert fixed.problems == [] and fixed.team_updates == 1
    assert "Fourth" in team.history("wren").read_text()


def test_compaction_skips_the_bad_history_and_compacts_the_others(team: SquadLayout) -> None:
    team.history("tern").write_text(grown_history(80, blocks=True, newest_first=True))
    team.history("wren").write_bytes(LATIN_1 * 400)

    report = merge_inbox(team, Settings())

    assert [c.agent for c in report.compacted] == ["tern"]
    assert [p.file for p in report.problems] == ["agents/wren/history.md"]


def test_the_doctor_and_squad_memory_name_the_bad_file(team: SquadLayout) -> None:
    results = {r.name: r for r in run_checks(team.repo)}
    memory = results["memory files"]
    assert memory.status == "warn"
    assert (f"agents/wren/history.md: not valid UTF-8: byte 0xe9 at offset {BAD_AT}"
            in memory.details)

    with pytest.raises(NotUtf8Error, match=f"history.md is not valid UTF-8: byte 0xe9 at "
                                           f"offset {BAD_AT}"):
        append_learning(team, "wren", "anything")
    assert team.history("wren").read_bytes() == LATIN_1


def test_a_failing_pass_backs_off_and_logs_its_traceback_once(
    squad: SquadLayout, monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[Path] = []

    def broken(layout: SquadLayout, *args: object, **kwargs: object) -> None:
        calls.append(layout.root)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(scribe_worker, "merge_inbox", broken)
    settings = Settings(scribe=ScribeSettings(poll_interval_s=2.0, max_backoff_s=10.0))
    failures = scribe_worker._Failures(settings.scribe.poll_interval_s,
                                       settings.scribe.max_backoff_s)
    waits = []

    async def passes() -> None:
        for _ in range(5):
            assert await scribe_worker._run_pass(squad, settings, Sink(), None, failures) is None
            waits.append(failures.wait)

    with structlog.testing.capture_logs() as logged:
        anyio.run(passes)

    assert len(calls) == 5
    assert waits == [2.0, 4.0, 8.0, 10.0, 10.0]
    with_traceback = [entry for entry in logged if entry.get("exc_info")]
    assert len(with_traceback) == 1
    assert logged[-1]["event"] == "scribe.pass_failed_again"
    assert logged[-1]["in_a_row"] == 5
