"""Prompt assembly: an agent's system prompt from its charter, history, decisions and context.

Each part has a byte budget (the `[prompt]` settings). An over-budget part keeps its newest
content (the charter keeps its head) and says how much it cut. Files are cached by their stat
signature, so a busy pool does not re-read an unchanged decisions.md for every session.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from squadd.config import PromptSettings
from squadd.state.layout import SquadLayout
from squadd.state.learnings import keep_newest
from squadd.state.skills import list_skills

_CACHE_LIMIT = 256


class _FileCache:
    """Text of small files keyed by (path, mtime_ns, size, inode); bounded, thread-safe."""

    def __init__(self) -> None:
        self._entries: dict[Path, tuple[tuple[int, int, int], str]] = {}
        self._lock = threading.Lock()

    def read(self, path: Path) -> str:
        try:
            st = path.stat()
        except FileNotFoundError:
            return ""
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._lock:
            hit = self._entries.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        with path.open(encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        with self._lock:
            if len(self._entries) >= _CACHE_LIMIT:
                self._entries.pop(next(iter(self._entries)))
            self._entries[path] = (key, text)
        return text


FILES = _FileCache()


def keep_tail(text: str, budget: int, what: str) -> str:
    """The newest part of `text` within `budget` bytes, cut at a line start, with a note."""
    data = text.encode("utf-8")
    if len(data) <= budget:
        return text
    tail = data[-budget:]
    newline = tail.find(b"\n")
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1:]
    kept = tail.decode("utf-8", errors="ignore")
    cut = len(data) - len(tail)
    return f"[{cut} older bytes of {what} cut to fit the prompt budget]\n{kept}"


def keep_head(text: str, budget: int, what: str) -> str:
    data = text.encode("utf-8")
    if len(data) <= budget:
        return text
    head = data[:budget]
    newline = head.rfind(b"\n")
    if newline > 0:
        head = head[:newline]
    kept = head.decode("utf-8", errors="ignore")
    return f"{kept}\n[{len(data) - len(head)} more bytes of {what} cut to fit the prompt budget]"


@dataclass(frozen=True)
class PromptParts:
    charter: str
    history: str
    decisions: str
    context: str
    skills: str


def skills_index(layout: SquadLayout) -> str:
    lines = [f"- {s.name}: {s.summary}" if s.summary else f"- {s.name}"
             for s in list_skills(layout)]
    return "\n".join(lines)


def gather(layout: SquadLayout, agent: str, context: str | None) -> PromptParts:
    """Read everything the prompt needs (blocking: call from a worker thread)."""
    return PromptParts(
        charter=FILES.read(layout.charter(agent)),
        history=FILES.read(layout.history(agent)),
        decisions=FILES.read(layout.decisions_md),
        context=context or "",
        skills=skills_index(layout),
    )


def keep_newest_learnings(text: str, budget: int, what: str) -> str:
    """History within `budget`: its oldest learnings left out whole (wherever the file keeps
    them), or, when that cannot fit, its tail."""
    fitted = keep_newest(text, budget)
    return fitted if fitted is not None else keep_tail(text, budget, what)


def build_system_prompt(agent: str, parts: PromptParts, budgets: PromptSettings) -> str:
    """`You are {agent}, a Squad agent.` and each non-empty part under its heading."""
    sections = [f"You are {agent}, a Squad agent."]
    for heading, text, budget, keep, what in (
        ("## Charter", parts.charter, budgets.charter_bytes, keep_head, "the charter"),
        ("## Project Knowledge", parts.history, budgets.history_bytes, keep_newest_learnings,
         "history"),
        ("## Team Decisions", parts.decisions, budgets.decisions_bytes, keep_tail, "decisions"),
        ("## Additional Context", parts.context, budgets.context_bytes, keep_tail, "context"),
        ("## Skills\nRead one with the squad_skill tool (action 'read').", parts.skills,
         budgets.skills_index_bytes, keep_head, "the skills index"),
    ):
        if text.strip():
            sections.append(f"{heading}\n{keep(text.strip(), budget, what)}")
    return "\n\n".join(sections)


def read_text_cached(path: Path) -> str:
    return FILES.read(path)
