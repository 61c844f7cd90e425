"""Squad reads back every byte squadd writes.

squadd works on two teams (one the real `squad init` + `squad preset apply default` made, one a
realistic hand-grown team shipped in `kestrel/`): `doctor --squad-compat`, `agent add`, routes
through a model that decides and learns, and Scribe passes. Squad's own exported parsers
(`squad_read.mjs`) then read both, and the real CLI's `doctor` still accepts them: members and
statuses, routing rules, every decision whole with its date and author, every learning in place,
skills, and a `git diff` holding only the lines squadd meant to change.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import SquadJs
from tests.support.model_servers import OpenAIServer

pytestmark = pytest.mark.interop

KESTREL = Path(__file__).with_name("kestrel")
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
TEMPLATE_SECTIONS = {"Active Decisions", "Governance"}
"""Squad's decisions.md template headings, which Squad's parser lists as decisions too."""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, env={**os.environ, **GIT_ENV},
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def squadd(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "squadd", *args], cwd=repo,
                          env={**os.environ, "NO_COLOR": "1"}, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, f"squadd {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
    return done


def run_session(repo: Path, server: OpenAIServer, agent: str, task: str) -> dict[str, Any]:
    done = squadd(repo, "run", agent, task, "--provider", "openai", "--base-url", server.url,
                  "--model", "test-model", "--json")
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


def doctor_failures(squad_js: SquadJs, repo: Path, home: Path) -> int:
    done = squad_js.squad(repo, home, "doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    match = re.search(r"(\d+) failed", done.stdout)
    assert match, done.stdout
    return int(match.group(1))


def byte_lines(data: bytes) -> list[bytes]:
    out, start = [], 0
    while (end := data.find(b"\n", start)) >= 0:
        out.append(data[start:end + 1])
        start = end + 1
    return out + ([data[start:]] if start < len(data) else [])


def diff(before: bytes, after: bytes) -> tuple[list[bytes], list[bytes]]:
    """(removed, added) lines of one file, byte for byte."""
    old, new = byte_lines(before), byte_lines(after)
    removed: list[bytes] = []
    added: list[bytes] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            removed += old[i1:i2]
            added += new[j1:j2]
    return removed, added


def committed(repo: Path, path: str) -> bytes:
    return subprocess.run(["git", "show", f"HEAD:{path}"], cwd=repo, capture_output=True,
                          timeout=60, check=True).stdout


def decisions_by_title(read: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["title"]: d for d in read["decisions"]["ok"]}


def learning_entries(read: dict[str, Any], agent: str) -> list[dict[str, Any]]:
    return [e for e in read["agents"][agent]["history"]["ok"] if e["section"] == "Learnings"]


@pytest.fixture
def kestrel(tmp_path: Path) -> Path:
    repo = tmp_path / "kestrel"
    shutil.copytree(KESTREL, repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the Kestrel team")
    return repo


def test_squad_reads_back_a_grown_team_after_squadd_worked_on_it(
    squad_js: SquadJs, kestrel: Path, tmp_path: Path,
) -> None:
    repo, squad = kestrel, kestrel / ".squad"
    home = tmp_path / "home"
    home.mkdir()
    before = squad_js.read(repo)
    failed_before = doctor_failures(squad_js, repo, home)
    assert len(learning_entries(before, "osprey")) == 24  # Squad reads the last Learnings only

    compat = json.loads(squadd(repo, "doctor", "--squad-compat", "--json").stdout)["findings"]
    routing_findings = [f for f in compat if f["file"] == ".squad/routing.md"]
    assert not [f for f in routing_findings if f["level"] == "warn"], routing_findings
    assert not any("no routing rules" in f["message"] for f in compat)
    assert not any("Ralph" in f["message"] and f["level"] == "warn" for f in compat)
    listed = json.loads(squadd(repo, "agent", "list", "--json").stdout)["agents"]
    assert {a["name"] for a in listed} == {"osprey", "wren", "tern", "scribe", "ralph"}

    squadd(repo, "agent", "add", "kite", "--role", "Data Engineer")
    today = dt.date.today().isoformat()
    with OpenAIServer() as server:
        server.script(
            OpenAIServer.tool_call_turn(("squad_memory", {
                "agentName": "osprey", "category": "architecture",
                "learning": "Secure boot keys live in the HSM, never on the rig. 🔐"})),
            OpenAIServer.tool_call_turn(("squad_decide", {
                "agentName": "osprey", "title": "Sign every OTA image", "category": "security",
                "body": "## Why\n\nAn unsigned image bricked a field unit.\n\n## How\n\n"
                        "- ed25519, keys in the HSM"})),
            OpenAIServer.text_turn("Reviewed."),
            OpenAIServer.tool_call_turn(("squad_memory", {
                "agentName": "tern", "category": "process",
                "learning": "Quarantine a flaky rig run after two failures in a row."})),
            OpenAIServer.text_turn("Done."),
            OpenAIServer.tool_call_turn(("squad_memory", {
                "agentName": "wren", "category": "technical",
                "learning": "The gust filter fits in the ISR at 4 Hz."})),
            OpenAIServer.text_turn("Done."),
        )
        routed = run_session(repo, server, "auto", "security review of the secure boot chain")
        assert routed["agent"] == "osprey"  # the `Primary` table's row
        run_session(repo, server, "tern", "Tidy the flaky rig runs")
        run_session(repo, server, "wren", "Move the gust filter")
    for _ in range(6):
        squadd(repo, "scribe")
    assert not list((squad / "decisions" / "inbox").glob("*.md"))

    after = squad_js.read(repo)
    assert doctor_failures(squad_js, repo, home) == failed_before

    # Members and statuses: the new agent added, nobody else changed.
    assert after["team"]["ok"] == [*before["team"]["ok"],
                                   {"name": "kite", "role": "Data Engineer",
                                    "status": "✅ Active"}]
    assert after["routing"] == before["routing"]
    assert after["skills"] == before["skills"]

    # Every decision whole, with its date and author; archived ones are in the archive.
    old, new = decisions_by_title(before), decisions_by_title(after)
    archived = set(after["archiveHeadings"])
    for title, decision in old.items():
        if title in new:
            assert new[title] == decision
        else:
            assert f"### {decision['date']}: {title}" in archived
    assert len(archived) > 0 and len(archived) + len(new) == len(old) + 3
    wind = new["Sample wind speed at 4 Hz"]
    assert (wind["date"], wind["author"]) == ("2026-07-02", "Osprey")
    for part in ("#### Context", "#### Decision", "#### Constraints", "#### Consequences",
                 "Wren moves the gust filter into the ISR."):
        assert part in wind["body"]
    rig = next(d for t, d in new.items() if t.startswith("rig nightly"))
    assert rig["author"] == "Tern" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", rig["date"])
    assert "#### Why" in rig["body"]
    signed = new["Sign every OTA image"]
    assert (signed["date"], signed["author"]) == (today, "Osprey")
    assert "#### Why" in signed["body"] and "ed25519" in signed["body"]
    dated = [d for t, d in new.items() if t not in TEMPLATE_SECTIONS]
    assert all(d["date"] and d["author"] for d in dated)
    assert after["decisionCount"] == len(dated)

    # Learnings: the newest stay where Squad reads them; the oldest went to the archive.
    osprey_before = learning_entries(before, "osprey")
    osprey_after = learning_entries(after, "osprey")
    assert osprey_after[-1]["timestamp"] == today
    assert "Secure boot keys live in the HSM" in osprey_after[-1]["content"]
    kept = [e for e in osprey_before if e in osprey_after]
    gone = [e for e in osprey_before if e not in osprey_after]
    assert kept and osprey_after == [*kept, osprey_after[-1]]
    assert not gone or max(e["timestamp"] for e in gone) <= min(e["timestamp"] for e in kept)
    assert after["agents"]["osprey"]["archivedEntries"] >= 20 + len(gone)  # the first section's too
    # Tern's history had no learning: Squad's dated entries, one per learning or team update.
    tern = learning_entries(after, "tern")
    assert {"timestamp": today, "section": "Learnings",
            "content": "Quarantine a flaky rig run after two failures in a row."} in tern
    updates = [e for e in tern if e["content"].startswith("📌 Team update")]
    assert len(tern) == len(updates) + 1 and all(e["timestamp"] for e in updates)
    assert any("Sample wind speed at 4 Hz" in e["content"] for e in updates)
    [wren] = learning_entries(after, "wren")  # a bullet file stays a bullet file
    assert "- **[technical]** The gust filter fits in the ISR at 4 Hz." in wren["content"]
    assert after["agents"]["kite"]["charter"]["ok"]["role"] == "Data Engineer"

    # git: only the lines squadd meant to change differ, in each file's own bytes.
    changed = set(git(repo, "diff", "--name-only").split())
    assert changed == {".squad/team.md", ".squad/decisions.md", ".squad/agents/osprey/history.md",
                       ".squad/agents/tern/history.md", ".squad/agents/wren/history.md",
                       ".squad/casting/registry.json", ".squad/casting/history.json",
                       ".squad/decisions/inbox/osprey-wind-sampling.md",
                       ".squad/decisions/inbox/tern-rig-nightly.md"}
    removed, added = diff(committed(repo, ".squad/team.md"), (squad / "team.md").read_bytes())
    assert removed == [] and len(added) == 1
    assert added[0].startswith(b"| Kite | Data Engineer |") and added[0].endswith(b"\r\n")
    assert (squad / "team.md").read_bytes().startswith(b"\xef\xbb\xbf")
    decisions = (squad / "decisions.md").read_bytes()
    removed, added = diff(committed(repo, ".squad/decisions.md"), decisions)
    archive = (squad / "decisions-archive.md").read_bytes()
    # The file lacked a final newline: its last line gains one, as the entries go after it.
    last = committed(repo, ".squad/decisions.md").rsplit(b"\n", 1)[1]
    assert removed.count(last) == 1 and last + b"\r\n" in added
    moved = [line for line in removed if line.strip() and line != last]
    assert moved and all(line in archive for line in moved), [
        line for line in moved if line not in archive]
    assert all(line.endswith(b"\r\n") for line in added)
    assert decisions.count(b"\r\n") == decisions.count(b"\n")  # still all CRLF
    assert decisions.count(b"its\rpower budget") + archive.count(b"its\rpower budget") == 5
    wren_bytes = (squad / "agents" / "wren" / "history.md").read_bytes()
    removed, added = diff(committed(repo, ".squad/agents/wren/history.md"), wren_bytes)
    assert removed == [b"- **[technical]** Sleep current is 38 \xc2\xb5A with the radio off. "
                       b"\xf0\x9f\x94\x8b"]  # the last line, which had no newline, gains one
    assert removed[0] + b"\r\n" in added
    assert b"- **[technical]** The gust filter fits in the ISR at 4 Hz.\r\n" in added
    assert all(line.startswith(b"- ") and line.endswith(b"\r\n") for line in added)
    assert len(added) >= 2
    assert wren_bytes.startswith(b"\xef\xbb\xbf") and b"first,\rthen" in wren_bytes
    osprey_history = (squad / "agents" / "osprey" / "history.md").read_bytes()
    removed, added = diff(committed(repo, ".squad/agents/osprey/history.md"), osprey_history)
    osprey_archive = (squad / "agents" / "osprey" / "history-archive.md").read_bytes()
    assert all(line in osprey_archive for line in removed if line.strip())
    assert b"# Osprey \xe2\x80\x94 Project History (v2 hardware)\n" in osprey_history
    assert osprey_history.count(b"## Learnings\n") == 2  # no section moved whole
    assert all(line.endswith(b"\n") and not line.endswith(b"\r\n") for line in added)
    assert (squad / "routing.md").read_bytes() == committed(repo, ".squad/routing.md")
    registry = json.loads((squad / "casting" / "registry.json").read_text())
    assert registry["agents"]["kite"]["persistent_name"] == "Kite"
    removed, added = diff(committed(repo, ".squad/casting/registry.json"),
                          (squad / "casting" / "registry.json").read_bytes())
    assert removed in ([], [b"    }\n"]) and len(added) <= 7


def test_squad_reads_back_a_team_the_real_cli_made(squad_js: SquadJs, tmp_path: Path) -> None:
    repo, home = tmp_path / "app", tmp_path / "home"
    repo.mkdir()
    home.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for args in (("init", "--no-workflows"), ("preset", "init"), ("preset", "apply", "default")):
        done = squad_js.squad(repo, home, *args)
        assert done.returncode == 0, f"squad {' '.join(args)}:\n{done.stdout}{done.stderr}"
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "squad init")
    squad = repo / ".squad"
    before = squad_js.read(repo)
    failed_before = doctor_failures(squad_js, repo, home)
    assert len(before["routing"]["ok"]) == 5  # `| Work Type | Primary | Secondary |`

    compat = json.loads(squadd(repo, "doctor", "--squad-compat", "--json").stdout)["findings"]
    assert not any("no routing rules" in f["message"] for f in compat), compat
    assert not any("Rai" in f["message"] and f["level"] == "warn" for f in compat), compat
    listed = {a["name"] for a in json.loads(squadd(repo, "agent", "list", "--json").stdout)[
        "agents"]}
    assert {"rai", "ralph", "scribe", "security", "lead"} <= listed
    squadd(repo, "agent", "add", "kite", "--role", "Data Engineer")
    today = dt.date.today().isoformat()
    with OpenAIServer() as server:
        server.script(
            OpenAIServer.tool_call_turn(("squad_memory", {
                "agentName": "security", "category": "technical",
                "learning": "The login flow rate-limits by account, not by IP."})),
            OpenAIServer.tool_call_turn(("squad_decide", {
                "agentName": "security", "title": "Lock accounts after ten failures",
                "category": "security", "body": "## Context\n\nCredential stuffing."})),
            OpenAIServer.text_turn("Reviewed."),
            OpenAIServer.tool_call_turn(("squad_memory", {
                "agentName": "rai", "category": "process",
                "learning": "Redact tokens from every audit line."})),
            OpenAIServer.text_turn("Noted."),
        )
        routed = run_session(repo, server, "auto", "security review of the login flow")
        assert routed["agent"] == "security"
        run_session(repo, server, "rai", "Check the audit trail")
    for _ in range(2):
        squadd(repo, "scribe")

    after = squad_js.read(repo)
    assert doctor_failures(squad_js, repo, home) == failed_before
    assert after["routing"] == before["routing"]
    assert after["team"]["ok"] == [*before["team"]["ok"],
                                   {"name": "kite", "role": "Data Engineer",
                                    "status": "✅ Active"}]
    decided = decisions_by_title(after)["Lock accounts after ten failures"]
    assert (decided["date"], decided["author"]) == (today, "security")
    assert "#### Context" in decided["body"]
    assert {t: d for t, d in decisions_by_title(after).items()
            if t != "Lock accounts after ten failures"} == decisions_by_title(before)
    [learned] = [e for e in learning_entries(after, "security") if e["timestamp"]]
    assert learned["content"] == "The login flow rate-limits by account, not by IP."
    [rai] = learning_entries(after, "Rai")  # Squad's own folder name: squadd wrote into it
    assert (rai["timestamp"], rai["content"]) == (today, "Redact tokens from every audit line.")
    assert not (squad / "agents" / "rai").exists()
    registry = json.loads((squad / "casting" / "registry.json").read_text())
    assert registry["agents"]["kite"]["status"] == "active"
    history = json.loads((squad / "casting" / "history.json").read_text())
    assert any(s["agents"] == ["kite"] for s in history["assignment_cast_snapshots"].values())
    # The preset's agents have no history.md yet: squadd makes security's (untracked, so not in
    # the diff); the rest are the files squadd meant to change.
    assert git(repo, "ls-files", "--others", ".squad/agents/security") == (
        ".squad/agents/security/history.md\n")
    assert set(git(repo, "diff", "--name-only").split()) == {
        ".squad/team.md", ".squad/agents/Rai/history.md",
        ".squad/casting/registry.json", ".squad/casting/history.json", ".squad/decisions.md"}
    removed, _ = diff(committed(repo, ".squad/decisions.md"), (squad / "decisions.md").read_bytes())
    assert removed == []
