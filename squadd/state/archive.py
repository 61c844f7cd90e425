"""The archive gate: keeps decisions.md small by moving old entries to decisions-archive.md.

At `archive_soft_bytes` entries older than `archive_soft_days` move; at `archive_hard_bytes`,
older than `archive_hard_days`. Undated entries stay. If the file is still over the soft size, the
oldest dated entries move until it is under. The archive is appended and fsynced (through a
write-ahead intent) before decisions.md is atomically rewritten, so a crash never loses or doubles
an entry. Callers hold the Scribe lock.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from squadd.config import ScribeSettings
from squadd.fsio import TEAM_FILE, atomic_write
from squadd.state.crashpoint import crash_point
from squadd.state.decision_index import DecisionIndex, entry_digest
from squadd.state.decisions import DecisionEntry, ParsedDecisions, parse_entries
from squadd.state.intent import (
    AppendIntent,
    append_with_intent,
    clear_intent,
    finish_append,
    pending_intent,
)
from squadd.state.layout import SquadLayout
from squadd.state.textstyle import TextStyle, detect, file_style, in_style, plain, restyle

log = structlog.get_logger("squadd.state")

ARCHIVE_HEADING = "# Decisions Archive\n\nDecisions moved out of decisions.md by the Scribe.\n\n"


@dataclass
class ArchiveOutcome:
    moved: int = 0
    size_before: int = 0
    size_after: int = 0
    titles: list[str] = field(default_factory=list)
    note: str = ""
    """Why decisions.md is still over the threshold, when it is."""
    recovered: str = ""


def render_decisions(preamble: str, entries: list[str]) -> str:
    """decisions.md from its preamble and entry texts, one blank line between entries."""
    head = preamble.rstrip("\n")
    body = "\n".join(entries)
    if not head:
        return body
    return f"{head}\n\n{body}" if body else f"{head}\n"


def _rendered_size(head_bytes: int, sizes: list[int]) -> int:
    if not sizes:
        return head_bytes + 1 if head_bytes else 0
    return (head_bytes + 2 if head_bytes else 0) + sum(sizes) + len(sizes) - 1


def plan_archive(
    entries: list[DecisionEntry], preamble: str, size: int, settings: ScribeSettings,
    today: dt.date, protect: Collection[bytes] = (),
) -> tuple[list[int], str]:
    """Which entries (by position) to move, and a note when the file stays over the threshold.

    Only whole dated decisions move (with their sub-sections); never the newest one, never one
    in `protect` (digests of decisions merged in the same pass), never a `section`."""
    if size < settings.archive_soft_bytes:
        return [], ""
    hard = size >= settings.archive_hard_bytes
    days = settings.archive_hard_days if hard else settings.archive_soft_days
    cutoff = today - dt.timedelta(days=days)
    movable = [i for i, e in enumerate(entries) if e.kind == "decision" and e.date is not None
               and entry_digest(e.text) not in protect]
    if movable:
        # The newest decision always stays: the team reads decisions.md, not the archive.
        newest = max(movable, key=lambda i: (entries[i].date, i))
        movable.remove(newest)
    move = {i for i in movable if (entries[i].date or today) < cutoff}
    sizes = [len(e.text.encode("utf-8")) for e in entries]
    head_bytes = len(preamble.rstrip("\n").encode("utf-8"))
    kept = [sizes[i] for i in range(len(entries)) if i not in move]
    remaining = _rendered_size(head_bytes, kept)
    # Fall back by count: the oldest dated entries go first, file order breaking ties.
    by_age = sorted((i for i in movable if i not in move), key=lambda i: (entries[i].date, i))
    for i in by_age:
        if remaining < settings.archive_soft_bytes:
            break
        move.add(i)
        kept_count = len(entries) - len(move)
        remaining -= sizes[i] + (1 if kept_count else 0)
        if not kept_count:
            remaining = _rendered_size(head_bytes, [])
    note = ""
    if remaining >= settings.archive_soft_bytes:
        undated = sum(1 for i, e in enumerate(entries) if i not in move and e.date is None)
        note = (f"decisions.md stays at {remaining} bytes, over scribe.archive_soft_bytes "
                f"({settings.archive_soft_bytes}): its {undated} remaining entries are undated, "
                "and undated entries are never archived (give them a '### YYYY-MM-DD: ' "
                "heading to let them move)")
    return sorted(move), note


def archive_decisions(
    layout: SquadLayout, settings: ScribeSettings, *, today: dt.date | None = None,
    dry_run: bool = False, protect: Collection[bytes] = (),
) -> ArchiveOutcome:
    """Run the archive gate once (the caller holds the Scribe lock)."""
    outcome = ArchiveOutcome()
    if not dry_run:
        outcome.recovered = recover_archive(layout)
    try:
        size = layout.decisions_md.stat().st_size
        outcome.size_before = outcome.size_after = size
        if size < settings.archive_soft_bytes:
            return outcome
        raw = layout.decisions_md.read_bytes()
    except FileNotFoundError:
        return outcome
    outcome.size_before = outcome.size_after = len(raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        outcome.note = (f"decisions.md is not valid UTF-8 (byte {exc.start}); it is not archived "
                        "until it is fixed")
        log.warning("archive.skipped", why=outcome.note)
        return outcome
    parsed = parse_entries(text)
    positions, outcome.note = plan_archive(parsed.entries, parsed.preamble, len(raw), settings,
                                           today or dt.date.today(), protect)
    if outcome.note:
        log.warning("archive.note", note=outcome.note)
    if not positions:
        return outcome
    moved = [parsed.entries[i] for i in positions]
    outcome.moved = len(moved)
    outcome.titles = [e.title for e in moved]
    chosen = set(positions)
    outcome.size_after = len(render_decisions(
        parsed.preamble, [e.text for i, e in enumerate(parsed.entries) if i not in chosen]
    ).encode("utf-8"))
    if dry_run:
        return outcome
    style = file_style(layout.decisions_archive, TextStyle(bom=False, eol=detect(text).eol))
    chunk = in_style(separator_before_append(layout.decisions_archive, ARCHIVE_HEADING)
                     + "\n".join(e.text for e in moved), style)
    intent = append_with_intent(
        layout, layout.decisions_archive, chunk.encode("utf-8"),
        {"remove": [entry_digest(e.text).hex() for e in moved]},
    )
    crash_point("decisions-archived")
    _finish(layout, intent)
    return outcome


def recover_archive(layout: SquadLayout) -> str:
    """Complete an archive step a crash interrupted; return what was done ("" for nothing)."""
    intent = pending_intent(layout, layout.decisions_archive)
    if intent is None:
        return ""
    state = finish_append(intent)
    if state == "stale":
        log.warning("archive.stale_intent", target="decisions-archive.md",
                    why="it changed since an interrupted archive step; not repeating it")
        clear_intent(intent)
        return "an interrupted archive step no longer applied (the archive changed); skipped"
    removed = _finish(layout, intent)
    return f"finished an interrupted archive step ({state} append, {removed} entries removed)"


def _finish(layout: SquadLayout, intent: AppendIntent) -> int:
    """Remove the archived entries from decisions.md, re-index it, and clear the intent."""
    remove = Counter(bytes.fromhex(h) for h in intent.meta.get("remove", []))
    try:
        text = layout.decisions_md.read_bytes().decode("utf-8")
    except FileNotFoundError:
        text = ""
    body = plain(text)
    parsed = parse_entries(body)
    gone: list[int] = []
    for n, entry in enumerate(parsed.entries):
        digest = entry_digest(entry.text)
        if remove[digest] > 0:
            remove[digest] -= 1
            gone.append(n)
    removed = len(gone)
    if removed:
        atomic_write(layout.decisions_md, restyle(text, without_entries(body, parsed, gone)),
                     new_mode=TEAM_FILE)
        crash_point("decisions-rewritten")
        with DecisionIndex(layout, writable=True) as index:
            index.rebuild()
    clear_intent(intent)
    return removed


def without_entries(text: str, parsed: ParsedDecisions, gone: list[int]) -> str:
    """Plain `text` without the entries at positions `gone`, each cut from its heading to the
    next entry's heading (its trailing blank lines with it); every other line stays as it is."""
    spans: list[tuple[int, int]] = []
    cursor = len(parsed.preamble)
    for entry in parsed.entries:
        at = text.find(entry.text.rstrip("\n"), cursor)
        if at < 0:  # cannot happen for text parse_entries split; keep the file whole
            return text
        spans.append((at, at + len(entry.text.rstrip("\n"))))
        cursor = spans[-1][1]
    out: list[str] = []
    last = 0
    for n in sorted(gone):
        start = spans[n][0]
        end = spans[n + 1][0] if n + 1 < len(spans) else len(text)
        out.append(text[last:start])
        last = end
    out.append(text[last:])
    joined = "".join(out)
    if gone and max(gone) == len(spans) - 1:  # the last entry went: end on one newline
        joined = joined.rstrip("\n") + "\n" if joined.strip() else ""
    return joined


def separator_before_append(path: Path, heading: str) -> str:
    """What goes before entries appended to the markdown file at `path`: `heading` when it is
    missing or empty, else what makes exactly one blank line after its last entry."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - 4))
            last = handle.read()
    except FileNotFoundError:
        return heading
    if size == 0:
        return heading
    if last.endswith((b"\n\n", b"\n\r\n")):
        return ""
    return "\n" if last.endswith(b"\n") else "\n\n"
