"""Landing against a red main: with the check's JUnit report and `no-new-failures`, a candidate
lands when it adds no failing test (main's own result remembered per commit); without a report,
the refusal says main itself fails. Real pytest runs on a real package."""

from __future__ import annotations

import sys
from pathlib import Path

from squadd.state.layout import SquadLayout
from squadd.workspaces import Workspaces
from tests.workspaces.conftest import Events, git, make_repo, settings_with

PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider"
PROJECT = {
    "shapes/__init__.py": "",
    "shapes/area.py": "def square(n):\n    return n * n + 1\n",  # bug: + 1
    "shapes/perimeter.py": "def square(n):\n    return 4 * n\n",
    "tests/__init__.py": "",
    "tests/test_area.py": "from shapes.area import square\n\n\n"
                          "def test_square_area():\n    assert square(3) == 9\n",
    "tests/test_perimeter.py": "from shapes.perimeter import square\n\n\n"
                               "def test_square_perimeter():\n    assert square(3) == 12\n",
}
AREA_TEST = "tests.test_area::test_square_area"
PERIMETER_TEST = "tests.test_perimeter::test_square_perimeter"


def _repo(tmp_path: Path) -> SquadLayout:
    return make_repo(tmp_path / "repo", PROJECT)


async def _work(spaces: Workspaces, session: str, files: dict[str, str]) -> None:
    record = await spaces.open(session, "lead")
    assert record is not None
    for name, text in files.items():
        (Path(record.path) / name).write_text(text)
    await spaces.close(record, title=f"edit by {session}", answer=f"changed {', '.join(files)}")


async def test_with_a_report_a_fix_lands_on_a_red_main_and_a_breaking_change_is_refused(
        tmp_path: Path) -> None:
    layout = _repo(tmp_path)
    spaces = Workspaces(layout, settings_with(
        layout, land_check=f"{PYTEST} --junitxml={{report}}", land_check_report="{report}"),
        Events())
    assert spaces.settings.policy == "no-new-failures"  # the default with a report
    red = git(layout.repo, "rev-parse", "main")
    await _work(spaces, "20260101-000000-0000000a",
                {"shapes/area.py": "def square(n):\n    return n * n\n"})
    await _work(spaces, "20260101-000000-0000000b",
                {"shapes/perimeter.py": "def square(n):\n    return 3 * n\n"})

    fixed = await spaces.land("20260101-000000-0000000a")
    assert fixed.ok and fixed.reason == "landed", fixed.message
    assert fixed.fixed == [AREA_TEST] and fixed.broke == []
    outcome = fixed.outcome()
    assert (outcome.state, outcome.fixed, outcome.commit) == ("landed", [AREA_TEST],
                                                              fixed.new_tip)
    # main's result on its red tip was run once and remembered; the landed candidate's result
    # is remembered as the new tip's.
    assert layout.land_check_result(red).is_file()
    assert layout.land_check_result(fixed.new_tip or "").is_file()

    broken = await spaces.land("20260101-000000-0000000b")
    assert not broken.ok and broken.reason == "check_failed", broken.message
    assert broken.broke == [PERIMETER_TEST] and PERIMETER_TEST in broken.message
    assert git(layout.repo, "rev-parse", "main") == fixed.new_tip
    # The new tip's result came from the cache: no tip check ran for the second landing.
    assert not layout.workspace_output("20260101-000000-0000000b", "land-check-tip").exists()
    outcome = broken.outcome()
    assert outcome.state == "check_failed" and outcome.broke == [PERIMETER_TEST]
    assert outcome.next and "squadd land 20260101-000000-0000000b" in outcome.next
    record = await spaces.view("20260101-000000-0000000b")
    assert record is not None and record.outcome == outcome


async def test_a_candidate_that_keeps_mains_failures_lands_and_one_that_adds_one_does_not(
        tmp_path: Path) -> None:
    layout = _repo(tmp_path)
    spaces = Workspaces(layout, settings_with(
        layout, land_check=f"{PYTEST} --junitxml=report.xml", land_check_report="report.xml",
        land_policy="no-new-failures"), Events())
    await _work(spaces, "20260101-000000-0000000c", {"README.md": "shapes\n"})
    landed = await spaces.land("20260101-000000-0000000c")
    assert landed.ok, landed.message  # main's one failure stays, none is added
    assert "no new failing test (0 fixed, 1 still failing on main)" in landed.message
    assert landed.fixed == [] and landed.broke == []


async def test_without_a_report_a_red_main_is_named_as_the_cause(tmp_path: Path) -> None:
    layout = _repo(tmp_path)
    spaces = Workspaces(layout, settings_with(layout, land_check=PYTEST), Events())
    assert spaces.settings.policy == "green"
    await _work(spaces, "20260101-000000-0000000d", {"README.md": "shapes\n"})
    refused = await spaces.land("20260101-000000-0000000d")
    assert not refused.ok and refused.reason == "check_failed"
    assert "main itself fails the land check" in refused.message
    outcome = refused.outcome()
    assert outcome.next is not None and "land_check_report" in outcome.next
    # Not the agent's to fix: no repair turn is spent on it.
    assert await spaces.start_repair("20260101-000000-0000000d", refused) is None


async def test_a_fix_lands_one_commit_authored_by_the_agent_committed_by_one_identity(
        tmp_path: Path) -> None:
    layout = _repo(tmp_path)
    git(layout.repo, "config", "user.name", "Repo Owner")
    git(layout.repo, "config", "user.email", "owner@example.com")
    spaces = Workspaces(layout, settings_with(layout, land="manual"), Events())
    record = await spaces.open("20260101-000000-0000000e", "lead")
    assert record is not None
    for n in range(3):  # three rounds of work: three commits on the branch
        (Path(record.path) / "shapes" / "area.py").write_text(f"def square(n):\n    return {n}\n")
        await spaces.close(record, title="Fix the area", answer=f"round {n}\n\nsummary {n}")
    assert len(record.commits) == 3
    landed = await spaces.land(record.session_id)
    assert landed.ok, landed.message
    start = git(layout.repo, "rev-list", "--max-parents=0", "main")
    assert git(layout.repo, "rev-list", "--count", f"{start}..main") == "1"
    assert git(layout.repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%s", "main") == \
        "lead <lead@squad.local>|Repo Owner <owner@example.com>|round 2"
    assert git(layout.repo, "show", "main:shapes/area.py") == "def square(n):\n    return 2"
    # the worktree and branch are gone; the record keeps the outcome
    assert not Path(record.path).exists()
    assert git(layout.repo, "branch", "--list", record.branch) == ""
    kept = await spaces.view(record.session_id)
    assert kept is not None and kept.state == "landed" and kept.outcome is not None
    assert kept.outcome.commit == git(layout.repo, "rev-parse", "main")
    again = await spaces.land(record.session_id)  # nothing lands twice
    assert again.ok and again.reason == "nothing" and "already landed" in again.message
    assert git(layout.repo, "rev-list", "--count", f"{start}..main") == "1"
