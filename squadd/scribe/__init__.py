"""The Scribe: merges the decisions inbox into decisions.md, archives old decisions, compacts
histories, and tells agents about decisions that name them. Deterministic code, no model.

`merge_inbox` runs one pass under the Scribe lock; `squadd.scribe.worker.run_scribe_worker` runs
passes whenever the inbox changes.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import structlog

from squadd.config import Settings
from squadd.contracts.events import (
    EventSink,
    NullSink,
    ScribeArchived,
    ScribeMerged,
    ScribeRejected,
)
from squadd.errors import NotUtf8Error
from squadd.fsio import file_lock, fsync_dir
from squadd.scribe.report import (
    HistoryCompaction,
    RejectedFile,
    ScribeMemory,
    ScribeProblem,
    ScribeReport,
    note_problem,
)
from squadd.scribe.updates import AgentMatcher, send_team_updates, team_update_line
from squadd.state.archive import archive_decisions, recover_archive, separator_before_append
from squadd.state.charters import roster
from squadd.state.decision_index import DecisionIndex, entry_digest
from squadd.state.history import compact_history
from squadd.state.inbox import (
    Accepted,
    Deferred,
    InboxFile,
    Refused,
    read_inbox_file,
    reject_file,
    scan_inbox,
    sweep_stale_temps,
    unchanged,
)
from squadd.state.intent import (
    AppendIntent,
    append_with_intent,
    clear_intent,
    finish_append,
    intent_file,
    pending_intent,
    sweep_temp_files,
)
from squadd.state.layout import SquadLayout
from squadd.state.textstyle import TextStyle, file_style, in_style
from squadd.untrusted import shown_name

__all__ = [
    "AgentMatcher", "HistoryCompaction", "RejectedFile", "ScribeMemory", "ScribeProblem",
    "ScribeReport", "merge_decisions", "merge_inbox", "team_update_line",
]

log = structlog.get_logger("squadd.scribe")

BATCH_FILES = 1000
"""Inbox files merged per append: bounds memory, and a crash redoes at most one batch."""
BATCH_BYTES = 32 * 1024 * 1024
EVENT_FILES = 100
"""Most file names one `scribe.merged` event lists (the count is always exact)."""
DECISIONS_HEADING = "# Decisions\n\n"
"""What a new decisions.md starts with."""


def merge_inbox(
    layout: SquadLayout,
    settings: Settings,
    sink: EventSink | None = None,
    *,
    dry_run: bool = False,
    today: dt.date | None = None,
    batch_files: int = BATCH_FILES,
    clock: Callable[[], float] = time.time,
    memory: ScribeMemory | None = None,
) -> ScribeReport:
    """One Scribe pass: merge the inbox, then run the archive gate and history compaction.

    Takes the Scribe lock for the whole pass. Safe to kill at any instant: the next pass
    finishes what the killed one left half done, and every decision ends up exactly once in
    decisions.md or (once archived) decisions-archive.md. A history.md that is not UTF-8 is
    left alone and reported; the other agents' files are still done. `clock` is the wall clock
    the inbox's settle time is judged by; `memory` carries what a long-lived Scribe remembers
    from one pass to the next.
    """
    sink = sink or NullSink()
    started = time.perf_counter()
    report = ScribeReport(dry_run=dry_run)
    written: dict[str, list[str]] = {}
    merged_now: set[bytes] = set()
    memory = memory or ScribeMemory()
    with file_lock(layout.scribe_lock):
        if not dry_run:
            _recover(layout, report)
            sweep_stale_temps(layout, clock())
        merge_decisions(layout, settings, sink, report, dry_run=dry_run,
                        batch_files=batch_files, clock=clock, memory=memory, written=written,
                        merged_now=merged_now)
        _archive(layout, settings, sink, report, dry_run=dry_run, today=today,
                 protect=merged_now)
        _compact(layout, settings, sink, report, dry_run=dry_run, today=today, written=written,
                 memory=memory)
    memory.keep_bad({p.file for p in report.problems})
    report.duration_s = round(time.perf_counter() - started, 6)
    return report


def _recover(layout: SquadLayout, report: ScribeReport) -> None:
    """Finish what a killed pass left half done: a torn merge append, an archive step."""
    for path in (layout.decisions_md, layout.decisions_index,
                 intent_file(layout, layout.decisions_md),
                 intent_file(layout, layout.decisions_archive)):
        sweep_temp_files(path)
    intent = pending_intent(layout, layout.decisions_md)
    if intent is not None:
        state = finish_append(intent)
        clear_intent(intent)
        if state == "finished":
            report.recovered.append("completed a torn append to decisions.md")
        elif state == "stale":
            log.warning("scribe.stale_intent", target="decisions.md",
                        why="decisions.md changed since an interrupted merge; its append "
                            "was not redone")
    archived = recover_archive(layout)
    if archived:
        report.recovered.append(archived)


@dataclass
class _Batch:
    files: list[InboxFile]
    accepted: list[Accepted] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    new: list[tuple[str, bytes, Accepted]] = field(default_factory=list)


def merge_decisions(
    layout: SquadLayout,
    settings: Settings,
    sink: EventSink,
    report: ScribeReport,
    *,
    dry_run: bool = False,
    batch_files: int = BATCH_FILES,
    clock: Callable[[], float] = time.time,
    memory: ScribeMemory | None = None,
    written: dict[str, list[str]] | None = None,
    merged_now: set[bytes] | None = None,
) -> None:
    """Merge the inbox into decisions.md (the caller holds the Scribe lock).

    Batch by batch: read and check the files, append the new entries and fsync, then delete the
    merged files. The deletes of one batch overlap the reading of the next (a helper thread), but
    always finish before the next append.
    """
    files = scan_inbox(layout)
    memory = memory or ScribeMemory()
    memory.looks.keep_only({f.name for f in files})
    if not files:
        return
    agents = [entry.name for entry in roster(layout)]
    matcher = AgentMatcher(agents)
    seen: set[bytes] = set()
    now = clock()
    settle_s = settings.scribe.settle_ms / 1000
    written = {} if written is None else written
    before = report.merged, report.skipped, len(report.merged_files)
    pending: Future[_Deleted] | None = None
    with DecisionIndex.open(layout, writable=not dry_run) as index, \
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="scribe-delete") as deleter:
        for batch in _batches(files, batch_files, BATCH_BYTES):
            for file in batch.files:
                outcome = read_inbox_file(file, max_bytes=settings.scribe.max_inbox_file_bytes,
                                          agents=agents, now=now, settle_s=settle_s,
                                          looks=memory.looks)
                if isinstance(outcome, Deferred):
                    report.deferred.append(file.name)
                elif isinstance(outcome, Refused):
                    batch.refused.append(outcome)
                else:
                    batch.accepted.append(outcome)
                    for text in outcome.entries:
                        digest = entry_digest(text)
                        if digest in seen or digest in index:
                            report.skipped += 1
                        else:
                            seen.add(digest)
                            if merged_now is not None:
                                merged_now.add(digest)
                            batch.new.append((text, digest, outcome))
            _collect(pending, report)
            pending = _write_batch(layout, index, matcher, batch, report, sink, deleter,
                                   dry_run=dry_run, written=written, memory=memory)
        _collect(pending, report)
    merged, skipped, count = (report.merged - before[0], report.skipped - before[1],
                              len(report.merged_files) - before[2])
    if count and not dry_run:
        sink.publish(ScribeMerged(merged=merged, skipped=skipped,
                                  files=report.merged_files[before[2]:][:EVENT_FILES]))
        log.info("scribe.merged", decisions=merged, duplicates_skipped=skipped, files=count)


def _batches(files: list[InboxFile], max_files: int, max_bytes: int) -> Iterator[_Batch]:
    batch: list[InboxFile] = []
    size = 0
    for file in files:
        if batch and (len(batch) >= max_files or size + file.size > max_bytes):
            yield _Batch(batch)
            batch, size = [], 0
        batch.append(file)
        size += min(file.size, max_bytes)
    if batch:
        yield _Batch(batch)


def _write_batch(
    layout: SquadLayout, index: DecisionIndex, matcher: AgentMatcher, batch: _Batch,
    report: ScribeReport, sink: EventSink, deleter: ThreadPoolExecutor, *, dry_run: bool,
    written: dict[str, list[str]], memory: ScribeMemory,
) -> Future[_Deleted] | None:
    """Team updates, then append + fsync, then (in `deleter`) delete the merged files; and move
    the rejects. Returns the deletion under way."""
    report.merged += len(batch.new)
    if dry_run:
        report.merged_files.extend(a.file.name for a in batch.accepted)
        report.rejected.extend(RejectedFile(file=r.file.shown, moved_to="", reason=r.reason)
                               for r in batch.refused)
        return None
    # Team updates go first and are idempotent: a crash after the append below makes these
    # entries duplicates on the next run, which would otherwise never send their updates.
    report.team_updates += send_team_updates(layout, matcher, batch.new, report, sink,
                                              written, memory)
    intent = None
    if batch.new:
        # In decisions.md's own line ending, so that only the new lines differ.
        eol = file_style(layout.decisions_md).eol
        chunk = in_style(separator_before_append(layout.decisions_md, DECISIONS_HEADING)
                         + "\n".join(text for text, _, _ in batch.new), TextStyle(False, eol))
        intent = append_with_intent(layout, layout.decisions_md, chunk.encode("utf-8"))
        index.record_append([digest for _, digest, _ in batch.new], chunk)
    pending = deleter.submit(_delete_merged, layout, batch.accepted, intent)
    for refused in batch.refused:
        moved = reject_file(layout, refused.file, refused.reason)
        shown = refused.file.shown
        report.rejected.append(RejectedFile(
            file=shown, moved_to=shown_name(str(moved.relative_to(layout.root))),
            reason=refused.reason))
        log.warning("scribe.rejected", file=shown, reason=refused.reason)
        sink.publish(ScribeRejected(file=shown, reason=refused.reason))
    return pending


@dataclass(frozen=True)
class _Deleted:
    merged: list[str]
    changed: list[str]


def _delete_merged(
    layout: SquadLayout, accepted: list[Accepted], intent: AppendIntent | None
) -> _Deleted:
    """Delete inbox files whose entries are safely in decisions.md, then clear the intent.

    A file that changed since it was read stays for the next pass (its entries merged so far
    are duplicates then; anything added is new).
    """
    merged: list[str] = []
    changed: list[str] = []
    for item in accepted:
        if unchanged(item.file, item.identity):
            item.file.path.unlink(missing_ok=True)
            merged.append(item.file.name)
        else:
            changed.append(item.file.name)
    if accepted:
        fsync_dir(layout.inbox_dir)
    if intent is not None:
        clear_intent(intent)
    return _Deleted(merged, changed)


def _collect(pending: Future[_Deleted] | None, report: ScribeReport) -> None:
    """Wait for a batch's deletes (re-raising their error) and count them in the report."""
    if pending is None:
        return
    done = pending.result()
    report.merged_files.extend(done.merged)
    report.deferred.extend(done.changed)


def _archive(
    layout: SquadLayout, settings: Settings, sink: EventSink, report: ScribeReport, *,
    dry_run: bool, today: dt.date | None, protect: set[bytes],
) -> None:
    outcome = archive_decisions(layout, settings.scribe, today=today, dry_run=dry_run,
                                protect=protect)
    if outcome.recovered:
        report.recovered.append(outcome.recovered)
    report.archived = outcome.moved
    report.archived_titles = outcome.titles
    report.archive_note = outcome.note
    if outcome.moved and not dry_run:
        sink.publish(ScribeArchived(
            moved=outcome.moved, target="decisions-archive.md",
            reason=f"decisions.md was {outcome.size_before} bytes; now {outcome.size_after}",
        ))
        log.info("scribe.archived", decisions=outcome.moved, bytes_before=outcome.size_before,
                 bytes_after=outcome.size_after)


def _compact(
    layout: SquadLayout, settings: Settings, sink: EventSink, report: ScribeReport, *,
    dry_run: bool, today: dt.date | None, written: dict[str, list[str]], memory: ScribeMemory,
) -> None:
    for member in roster(layout):
        try:
            moved = compact_history(layout, member.name,
                                    max_bytes=settings.scribe.history_compact_bytes,
                                    today=today, dry_run=dry_run,
                                    protect=written.get(member.name, ()),
                                    recovered=report.recovered)
        except NotUtf8Error as exc:
            note_problem(layout, report, sink, memory, exc, "it is not compacted")
            continue
        if not moved:
            continue
        report.compacted.append(HistoryCompaction(agent=member.name, moved=moved))
        if not dry_run:
            target = layout.history_archive(member.name).relative_to(layout.root)
            sink.publish(ScribeArchived(
                agent=member.name, moved=moved, target=str(target),
                reason=f"history.md reached scribe.history_compact_bytes "
                       f"({settings.scribe.history_compact_bytes})",
            ))
