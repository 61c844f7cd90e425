"""The Router: who takes a task that names no agent, from `@name` mentions and routing.md.

An `@name` in the task that names an agent of the squad wins. Otherwise each row of routing.md's
rule tables is scored by the words it shares with the task, a Work Type word counting twice and
an Examples word once; the best score wins, and on a tie the row higher in the table. The same
task and table always give the same agent.

A rule table has a Work Type (or Pattern) column and an agent column: `Route To`, `Agent`,
`Owner` or `Primary`, with `Secondary` naming the fallback taken when the primary is busy (a live
session), unknown (no charter) or not active (Examples is optional). Agent cells may be
decorated as Squad writes them (`EECOM 🔧`, `**Fenster**`, `@keaton (UI)`): they resolve to an
agent folder through team.md's display names, case and emoji ignored. Rows naming a member whose
team.md status is not active (`📋 Silent`, `🔄 Monitor`) are skipped (or go to the Secondary).
Tables inside HTML comments or code fences are examples, not rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog

from squadd.contracts.names import is_safe_name
from squadd.errors import StateError
from squadd.statcache import StatCache
from squadd.state.layout import SquadLayout
from squadd.state.members import (
    Member,
    blank_comments,
    cells,
    parse_members,
    plain_words,
    unfenced,
)
from squadd.untrusted import replace_spans

_WORK_COLUMNS = ("work type", "pattern", "work", "area", "domain")
_AGENT_COLUMNS = ("route to", "agent", "owner", "primary")
_NONE_CELL_RE = re.compile(r"^[\s—–-]*$")
log = structlog.get_logger("squadd.router")
_WORD_RE = re.compile(r"[a-z0-9]+")
_MENTION_RE = re.compile(r"(?<![\w.@/])@([A-Za-z0-9][A-Za-z0-9._-]{0,63})")
_STOPWORDS = frozenset({
    "a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "could", "do", "does", "for",
    "from", "has", "have", "how", "i", "in", "into", "is", "it", "its", "me", "my", "of", "on",
    "or", "our", "please", "should", "so", "some", "that", "the", "their", "them", "then",
    "there", "these", "this", "to", "up", "us", "was", "we", "what", "when", "where", "which",
    "who", "will", "with", "would", "you", "your",
})


def words(text: str) -> frozenset[str]:
    """The content words of `text`, lower-cased and lightly stemmed (tests -> test)."""
    out = set()
    for word in _WORD_RE.findall(text.lower()):
        if len(word) < 2 or word in _STOPWORDS:
            continue
        if len(word) > 5 and word.endswith("ing"):
            word = word[:-3]
        elif len(word) > 4 and word.endswith("ies"):
            word = word[:-3] + "y"
        elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.add(word)
    return frozenset(out)


@dataclass(frozen=True)
class RoutingRule:
    """One row of a routing.md rule table."""

    work_type: str
    agent: str
    """The agent folder its agent cell names (rows naming nobody are not rules)."""
    examples: str
    type_words: frozenset[str]
    example_words: frozenset[str]
    agent_cell: str = ""
    """The agent cell as written (`EECOM 🔧`)."""
    line: int = 0
    fallback: str = ""
    """The agent folder the `Secondary` cell names ("" for none, or `—`)."""

    def score(self, task_words: frozenset[str]) -> int:
        return (2 * len(task_words & self.type_words)
                + len(task_words & (self.example_words - self.type_words)))


@dataclass(frozen=True)
class RouteChoice:
    agent: str
    routed_by: Literal["mention", "rules"]
    rule: RoutingRule | None = None
    score: int = 0


def _cell_at(row: list[str], columns: dict[str, int], key: str) -> str:
    index = columns.get(key)
    return row[index] if index is not None and index < len(row) else ""


def name_index(members: list[Member]) -> dict[str, str]:
    """Plain display names and folders -> agent folder, for resolving decorated cells."""
    index: dict[str, str] = {}
    for member in members:
        index.setdefault(plain_words(member.display_name), member.folder)
        index.setdefault(plain_words(member.folder), member.folder)
    return index


def resolve_agent_cell(cell: str, names: dict[str, str] | None = None) -> str:
    """The agent folder an agent cell names: its first name that team.md knows, else its first
    word (`EECOM 🔧` -> `eecom`, `**Fenster** (lead)` -> `fenster`); "" when it names none."""
    names = names or {}
    cleaned = cell.replace("`", " ").replace("*", " ").replace("@", " ")
    first = ""
    for part in re.split(r"[,/+&;]|\band\b|\bor\b", cleaned):
        plain = plain_words(replace_spans(part, "(", ")", lambda _: " "))
        if not plain:
            continue
        if plain in names:
            return names[plain]
        head = plain.split()[0]
        if head in names:
            return names[head]
        if not first and is_safe_name(head):
            first = head
    return first


def _columns(header: list[str]) -> dict[str, int] | None:
    lowered = [plain_words(cell) for cell in header]
    found: dict[str, int] = {}
    for key, choices in (("work type", _WORK_COLUMNS), ("route to", _AGENT_COLUMNS),
                         ("secondary", ("secondary",)), ("examples", ("example",))):
        for choice in choices:
            index = next((i for i, c in enumerate(lowered) if c.startswith(choice)), None)
            if index is not None and index not in found.values():
                found[key] = index
                break
    return found if "work type" in found and "route to" in found else None


@dataclass(frozen=True)
class Table:
    """A markdown table of routing.md, outside comments and fences."""

    line: int
    """1-based line of its header row."""
    header: list[str]
    columns: dict[str, int] | None
    """Where Work Type, the agent column (`route to`), Secondary and Examples are; None when it
    is not a rule table."""
    rows: list[tuple[int, list[str]]]
    """(line, cells) of each row after the header and its separator."""


def tables(text: str) -> list[Table]:
    """Every table of `text` outside HTML comments and code fences. A line that only held a
    comment (a row commented out) does not end the table it sits in."""
    found: list[Table] = []
    current: Table | None = None
    text = text.replace("\r\n", "\n")
    written, uncommented = text.split("\n"), blank_comments(text).split("\n")
    for number, raw in enumerate(unfenced(uncommented), start=1):
        line = raw.strip()
        if written[number - 1].strip() and not uncommented[number - 1].strip():
            continue  # it only held a comment: not a blank line
        if not line.startswith("|"):
            current = None
            continue
        row = cells(line)
        if current is None:
            current = Table(number, row, _columns(row), [])
            found.append(current)
        elif not all(set(c) <= set("-: ") for c in row):  # not the header's separator row
            current.rows.append((number, row))
    return found


def parse_routing(text: str, names: dict[str, str] | None = None) -> list[RoutingRule]:
    """The rows of every rule table in `text` (see the module docstring)."""
    rules: list[RoutingRule] = []
    for table in tables(text):
        columns = table.columns
        if columns is None:
            continue
        for number, row in table.rows:
            agent_cell = _cell_at(row, columns, "route to")
            second = _cell_at(row, columns, "secondary")
            agent = resolve_agent_cell(agent_cell, names)
            fallback = "" if _NONE_CELL_RE.match(second) else resolve_agent_cell(second, names)
            if not agent:
                agent, fallback = fallback, ""
            if not agent:
                continue
            work_type = _cell_at(row, columns, "work type")
            examples = _cell_at(row, columns, "examples")
            rules.append(RoutingRule(work_type=work_type, agent=agent, examples=examples,
                                     type_words=words(work_type),
                                     example_words=words(examples),
                                     agent_cell=agent_cell, line=number,
                                     fallback=fallback if fallback != agent else ""))
    return rules


def mentioned_agent(task: str, is_agent: Callable[[str], bool]) -> str | None:
    """The first `@name` in `task` that names an agent of the squad."""
    for match in _MENTION_RE.finditer(task):
        name = match.group(1).rstrip("._-").lower()
        if is_safe_name(name) and is_agent(name):
            return name
    return None


class Router:
    """Picks an agent for a task from mentions and routing.md (re-read when a file changes)."""

    def __init__(self, layout: SquadLayout):
        self.layout = layout
        self._texts: StatCache[str] = StatCache(
            lambda path: layout.read_text(path, errors="replace"), limit=2)
        self._parsed: tuple[str, str, list[RoutingRule], dict[str, Member]] | None = None
        self.problem: str | None = None

    def _text(self, path: Path) -> str:
        try:
            return self._texts.get(path)
        except (FileNotFoundError, NotADirectoryError):
            return ""

    def _load(self) -> tuple[list[RoutingRule], dict[str, Member]]:
        try:
            routing = self._text(self.layout.routing_md)
        except StateError as exc:  # a routing.md leading outside the repository
            if self.problem != str(exc):
                log.warning("routing.not_read", reason=str(exc))
            self.problem = str(exc)
            return [], {}
        self.problem = None
        try:
            team = self._text(self.layout.team_md)
        except StateError as exc:
            log.warning("team.not_read", reason=str(exc))
            team = ""
        if self._parsed is None or self._parsed[:2] != (routing, team):
            members = parse_members(team).members
            rules = parse_routing(routing, name_index(members))
            self._parsed = (routing, team, rules, {m.folder: m for m in members})
        return self._parsed[2], self._parsed[3]

    def rules(self) -> list[RoutingRule]:
        """routing.md's rules (blocking file read: call from a worker thread). A routing.md
        that cannot be read safely (a symlink out of the repository) gives no rules, and
        `problem` says why."""
        return self._load()[0]

    def choose(self, task: str, is_agent: Callable[[str], bool],
               is_busy: Callable[[str], bool] | None = None) -> RouteChoice | None:
        """The agent for `task`, or None when neither a mention nor a rule matches. A rule's
        `Secondary` agent takes the task when its primary is busy (`is_busy`), unknown or not
        active, and the secondary is none of those."""
        mention = mentioned_agent(task, is_agent)
        if mention is not None:
            return RouteChoice(agent=mention, routed_by="mention")
        rules, members = self._load()
        task_words = words(task)
        best: RouteChoice | None = None

        def usable(agent: str) -> bool:
            member = members.get(agent)
            return bool(agent) and (member is None or member.routable) and is_agent(agent)

        for rule in rules:
            score = rule.score(task_words)
            if score <= 0 or (best is not None and score <= best.score):
                continue
            agent = rule.agent if usable(rule.agent) else ""
            busy = bool(agent) and is_busy is not None and is_busy(agent)
            if (not agent or busy) and usable(rule.fallback) and not (
                    is_busy is not None and is_busy(rule.fallback)):
                agent = rule.fallback
            if agent:
                best = RouteChoice(agent=agent, routed_by="rules", rule=rule, score=score)
        return best

    def describe(self) -> str:
        """routing.md's table as text, for a failure that shows what could have matched."""
        rules = self.rules()
        if self.problem is not None:
            return f"routing.md was not read: {self.problem}"
        if not rules:
            return (f"{self.layout.routing_md} has no routing rules: add rows to a table with "
                    "Work Type and Route To (or Agent, Owner, Primary) columns (| Work Type | "
                    "Route To | Examples |)")
        lines = ["| Work Type | Route To | Examples |", "|---|---|---|"]
        lines.extend(f"| {r.work_type} | {r.agent} | {r.examples} |" for r in rules)
        return "\n".join(lines)
