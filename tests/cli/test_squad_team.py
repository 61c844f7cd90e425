"""A large Squad team used in place: doctor, agent list and agent add in process; route with no
agent named and status over a real daemon and a real HTTP model server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner, Result

from squadd.cli.app import main
from squadd.state.layout import SquadLayout
from squadd.state.members import parse_members
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess
from tests.support.model_servers import OpenAIServer
from tests.support.squad_team import AGENTS, SKILL_DESCRIPTIONS


def _cli(team: SquadLayout, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--dir", str(team.repo)])


def _findings(team: SquadLayout) -> list[dict[str, Any]]:
    result = _cli(team, "doctor", "--squad-compat", "--json")
    assert result.exit_code == 0, result.output
    findings: list[dict[str, Any]] = json.loads(result.stdout)["findings"]
    return findings


def test_squad_compat_names_file_and_line_of_each_difference(team: SquadLayout) -> None:
    found = {(f["file"], f["line"], f["level"]): f["message"] for f in _findings(team)}
    team_md, routing = ".squad/team.md", ".squad/routing.md"
    assert "Ghost has no charter" in found[(team_md, 35, "warn")]
    assert "Name cell is empty" in found[(team_md, 36, "warn")]
    assert "'💤 Inactive'" in found[(team_md, 30, "note")]
    assert "Launch Rituals" in found[(team_md, 42, "note")]
    assert "which has no charter" in found[(routing, 17, "warn")]
    assert "names no agent ('???')" in found[(routing, 18, "warn")]
    assert "Silent" in found[(routing, 15, "note")]
    assert "has no Work Type (or Pattern) column" in found[(routing, 22, "note")]
    # Squad 0.10 ignores log/ and sessions/ too: an old .gitignore listing them is no fault.
    assert not any(file == ".squad/.gitignore" for (file, _line, _level) in found)
    assert "## Rituals" in found[(".squad/agents/orbit/charter.md", 33, "note")]
    assert "no 'description'" in found[(".copilot/skills/no-front-matter/SKILL.md", 1, "note")]
    assert any(f[0] == ".github/skills/api-errors/SKILL.md" for f in found)
    routing_lines = {line for (file, line, _level) in found if file == routing}
    assert routing_lines == {14, 15, 17, 18, 22}  # the commented and fenced examples are not data
    assert not any("no routing rules" in message for message in found.values())
    # the 19 active or known-status members with charters raise nothing
    flagged = {m for m in found.values() for a in AGENTS if f"{a.display} " in m}
    assert flagged <= {found[(team_md, 30, "note")], found[(routing, 14, "note")],
                       found[(routing, 15, "note")]}


def test_plain_doctor_summarises_the_compat_report(team: SquadLayout) -> None:
    checks = {c["name"]: c for c in json.loads(_cli(team, "doctor", "--json").stdout)["checks"]}
    assert checks["roster"]["summary"] == "21 agents"
    compat = checks["squad compat"]
    assert compat["status"] == "warn" and compat["summary"] == "4 warnings, 8 notes"
    assert ".squad/team.md:35: warn: Ghost has no charter" in "\n".join(compat["details"])


def test_agent_list_shows_display_names_statuses_and_team_roles(team: SquadLayout) -> None:
    listed = json.loads(_cli(team, "agent", "list", "--json").stdout)["agents"]
    by_name = {a["name"]: a for a in listed}
    assert len(listed) == 21 and set(by_name) == {a.folder for a in AGENTS}
    for agent in AGENTS:
        entry = by_name[agent.folder]
        assert (entry["display_name"], entry["status"], entry["role"]) == (
            agent.display, agent.status, agent.role)
    assert by_name["scribe"]["status_kind"] == "silent"
    assert by_name["watchman"]["status_kind"] == "monitor"
    assert by_name["nimbus"]["status_kind"] == "other"
    table = _cli(team, "agent", "list").stdout
    assert "TELEMETRY  ✅ Active" in table and "Watchman   🔄 Monitor" in table


def test_a_member_added_by_squadd_follows_the_teams_conventions(team: SquadLayout) -> None:
    result = _cli(team, "agent", "add", "gnc", "--role", "Guidance")
    assert result.exit_code == 0, result.output
    text = team.team_md.read_text(encoding="utf-8")
    row = "| Gnc | Guidance | `.squad/agents/gnc/charter.md` | ✅ Active |"
    lines = text.splitlines()
    assert lines[lines.index(row) - 1].startswith("|  | (vacant seat) |")  # the table's end
    member = parse_members(text).by_folder()["gnc"]
    assert member.status == "✅ Active" and member.routable and member.line == 37
    # what Squad counts: rows whose status cell is exactly "✅ Active"
    assert sum(line.endswith("| ✅ Active |") for line in lines) == 20
    listed = json.loads(_cli(team, "agent", "list", "--json").stdout)["agents"]
    assert [a["status"] for a in listed if a["name"] == "gnc"] == ["✅ Active"]


@pytest.mark.slow
def test_route_with_no_agent_named_and_status_on_the_team(team: SquadLayout) -> None:
    (team.root / "config.toml").write_text(FAST_CONFIG, encoding="utf-8")
    with OpenAIServer() as server, DaemonProcess(team, server.url) as daemon:
        server.script(OpenAIServer.text_turn("Index added."),
                      OpenAIServer.text_turn("Guide written."))
        routed = daemon.squadd("route", "Speed up the orders query, it is slow", "-q")
        assert routed.returncode == 0, routed.stderr
        assert routed.stdout == "Index added.\n"
        mentioned = daemon.squadd("route", "Please @QUILL write the upgrade notes", "-q")
        assert mentioned.stdout == "Guide written.\n", mentioned.stderr
        nobody = daemon.squadd("route", "Prepare the monthly spend report", "-q")
        assert nobody.returncode != 0 and "routing.md matched nothing" in nobody.stderr
        status = json.loads(daemon.squadd("status", "--json").stdout)
        assert sorted(s["agent"] for s in status["sessions"]) == ["quill", "vector"]
        system = server.bodies[0]["messages"][0]["content"]
    assert system.startswith("You are vector, a Squad agent.")
    for name, description in SKILL_DESCRIPTIONS.items():
        assert f"- {name}: {description}" in system
    assert "An older copy" not in system  # the .github copy of api-errors wins
    [log] = team.orchestration_dir.glob("*-vector.md")
    text = log.read_text(encoding="utf-8")
    assert "| **Agent routed** | vector (Backend Engineer) |" in text
    assert "| **Why chosen** | matched a row of routing.md |" in text
    assert "| **Outcome** | Completed |" in text


def test_squad_compat_reads_the_preset_table_and_names_a_table_it_cannot_read(
    team: SquadLayout,
) -> None:
    team.routing_md.write_text(
        "# Work Routing\n\n## Routing Table\n\n| Area | Who |\n|---|---|\n| API | VECTOR |\n\n"
        "## Work Type → Agent\n\n| Work Type | Primary | Secondary |\n|---|---|---|\n"
        "| metrics | TELEMETRY | — |\n| cost reports | Nimbus | Ghost |\n", encoding="utf-8")
    found = {(f["line"], f["level"]): f["message"] for f in _findings(team)
             if f["file"] == ".squad/routing.md"}
    assert "not read as routing rules: its header '| Area | Who |' has no agent column" in (
        found[(5, "warn")])
    assert "'Ghost' (ghost), which has no charter" in found[(14, "warn")]  # the Secondary cell
    assert "Nimbus, whose status is '💤 Inactive'" in found[(14, "note")]
    assert set(found) == {(5, "warn"), (14, "warn"), (14, "note")}  # the Primary rows are rules
