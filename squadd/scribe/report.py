"""What a Scribe pass reports (`ScribeReport`), and what a long-lived Scribe remembers between
passes (`ScribeMemory`): its looks at inbox files, and the bad files it has already reported.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import BaseModel, Field

from squadd.contracts.events import EventSink, ScribeRejected
from squadd.errors import NotUtf8Error, SquaddError
from squadd.state.inbox import InboxLooks
from squadd.state.layout import SquadLayout

log = logging.getLogger("squadd.scribe")


class RejectedFile(BaseModel):
    file: str
    moved_to: str
    reason: str


class ScribeProblem(BaseModel):
    """A file the Scribe could not use and left alone; the rest of the pass went on."""

    file: str
    reason: str


class HistoryCompaction(BaseModel):
    agent: str
    moved: int


class ScribeReport(BaseModel):
    """What one Scribe pass did (or, in a dry run, would do)."""

    dry_run: bool = False
    merged: int = 0
    """Entries appended to decisions.md."""
    skipped: int = 0
    """Entries already in decisions.md (or earlier in this pass), so not appended again."""
    merged_files: list[str] = Field(default_factory=list)
    """Inbox files consumed (deleted once their entries were safely in decisions.md)."""
    rejected: list[RejectedFile] = Field(default_factory=list)
    deferred: list[str] = Field(default_factory=list)
    """Inbox files left for a later pass (still being written, or changed while merging)."""
    archived: int = 0
    archived_titles: list[str] = Field(default_factory=list)
    archive_note: str = ""
    compacted: list[HistoryCompaction] = Field(default_factory=list)
    team_updates: int = 0
    problems: list[ScribeProblem] = Field(default_factory=list)
    """Files left alone (a history.md that is not UTF-8): named here, in a `scribe.rejected`
    event and in the log; `squadd doctor` names them too."""
    recovered: list[str] = Field(default_factory=list)
    """Interrupted steps of an earlier run that this pass completed."""
    duration_s: float = 0.0


class ScribeMemory:
    """What a long-lived Scribe (the daemon's worker) remembers from one pass to the next: its
    looks at unsealed inbox files, and the bad files it already reported, which are logged and
    announced again only once they change."""

    def __init__(self) -> None:
        self.looks = InboxLooks()
        self._bad: dict[str, tuple[int, int, int]] = {}

    def is_new_problem(self, shown: str, path: Path) -> bool:
        """True the first time `path` is reported as it is now (False: reported, unchanged)."""
        try:
            info = path.stat()
            identity = (info.st_ino, info.st_size, info.st_mtime_ns)
        except OSError:
            identity = (0, 0, 0)
        if self._bad.get(shown) == identity:
            return False
        self._bad[shown] = identity
        return True

    def keep_bad(self, shown: set[str]) -> None:
        """Forget the files that were not a problem in the last pass (fixed, or gone)."""
        for name in [n for n in self._bad if n not in shown]:
            del self._bad[name]


def note_problem(layout: SquadLayout, report: ScribeReport, sink: EventSink, memory: ScribeMemory,
             exc: NotUtf8Error, consequence: str) -> None:
    """Report a file the Scribe leaves alone, and go on with the others. A file reported in an
    earlier pass and unchanged since is listed in the report but not logged or announced."""
    try:
        shown = str(layout.inside(Path(exc.path)).relative_to(layout.root))
    except (ValueError, SquaddError):
        shown = exc.path
    reason = f"not valid UTF-8 at byte offset {exc.offset}; left in place, {consequence}"
    if any(p.file == shown for p in report.problems):
        return
    report.problems.append(ScribeProblem(file=shown, reason=reason))
    if report.dry_run or not memory.is_new_problem(shown, Path(exc.path)):
        return
    log.warning("Scribe skipped %s: %s", shown, reason)
    sink.publish(ScribeRejected(file=shown, reason=reason))


