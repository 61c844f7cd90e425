"""The doctor's check of the team's memory files: each one that is not UTF-8 text, named."""

from __future__ import annotations

from typing import TYPE_CHECKING

from squadd.state.textfiles import bad_text_files

if TYPE_CHECKING:
    from squadd.cli._doctor_result import CheckResult, DoctorContext


def check_memory_files(ctx: DoctorContext) -> CheckResult:
    from squadd.cli._doctor_result import CheckResult

    if ctx.layout is None:
        return CheckResult("memory files", "skip", "no squad dir")
    bad = bad_text_files(ctx.layout)
    if not bad:
        return CheckResult("memory files", "ok", "every decisions, inbox, charter and history "
                                                 "file reads as UTF-8")
    details = [f"{b.path}: {b.reason}" for b in bad]
    details.append("the Scribe leaves these files alone until they are re-saved as UTF-8")
    return CheckResult("memory files", "warn",
                       f"{len(bad)} file{'' if len(bad) == 1 else 's'} cannot be read as text",
                       details)
