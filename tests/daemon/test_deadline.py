"""The stop's deadline: a stop held up by a disk that does not answer still ends the daemon,
and what it had told callers of survives for the next start."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from squadd.cli.control import UNFINISHED_EXIT
from squadd.daemon.deadline import EXIT_CODE, StopDeadline
from squadd.state.transcripts import read_transcript
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess, make_repo
from tests.support.model_servers import OpenAIServer

WAIT_S = 30.0
"""How long a test waits for a deadline of a fraction of a second to fire (never the bound
under test: only the limit past which the test gives up)."""


class Exits:
    """Stands in for `os._exit`: records the status and lets the test wait for it."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.called = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.called.set()


def test_an_armed_deadline_ends_the_process_with_its_status() -> None:
    exits = Exits()
    deadline = StopDeadline(exit=exits)
    deadline.arm(0.05, "the stop")
    assert exits.called.wait(WAIT_S)
    assert exits.codes == [EXIT_CODE] and deadline.expired


def test_a_deadline_disarmed_in_time_never_ends_the_process() -> None:
    exits = Exits()
    deadline = StopDeadline(exit=exits)
    deadline.arm(WAIT_S, "the stop")
    deadline.disarm()  # joins the watching thread: it has ended without calling exit
    deadline.arm(0.0, "armed again after the end")  # no effect once disarmed
    assert not exits.called.is_set() and exits.codes == [] and not deadline.expired


@pytest.mark.parametrize("order", ["shorter second", "shorter first"])
def test_the_earlier_of_two_deadlines_wins(order: str) -> None:
    exits = Exits()
    deadline = StopDeadline(exit=exits)
    times = [3600.0, 0.05] if order == "shorter second" else [0.05, 3600.0]
    for seconds in times:
        deadline.arm(seconds, "the stop")
    assert exits.called.wait(WAIT_S)  # an hour would have outlasted the test
    assert exits.codes == [EXIT_CODE]


# The daemon's disk stops answering when the journal is checkpointed at the stop: the sync
# never returns. Everything before (the route, its answer) works as usual.
STUCK_DISK = """\
import threading

from squadd.state.journal import files


def never_returns(*args, **kwargs):
    threading.Event().wait()


files.sync_all = never_returns

from squadd.cli import run

run()
"""


class LaunchedDaemon(DaemonProcess):
    """`squadd serve` started through `launcher`, a script that breaks something first."""

    launcher: Path

    @property
    def command(self) -> list[str]:
        return [sys.executable, str(self.launcher), *super().command[3:]]


def launched(tmp_path: Path, model_url: str, script: str) -> LaunchedDaemon:
    """A daemon in a new repo, with a second of grace and a second past it to stop in,
    started through `script`."""
    config = FAST_CONFIG.replace("grace_s = 1.0\n", "grace_s = 1.0\nstop_timeout_s = 1.0\n")
    daemon = LaunchedDaemon(make_repo(tmp_path / "repo", config=config), model_url)
    daemon.launcher = tmp_path / "launcher.py"
    daemon.launcher.write_text(script, encoding="utf-8")
    return daemon


@pytest.mark.slow
def test_a_stop_held_by_a_disk_that_does_not_answer_ends_at_its_deadline(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    model_server.script(OpenAIServer.text_turn("done"), OpenAIServer.text_turn("again"))
    stuck = launched(tmp_path, model_server.url, STUCK_DISK)
    layout = stuck.layout
    with stuck:
        answered = stuck.client.route("say done", "lead")
        assert answered["ok"] and answered["answer"] == "done", answered
        stopped = stuck.squadd("stop", timeout=WAIT_S + 60)  # as a person stops it
        assert stuck.wait(timeout=WAIT_S + 30) == EXIT_CODE, stuck.output
    # `stop` does not say "stopped" of a stop that did not finish; it names what was left
    assert stopped.returncode == UNFINISHED_EXIT, stopped
    assert "stop did not finish" in stopped.stderr and "stopped" not in stopped.stdout
    assert f"{stuck.pid}-" in stopped.stderr and "next start to replay" in stopped.stderr
    assert "squadd stop did not end in time" in stuck.output
    assert "squadd stopped" not in stuck.output  # it did not get that far
    journals = list(layout.transcript_journals_dir.iterdir())
    assert journals  # not checkpointed: left for the next start
    transcript = read_transcript(layout.transcript(answered["session_id"]))
    assert transcript.final_answer == "done"

    with DaemonProcess(layout, model_server.url) as second:
        again = second.client.route("say again", "lead")
        assert again["ok"] and again["answer"] == "again", again
        clean = second.squadd("stop", timeout=60)
        assert clean.returncode == 0 and f"(PID {second.pid}) stopped" in clean.stdout, clean
        assert second.wait() == 0
    assert not any(path in journals for path in layout.transcript_journals_dir.iterdir())
    assert read_transcript(layout.transcript(answered["session_id"])).final_answer == "done"


# A thread that never ends, as one a cancelled call gave up on while the disk it reads does not
# answer: the interpreter's exit waits for it, after the daemon has stopped.
STUCK_THREAD = """\
import threading

from squadd.daemon import server

real_run = server.Daemon.run


def run_beside_a_stuck_thread(self, **kwargs):
    threading.Thread(target=threading.Event().wait, name="stuck-read").start()
    real_run(self, **kwargs)


server.Daemon.run = run_beside_a_stuck_thread

from squadd.cli import run

run()
"""


@pytest.mark.slow
def test_a_thread_stuck_at_the_exit_cannot_keep_a_stopped_daemon_alive(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    model_server.script(OpenAIServer.text_turn("done"))
    daemon = launched(tmp_path, model_server.url, STUCK_THREAD)
    with daemon:
        answered = daemon.client.route("say done", "lead")
        assert answered["ok"] and answered["answer"] == "done", answered
        stopped = daemon.squadd("stop", timeout=WAIT_S + 60)
        assert daemon.wait(timeout=WAIT_S + 30) == EXIT_CODE, daemon.output
    # the stop itself finished (journal closed): `stop` says so; only the exit was held
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped
    assert "did not end in time" in daemon.output and "which waits for every thread" in \
        daemon.output
    assert not list(daemon.layout.transcript_journals_dir.iterdir())
