"""The Router: who takes a task that names no agent, from `@name` mentions and routing.md.

An `@name` in the task that names an agent of the squad wins. Otherwise each row of routing.md's
table (Work Type, Route To, Examples) is scored by the words it shares with the task, a Work Type
word counting twice; the best score wins, and on a tie the row higher in the table. The same
task and table always give the same agent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import structlog

from squadd.contracts.names import is_safe_name
from squadd.errors import StateError
from squadd.runtime.prompt import read_text_cached
from squadd.state.layout import SquadLayout

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
    """One row of routing.md's table."""

    work_type: str
    agent: str
    examples: str
    type_words: frozenset[str]
    example_words: frozenset[str]

    def score(self, task_words: frozenset[str]) -> int:
        return (2 * len(task_words & self.type_words)
                + len(task_words & (self.example_words - self.type_words)))


@dataclass(frozen=True)
class RouteChoice:
    agent: str
    routed_by: Literal["mention", "rules"]
    rule: RoutingRule | None = None
    score: int = 0


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _cell_at(cells: list[str], columns: dict[str, int], key: str) -> str:
    index = columns.get(key)
    return cells[index] if index is not None and index < len(cells) else ""


def _agent_cell(cell: str) -> str | None:
    cleaned = cell.replace("`", " ").replace("*", " ").replace("@", " ").strip()
    if not cleaned:
        return None
    name = re.split(r"[\s(,/]", cleaned, maxsplit=1)[0].lower()
    return name if is_safe_name(name) else None


def _without_comments(text: str) -> str:
    """`text` without its `<!-- ... -->` comments, in one pass (a regex with a lazy `.*?`
    rescans the rest of the text for every unclosed `<!--`)."""
    kept: list[str] = []
    position = 0
    while (start := text.find("<!--", position)) >= 0:
        kept.append(text[position:start])
        end = text.find("-->", start + 4)
        if end < 0:
            return "".join(kept)
        position = end + 3
    kept.append(text[position:])
    return "".join(kept)


def parse_routing(text: str) -> list[RoutingRule]:
    """The rows of every table in `text` that has Work Type and Route To columns."""
    rules: list[RoutingRule] = []
    columns: dict[str, int] | None = None
    for raw in _without_comments(text).splitlines():
        line = raw.strip()
        if not line.startswith("|"):
            columns = None
            continue
        cells = _cells(line)
        if columns is None:
            lowered = [c.lower().strip("* ") for c in cells]
            found = {key: i for i, c in enumerate(lowered)
                     for key in ("work type", "route to", "examples") if key in c}
            if "work type" in found and "route to" in found:
                columns = found
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue  # the header's separator row
        agent = _agent_cell(_cell_at(cells, columns, "route to"))
        if agent is None:
            continue
        work_type = _cell_at(cells, columns, "work type")
        examples = _cell_at(cells, columns, "examples")
        rules.append(RoutingRule(work_type=work_type, agent=agent, examples=examples,
                                 type_words=words(work_type), example_words=words(examples)))
    return rules


def mentioned_agent(task: str, is_agent: Callable[[str], bool]) -> str | None:
    """The first `@name` in `task` that names an agent of the squad."""
    for match in _MENTION_RE.finditer(task):
        name = match.group(1).rstrip("._-").lower()
        if is_safe_name(name) and is_agent(name):
            return name
    return None


class Router:
    """Picks an agent for a task from mentions and routing.md (re-read when the file changes)."""

    def __init__(self, layout: SquadLayout):
        self.layout = layout
        self._parsed: tuple[str, list[RoutingRule]] | None = None
        self.problem: str | None = None

    def rules(self) -> list[RoutingRule]:
        """routing.md's rules (blocking file read: call from a worker thread). A routing.md
        that cannot be read safely (a symlink out of the repository) gives no rules, and
        `problem` says why."""
        try:
            text = read_text_cached(self.layout, self.layout.routing_md)
        except StateError as exc:
            if self.problem != str(exc):
                log.warning("routing.not_read", reason=str(exc))
            self.problem = str(exc)
            return []
        self.problem = None
        if self._parsed is None or self._parsed[0] != text:
            self._parsed = (text, parse_routing(text))
        return self._parsed[1]

    def choose(self, task: str, is_agent: Callable[[str], bool]) -> RouteChoice | None:
        """The agent for `task`, or None when neither a mention nor a rule matches."""
        mention = mentioned_agent(task, is_agent)
        if mention is not None:
            return RouteChoice(agent=mention, routed_by="mention")
        task_words = words(task)
        best: RouteChoice | None = None
        for rule in self.rules():
            score = rule.score(task_words)
            if score > 0 and (best is None or score > best.score) and is_agent(rule.agent):
                best = RouteChoice(agent=rule.agent, routed_by="rules", rule=rule, score=score)
        return best

    def describe(self) -> str:
        """routing.md's table as text, for a failure that shows what could have matched."""
        rules = self.rules()
        if self.problem is not None:
            return f"routing.md was not read: {self.problem}"
        if not rules:
            return (f"{self.layout.routing_md} has no routing rules: add rows to its table "
                    "(| Work Type | Route To | Examples |)")
        lines = ["| Work Type | Route To | Examples |", "|---|---|---|"]
        lines.extend(f"| {r.work_type} | {r.agent} | {r.examples} |" for r in rules)
        return "\n".join(lines)
