"""`squadd scribe`: one pass with a readable or JSON report, a dry run, and `--watch`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from squadd.cli.app import main
from squadd.state.decisions import parse_decisions, write_inbox_entry
from squadd.state.layout import SquadLayout
from tests._helpers import REPO_ROOT


def scribe(directory: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["scribe", "--dir", str(directory), *extra])
    return result.exit_code, result.output


def fill_inbox(layout: SquadLayout) -> None:
    write_inbox_entry(layout, agent="lead", title="Use uv", body="Fast installs.")
    write_inbox_entry(layout, agent="lead", title="Use uv again", body="Fast installs.")
    bad = layout.inbox_dir / "lead-bad.md"
    bad.write_bytes(b"\x00")
    quiet = time.time() - 60  # dropped by hand, and quiet for longer than scribe.settle_ms
    os.utime(bad, (quiet, quiet))


def test_a_pass_prints_what_it_merged_skipped_and_rejected(squad: SquadLayout) -> None:
    fill_inbox(squad)

    code, out = scribe(squad.repo)

    assert code == 0, out
    assert out.startswith("2 decisions merged, 0 duplicates skipped, 1 file rejected, "
                          "0 archived")
    assert "lead-use-uv.md" in out and "lead-use-uv-again.md" in out
    assert "rejected lead-bad.md -> decisions/inbox/.rejected/lead-bad.md: binary" in out


def test_json_output_is_the_full_report(squad: SquadLayout) -> None:
    fill_inbox(squad)

    code, out = scribe(squad.repo, "--json")

    assert code == 0, out
    report = json.loads(out)
    assert report["merged"] == 2 and report["dry_run"] is False
    assert report["rejected"][0]["file"] == "lead-bad.md"
    assert report["rejected"][0]["reason"].startswith("binary")


def test_a_dry_run_changes_nothing(squad: SquadLayout) -> None:
    fill_inbox(squad)
    before = squad.decisions_md.read_bytes()

    code, out = scribe(squad.repo, "--dry-run")

    assert code == 0, out
    assert out.startswith("Dry run: 2 decisions would be merged")
    assert squad.decisions_md.read_bytes() == before
    assert (squad.inbox_dir / "lead-bad.md").exists()


def test_watch_and_dry_run_together_are_refused(squad: SquadLayout) -> None:
    code, out = scribe(squad.repo, "--watch", "--dry-run")

    assert code == 2 and "do not go together" in out


def test_outside_a_squad_the_error_names_squadd_init(tmp_path: Path) -> None:
    code, out = scribe(tmp_path)

    assert code == 1 and "squadd init" in out


def test_watch_merges_in_the_foreground_until_sigterm(squad: SquadLayout) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SQUADD_SCRIBE_DEBOUNCE_MS": "50"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "squadd", "scribe", "--watch", "--dir", str(squad.repo)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("Scribe watching ")
        write_inbox_entry(squad, agent="lead", title="Watched from the CLI", body="Yes.")
        deadline = time.monotonic() + 20
        while "Watched from the CLI" not in [
                e.title for e in parse_decisions(squad.decisions_md).entries]:
            assert time.monotonic() < deadline, "the watcher never merged the decision"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, err
    assert "merged 1 decision (0 duplicates skipped) from lead-watched-from-the-cli.md" in out


def test_a_history_that_is_not_utf8_is_named_and_skipped_while_the_rest_merges(
        squad: SquadLayout) -> None:
    fill_inbox(squad)
    squad.history("scribe").write_bytes(b"# History\n\n## Learnings\n\xff\xfe bad\n")
    done = subprocess.run([sys.executable, "-m", "squadd", "scribe", "--dir", str(squad.repo)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    assert "agents/scribe/history.md: not valid UTF-8" in done.stdout, done.stdout
    assert "decisions merged" in done.stdout


@pytest.mark.parametrize("damage, named", [
    (lambda s: (s.history("scribe").unlink(), s.history("scribe").mkdir()),
     "history.md: Is a directory"),
    (lambda s: (s.decisions_md.unlink(), s.decisions_md.mkdir()),
     "decisions.md is not a regular file"),
])
def test_a_file_the_pass_cannot_read_is_named_without_a_traceback(
        squad: SquadLayout, damage: Callable[[SquadLayout], object], named: str) -> None:
    fill_inbox(squad)
    damage(squad)
    done = CliRunner().invoke(main, ["scribe", "--dir", str(squad.repo)])
    # In this process, a traceback would be an exception other than the exit click makes.
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    assert done.exit_code == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and named in done.stderr, done.stderr
