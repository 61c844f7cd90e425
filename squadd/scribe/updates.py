"""Team updates: a merged decision that names agents adds a `📌 Team update` to each one's
history, in that history's own style, naming the decision's real author.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence

from squadd.contracts.events import EventSink
from squadd.errors import NotUtf8Error
from squadd.scribe.report import ScribeMemory, ScribeReport, note_problem
from squadd.state.decisions import parse_entries
from squadd.state.history import HistoryNote, append_history_lines
from squadd.state.inbox import Accepted, agent_and_title
from squadd.state.layout import SquadLayout


class AgentMatcher:
    """Finds the roster agents a decision names, as `@name` or as a whole word."""

    def __init__(self, agents: Sequence[str]):
        self.agents = list(agents)
        names = sorted(set(agents), key=len, reverse=True)
        self._pattern = (
            re.compile(r"(?<![\w-])@?(" + "|".join(re.escape(n) for n in names) + r")(?![\w-])",
                       re.IGNORECASE)
            if names else None
        )

    def __bool__(self) -> bool:
        return self._pattern is not None

    def find(self, text: str) -> set[str]:
        if self._pattern is None:
            return set()
        return {match.lower() for match in self._pattern.findall(text)}


def team_update_line(title: str, author: str, day: dt.date) -> str:
    return f"📌 Team update ({day.isoformat()}): {title} — decided by {author}"


def send_team_updates(
    layout: SquadLayout, matcher: AgentMatcher, new: list[tuple[str, bytes, Accepted]],
    report: ScribeReport, sink: EventSink, written: dict[str, list[str]],
    memory: ScribeMemory,
) -> int:
    if not matcher or not new:
        return 0
    notes: dict[str, list[HistoryNote]] = {}
    for text, _, accepted in new:
        parsed = parse_entries(text).entries
        if not parsed:
            continue
        entry = parsed[0]
        author = entry.by or agent_and_title(accepted.file.name, matcher.agents)[0]
        body = "\n".join(line for line in text.split("\n")
                         if not _AUTHOR_LINE.match(line))
        named = matcher.find(body) - matcher.find(author)
        day = entry.date or dt.date.fromtimestamp(accepted.file.mtime_ns / 1e9)
        note = HistoryNote(title=f"Team update: {entry.title}",
                           text=team_update_line(entry.title, author, day), day=day)
        for agent in sorted(named):
            notes.setdefault(agent, []).append(note)
    added = 0
    for agent, agent_notes in notes.items():
        try:
            entries = append_history_lines(layout, agent, agent_notes)
        except NotUtf8Error as exc:
            note_problem(layout, report, sink, memory, exc, "its team updates were not added")
            continue
        written.setdefault(agent, []).extend(entries)
        added += len(entries)
    return added


_AUTHOR_LINE = re.compile(r"^\s*(?:[-*]\s+)?\*\*(?:by|author)(?::\*\*|\*\*\s*:)", re.IGNORECASE)


