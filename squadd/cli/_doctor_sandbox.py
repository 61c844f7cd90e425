"""`squadd doctor`'s sandbox check: the mechanism commands run under here, and what it holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from squadd.sandbox.report import enforcement

if TYPE_CHECKING:
    from squadd.cli._doctor_result import CheckResult, DoctorContext


def check_sandbox(ctx: DoctorContext) -> CheckResult:
    from squadd.cli._doctor_result import CheckResult

    if ctx.settings is None:
        return CheckResult("sandbox", "skip", "the settings did not load")
    box = ctx.settings.sandbox
    found = enforcement(box.mode, network=box.network, max_processes=box.max_processes,
                        max_file_bytes=box.max_file_mb << 20)
    overrides = [f"agent {name}: network {agent.network}"
                 for name, agent in ctx.settings.agents.items() if agent.network is not None]
    if found.mechanism is None:
        return CheckResult("sandbox", "fail", found.summary, found.lines)
    if found.mechanism == "off":
        return CheckResult("sandbox", "warn", found.summary, [*found.lines, *overrides])
    return CheckResult("sandbox", "ok", found.summary, [*found.lines, *overrides])
