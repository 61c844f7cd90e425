"""team.md's Members table as Squad writes it, and rows written in the table's own style."""

from __future__ import annotations

import pytest

from squadd.state.members import folder_for, member_names, parse_members, status_kind
from squadd.state.team import add_member_row

SQUAD_STYLE = """# Team

<!-- | Example | Not a member | x | ✅ Active | -->

## Members

| Name | Role | Charter | Status |
|------|------|---------|--------|
| EECOM | Flight Engineer | `.squad/agents/eecom/charter.md` | ✅ Active |
| FIDO | Flight Dynamics | `.squad/agents/fido/charter.md` | 📋 Silent |
| Dr. Vega | Medic | `.squad/agents/vega/charter.md` | 🔄 Monitor |
| GUIDO | Guidance | | 💤 Benched |
| ../etc | Intruder | | ✅ Active |

```
| NOTE | Fenced | x | ✅ Active |
```
"""


def test_rows_keep_display_names_statuses_and_take_folders_from_charter_paths() -> None:
    table = parse_members(SQUAD_STYLE)
    got = [(m.display_name, m.folder, m.role, m.status, m.status_kind, m.line)
           for m in table.members]
    assert got == [
        ("EECOM", "eecom", "Flight Engineer", "✅ Active", "active", 9),
        ("FIDO", "fido", "Flight Dynamics", "📋 Silent", "silent", 10),
        ("Dr. Vega", "vega", "Medic", "🔄 Monitor", "monitor", 11),
        ("GUIDO", "guido", "Guidance", "💤 Benched", "other", 12),
    ]
    [problem] = table.problems
    assert problem.line == 13 and "no agent folder" in problem.reason
    assert member_names(SQUAD_STYLE) == ["eecom", "fido", "vega", "guido"]
    assert [m.routable for m in table.members] == [True, False, False, False]


@pytest.mark.parametrize("status, kind", [
    ("✅ Active", "active"), ("active", "active"), ("", "active"), ("**Active**", "active"),
    ("📋 Silent", "silent"), ("🔄 Monitor", "monitor"), ("❌ Retired", "other"),
])
def test_status_kinds(status: str, kind: str) -> None:
    assert status_kind(status) == kind


def test_folders_from_display_names_refuse_path_characters() -> None:
    assert folder_for("EECOM 🔧") == "eecom"
    assert folder_for("Mission Control") == "mission-control"
    assert folder_for("../etc") is None and folder_for("a/b") is None
    assert folder_for("🔧") is None


def test_a_new_row_copies_an_upper_case_backticked_team() -> None:
    result = add_member_row(SQUAD_STYLE, name="retro", role="Retrofire")
    row = "| RETRO | Retrofire | `.squad/agents/retro/charter.md` | ✅ Active |"
    assert row in result.splitlines()
    assert result.index(row) < result.index("```")  # in the table, not after the fence
    assert parse_members(result).by_folder()["retro"].routable


def test_a_new_row_copies_a_link_style_lower_case_team() -> None:
    team = ("## Members\n\n| Name | Status | Role | Charter |\n|--|--|--|--|\n"
            "| ann | on | Tester | [charter](agents/ann/charter.md) |\n")
    result = add_member_row(team, name="bob", role="Ops")
    assert result.endswith("| bob | ✅ Active | Ops | [charter](agents/bob/charter.md) |\n")


def test_a_new_row_in_a_legacy_squad_dir_names_it() -> None:
    result = add_member_row("", name="ann", role="Tester", squad_dirname=".ai-team")
    assert "| Ann | Tester | `.ai-team/agents/ann/charter.md` | ✅ Active |" in result


def test_a_decorated_members_heading_is_read() -> None:
    team = "## 👥 Team Members\n\n| Name | Role |\n|--|--|\n| Ann | Tester |\n\n## Notes\n"
    assert member_names(team) == ["ann"]
    assert "| Bob | Ops |" in add_member_row(team, name="bob", role="Ops").split("## Notes")[0]
