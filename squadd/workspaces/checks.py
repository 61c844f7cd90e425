"""The land check: running it in a worktree (with its JUnit report), remembering its result on
a target's tip per commit, and judging a candidate against the tip under `land_policy`.

A tip's result is kept in ``run/land-checks/{commit}.json`` (atomic, fsynced) with the command
that produced it: a tip that moves is a new commit id, so its old result is never read again
(and is pruned); a changed `land_check` never reuses a result of the old command.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio
import structlog
from pydantic import BaseModel, Field

from squadd.errors import SquaddError, WorkspaceError
from squadd.fsio import atomic_write
from squadd.sandbox import SandboxPolicy
from squadd.state.layout import SquadLayout
from squadd.workspaces.git import run
from squadd.workspaces.junit import read_report

log = structlog.get_logger("squadd.workspaces")
KEPT_TIP_RESULTS = 16
"""Tip results kept (one per target branch in use, plus a few of tips just passed)."""
REPORT_TOKEN = "{report}"
Policy = Literal["green", "no-new-failures"]


@dataclass(frozen=True)
class LandCheck:
    """The `workspace.land_check` command ("" = none), its timeout, its JUnit report
    (`land_check_report`, "" = none) and the policy that judges a candidate."""

    command: str = ""
    timeout_s: float = 600.0
    report: str = ""
    policy: Policy = "green"
    sandbox: SandboxPolicy | None = None
    """The sandbox it runs in (it runs agent-written code); None: unconfined."""


class CheckResult(BaseModel):
    """One run of the land check on one commit."""

    commit: str
    command: str
    exit_code: int | None
    timed_out: bool = False
    failing: list[str] | None = None
    """The failing test ids the report names (None: no report, or it could not be read)."""
    tests: int = 0
    report_error: str = ""
    tail: str = Field("", exclude=True)
    """The end of the check's output (not kept in the cache)."""

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.failing

    def how(self) -> str:
        if self.timed_out:
            return "timed out"
        return "passed" if self.exit_code == 0 else f"exited {self.exit_code}"


def _report_path(layout: SquadLayout, check: LandCheck, tree: Path, session_id: str,
                 step: str) -> Path | None:
    if not check.report:
        return None
    if REPORT_TOKEN in check.command or check.report == REPORT_TOKEN:
        return layout.land_check_report(session_id, step)
    return tree / check.report


async def run_check(layout: SquadLayout, check: LandCheck, tree: Path, *, session_id: str,
                    commit: str, step: str) -> CheckResult:
    """Run the check in `tree` (checked out at `commit`), in its sandbox (`SandboxError` when
    it cannot run there); its whole output goes to the session's `step` output file, its
    report is read when one is configured."""
    report = _report_path(layout, check, tree, session_id, step)
    command = check.command
    fresh = report is not None and report == layout.land_check_report(session_id, step)
    if report is not None:
        await anyio.Path(report).unlink(missing_ok=True)  # never read a stale one
        await anyio.Path(report.parent).mkdir(parents=True, exist_ok=True)
        command = command.replace(REPORT_TOKEN, shlex.quote(str(report)))
    ran = await run(["bash", "-c", command], tree, timeout_s=check.timeout_s,
                    spill=layout.workspace_output(session_id, step), sandbox=check.sandbox)
    result = CheckResult(commit=commit, command=check.command, exit_code=ran.exit_code,
                         timed_out=ran.timed_out, tail=ran.tail)
    if report is not None and not ran.timed_out:
        try:
            tests = await anyio.to_thread.run_sync(read_report, report)
        except WorkspaceError as exc:
            result.report_error = str(exc)
        else:
            result.failing, result.tests = sorted(tests.failing), len(tests.tests)
        finally:
            if fresh:
                await anyio.Path(report).unlink(missing_ok=True)
    return result


def cached_tip(layout: SquadLayout, commit: str, command: str) -> CheckResult | None:
    """The check's remembered result on `commit` for this `command`, if there is one."""
    try:
        cached = CheckResult.model_validate_json(layout.land_check_result(commit).read_bytes())
    except (OSError, ValueError, SquaddError):
        return None
    return cached if cached.commit == commit and cached.command == command else None


def remember_tip(layout: SquadLayout, result: CheckResult) -> None:
    """Keep `result` as the tip's (durably), and forget all but the newest few others."""
    if result.timed_out or (result.failing is None and result.exit_code != 0):
        return  # nothing a later landing could rely on
    path = layout.land_check_result(result.commit)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, result.model_dump_json() + "\n")
    kept = sorted(path.parent.glob("*.json"), key=_mtime, reverse=True)
    for old in kept[KEPT_TIP_RESULTS:]:
        old.unlink(missing_ok=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


@dataclass(frozen=True)
class Verdict:
    """Whether the candidate may land, the tests it fixed and broke, and why in a sentence."""

    ok: bool
    fixed: list[str]
    broke: list[str]
    detail: str


def needs_tip(check: LandCheck, candidate: CheckResult) -> bool:
    """Whether judging `candidate` needs the tip's result: always with no-new-failures (for
    its failures, and to name what the candidate fixed); with green only when the candidate
    failed (to tell a red main from a broken candidate)."""
    return check.policy == "no-new-failures" or not candidate.passed


def judge(check: LandCheck, target: str, candidate: CheckResult,
          tip: CheckResult | None) -> Verdict:
    """Whether `candidate` may land on the target whose tip gave `tip`."""
    cmd = f"`{check.command}`"
    fixed: list[str] = []
    broke: list[str] = []
    if tip is not None and tip.failing is not None and candidate.failing is not None:
        fixed = sorted(set(tip.failing) - set(candidate.failing))
        broke = sorted(set(candidate.failing) - set(tip.failing))
    if candidate.timed_out:
        return Verdict(False, fixed, broke, f"the land check {cmd} timed out")
    if check.report and candidate.failing is None:
        return Verdict(False, fixed, broke,
                       f"the land check {cmd} {candidate.how()} and its JUnit report could not "
                       f"be read: {candidate.report_error}")
    if check.policy == "no-new-failures":
        if tip is None or tip.failing is None:
            why = tip.report_error if tip is not None else "it did not run"
            return Verdict(False, fixed, broke,
                           f"the land check's report on {target} could not be read: {why}")
        if broke:
            return Verdict(False, fixed, broke,
                           f"the candidate breaks {_tests(broke)}, passing on {target}")
        if candidate.exit_code != 0 and tip.exit_code == 0:
            return Verdict(False, fixed, broke,
                           f"the land check {cmd} {candidate.how()} on the candidate (its "
                           f"report names no new failing test) and passes on {target}")
        still = len(candidate.failing or [])
        return Verdict(True, fixed, broke,
                       f"no new failing test ({len(fixed)} fixed, {still} still failing on "
                       f"{target})" if still or fixed else "the land check passed")
    if candidate.passed:
        return Verdict(True, fixed, broke, "the land check passed")
    if tip is not None and not tip.passed:
        how_config = ("set workspace.land_policy = \"no-new-failures\" to land what adds no "
                      "failing test" if check.report else
                      "make the check write a JUnit report (e.g. land_check = \"pytest -q "
                      "--junitxml={report}\" and land_check_report = \"{report}\"), so that "
                      "a candidate that adds no failing test lands")
        return Verdict(False, fixed, broke,
                       f"{target} itself fails the land check: {cmd} {tip.how()} on "
                       f"{target}'s tip {tip.commit[:12]} too; {how_config}")
    what = f": it breaks {_tests(broke)}" if broke else ""
    return Verdict(False, fixed, broke, f"the land check {cmd} {candidate.how()}{what}")


def _tests(ids: list[str]) -> str:
    shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
    return f"{len(ids)} test{'s' if len(ids) != 1 else ''} ({shown})"
