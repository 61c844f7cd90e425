"""`squadd doctor`: a list of checks of the squad's setup, each reporting ok, warn, fail or skip.

A check is a function from `DoctorContext` to `CheckResult`; later checks (providers, daemon)
append themselves to `CHECKS`. Earlier checks fill the context (layout, settings) for later ones.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from squadd.cli._doctor_result import CheckResult, DoctorContext, Status
from squadd.cli._output import print_json
from squadd.cli._squad import dir_option
from squadd.contracts.names import is_safe_name
from squadd.errors import SquaddError
from squadd.state.layout import SquadLayout

if TYPE_CHECKING:
    from squadd.config import Settings

_COMPAT_SHOWN = 10
_MARKS: dict[Status, tuple[str, str]] = {
    "ok": ("ok", "green"), "warn": ("warn", "yellow"), "fail": ("FAIL", "red"),
    "skip": ("skip", "bright_black"),
}


Check = Callable[[DoctorContext], CheckResult]


def check_squad_dir(ctx: DoctorContext) -> CheckResult:
    try:
        ctx.layout = SquadLayout.find(ctx.start)
    except SquaddError as exc:
        return CheckResult("squad dir", "fail", str(exc))
    layout = ctx.layout
    expected = {"team.md": layout.team_md, "routing.md": layout.routing_md,
                "decisions.md": layout.decisions_md, "decisions/inbox/": layout.inbox_dir}
    missing = [name for name, path in expected.items() if not path.exists()]
    if missing:
        return CheckResult("squad dir", "warn", f"{layout.root} is missing some files",
                           [f"missing: {name}" for name in missing]
                           + ["run 'squadd init' to add them (it never overwrites a file)"])
    return CheckResult("squad dir", "ok", str(layout.root))


def _env_settings() -> list[str]:
    from squadd.config import ENV_PREFIX, Settings

    sections = {name.upper() for name in Settings.model_fields}
    return sorted(name for name in os.environ
                  if name.startswith(ENV_PREFIX)
                  and name[len(ENV_PREFIX):].split("_", 1)[0] in sections)


def check_settings(ctx: DoctorContext) -> CheckResult:
    from squadd.config import default_config_file, load_settings, user_config_file

    files = [("defaults", default_config_file()), ("user", user_config_file())]
    if ctx.layout is not None:
        files.append(("project", ctx.layout.config_toml))
    details = [f"{label}: {path}{'' if path.is_file() else ' (absent)'}" for label, path in files]
    env = _env_settings()
    details.append(f"environment: {', '.join(env) if env else 'no SQUADD_* settings'}")
    try:
        ctx.settings = load_settings(ctx.layout.root if ctx.layout else None)
    except SquaddError as exc:
        return CheckResult("settings", "fail", str(exc), details)
    return CheckResult("settings", "ok", "settings load", details)


SQUAD_BUILT_IN_AGENTS = frozenset({"scribe", "ralph", "rai"})
"""Agents Squad's `init` creates outside team.md's Members table."""


def check_roster(ctx: DoctorContext) -> CheckResult:
    from squadd.fsio import read_text
    from squadd.state.charters import roster
    from squadd.state.team import member_names

    if ctx.layout is None:
        return CheckResult("roster", "skip", "no squad dir")
    layout = ctx.layout
    entries = roster(layout)
    names = {entry.name for entry in entries}
    details = []
    agents_dir = layout.root / "agents"
    if agents_dir.is_dir():
        for child in sorted(agents_dir.iterdir()):
            name = child.name.lower()
            if not child.is_dir() or (name in names and layout.agent_folder(name) == child.name):
                continue
            why = ("its name breaks the naming rule" if not is_safe_name(name)
                   else f"agents/{name}/ is the agent {name}" if name in names
                   else "it has no charter.md")
            details.append(f"agents/{child.name}/ is ignored: {why}")
    listed = set(member_names(read_text(layout.team_md)))
    # Squad's own `init` makes these agents without a Members row: that is no fault.
    details += [f"{entry.name} is not in team.md's Members table" for entry in entries
                if entry.name not in listed and entry.name not in SQUAD_BUILT_IN_AGENTS]
    details += [f"{entry.name} has no history.md" for entry in entries if not entry.has_history]
    summary = f"{len(entries)} agent{'' if len(entries) == 1 else 's'}"
    if not entries:
        details.append("add one with 'squadd agent add NAME --role ROLE'")
    return CheckResult("roster", "warn" if details else "ok", summary, details)


def check_squad_compat(ctx: DoctorContext) -> CheckResult:
    """Rows and files squadd reads differently from Squad (all of them: --squad-compat)."""
    from squadd.cli._compat import squad_compat

    if ctx.layout is None:
        return CheckResult("squad compat", "skip", "no squad dir")
    findings = squad_compat(ctx.layout)
    warnings = [f for f in findings if f.level == "warn"]
    notes = len(findings) - len(warnings)
    summary = (f"{len(warnings)} warning{'' if len(warnings) == 1 else 's'}, "
               f"{notes} note{'' if notes == 1 else 's'}")
    details = [f.render() for f in warnings[:_COMPAT_SHOWN]]
    if len(warnings) > _COMPAT_SHOWN or notes:
        details.append("run 'squadd doctor --squad-compat' to see every finding")
    return CheckResult("squad compat", "warn" if warnings else "ok", summary, details)


def check_provider(ctx: DoctorContext) -> CheckResult:
    """Configured, reachable, key accepted (no prompt is sent)."""
    if ctx.settings is None:
        return CheckResult("provider", "skip", "the settings did not load")
    from squadd.cli._doctor_provider import provider_finding

    finding = provider_finding(ctx.settings.provider)
    return CheckResult("provider", finding.status, finding.summary, finding.details)


def check_daemon(ctx: DoctorContext) -> CheckResult:
    """Whether a daemon serves this repo (either answer is fine)."""
    if ctx.layout is None:
        return CheckResult("daemon", "skip", "no squad dir")
    from squadd.daemon.client import DaemonClient
    from squadd.errors import DaemonNotRunningError

    with DaemonClient(ctx.layout, timeout=5.0) as client:
        try:
            health = client.health()
        except DaemonNotRunningError:
            return CheckResult("daemon", "ok", "not running (start it with 'squadd serve')")
    return CheckResult("daemon", "ok", f"running, PID {health.get('pid')}, up "
                                       f"{health.get('uptime_s', 0):.0f}s, provider "
                                       f"{health.get('provider')}")


def check_memory_files(ctx: DoctorContext) -> CheckResult:
    """Decisions, inbox, charters and histories that are not UTF-8 (the Scribe skips them)."""
    from squadd.cli._doctor_memory import check_memory_files as check

    return check(ctx)


def check_cluster(ctx: DoctorContext) -> CheckResult:
    """Cluster mode: Redis reachable, workers alive, their versions, the streams' lags."""
    from squadd.cli._doctor_cluster import check_cluster as check

    return check(ctx)


def check_sandbox(ctx: DoctorContext) -> CheckResult:
    """The OS sandbox commands run in here (bwrap, Landlock, or off) and what it enforces."""
    from squadd.cli._doctor_sandbox import check_sandbox as check

    return check(ctx)


CHECKS: list[Check] = [check_squad_dir, check_settings, check_roster, check_squad_compat,
                       check_memory_files,
                       check_provider, check_daemon, check_sandbox, check_cluster]
"""The checks `squadd doctor` runs, in order. Append to add one."""


def run_checks(start: Path, checks: list[Check] | None = None, *,
               cluster_url: str | None = None) -> list[CheckResult]:
    """Run `checks` (default: `CHECKS`) in order; one that raises is reported as failed."""
    ctx = DoctorContext(start=start, cluster_url=cluster_url)
    results = []
    for check in CHECKS if checks is None else checks:
        try:
            results.append(check(ctx))
        except (SquaddError, OSError, UnicodeDecodeError) as exc:
            name = check.__name__.removeprefix("check_").replace("_", " ")
            results.append(CheckResult(name, "fail", f"{type(exc).__name__}: {exc}"))
    return results


def _squad_compat_report(directory: Path | None, as_json: bool) -> None:
    from squadd.cli._compat import squad_compat

    layout = SquadLayout.find((directory or Path.cwd()).resolve())
    findings = squad_compat(layout)
    if as_json:
        print_json({"squad_dir": layout.root, "findings": [
            {"file": f.file, "line": f.line, "level": f.level, "message": f.message}
            for f in findings]})
        return
    if not findings:
        click.echo(f"{layout.root}: squadd reads every file as Squad does.")
        return
    for finding in findings:
        click.echo(finding.render())
    warnings = sum(f.level == "warn" for f in findings)
    click.echo(f"{warnings} warning(s), {len(findings) - warnings} note(s)")


def _security_report(directory: Path | None, as_json: bool) -> None:
    from squadd.cli._doctor_security import GuardContext, run_guards
    from squadd.config import load_settings

    start = (directory or Path.cwd()).resolve()
    layout: SquadLayout | None = None
    settings: Settings | None = None
    try:
        layout = SquadLayout.find(start)
        settings = load_settings(layout.root)
    except SquaddError:
        pass  # the guards that need them say so
    reports = run_guards(GuardContext(layout, settings))
    off = any(report.status == "off" for report in reports)
    if as_json:
        print_json({"ok": not off, "guards": [
            {"guard": r.guard, "status": r.status, "detail": r.detail} for r in reports]})
    else:
        width = max(len(r.guard) for r in reports)
        click.echo(f"{'GUARD'.ljust(width)}  STATUS  DETAIL")
        for report in reports:
            color = {"on": "green", "warn": "yellow", "off": "red"}[report.status]
            click.echo(f"{report.guard.ljust(width)}  "
                       f"{click.style(report.status.ljust(6), fg=color)}  {report.detail}")
    if off:
        raise click.exceptions.Exit(1)


@click.command()
@dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.option("--squad-compat", "squad_compat_only", is_flag=True,
              help="List everything squadd reads differently from Squad (file:line: level: "
                   "message) instead of running the checks.")
@click.option("--cluster", "cluster_url", default=None, metavar="URL",
              help="Check this cluster's Redis and workers (default: [cluster] url).")
@click.option("--security", "security_only", is_flag=True,
              help="Report the security guards in force (guard, status, detail) instead of "
                   "running the checks; exits 1 when one is off.")
def doctor(directory: Path | None, as_json: bool, squad_compat_only: bool,
           cluster_url: str | None, security_only: bool) -> None:
    """Check the squad's setup: its folder, settings, roster, Squad compatibility, provider
    and daemon.

    Exits with status 1 when a check fails; warnings do not change the exit status. With
    --squad-compat it lists each difference from how Squad reads the squad dir: a 'warn' is
    something squadd cannot use (a row it cannot read, a member without a charter), a 'note'
    something it reads its own way or leaves alone (a section it does not read).

    \b
    Examples:
      squadd doctor
      squadd doctor --json
      squadd doctor --squad-compat
      squadd doctor --squad-compat --json
      squadd doctor --cluster redis://redis.internal:6379/0
      squadd doctor --security
      squadd doctor --security --json
    """
    if squad_compat_only:
        _squad_compat_report(directory, as_json)
        return
    if security_only:
        _security_report(directory, as_json)
        return
    results = run_checks((directory or Path.cwd()).resolve(), cluster_url=cluster_url)
    failed = any(result.status == "fail" for result in results)
    if as_json:
        print_json({"ok": not failed, "checks": [
            {"name": r.name, "status": r.status, "summary": r.summary, "details": r.details}
            for r in results
        ]})
    else:
        for result in results:
            label, color = _MARKS[result.status]
            click.echo(f"[{click.style(label.ljust(4), fg=color)}] {result.name}: {result.summary}")
            for line in result.details:
                click.echo(f"         {line}")
    if failed:
        raise click.exceptions.Exit(1)



