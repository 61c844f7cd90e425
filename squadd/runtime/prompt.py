"""Prompt assembly: an agent's system prompt from its charter, history, decisions and context.

Each part has a byte budget (the `[prompt]` settings). An over-budget part keeps its newest
content (the charter keeps its head) and says how much it cut. Files are read through the
runtime's stat-keyed cache, so a busy pool does not re-read an unchanged decisions.md for every
session.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from squadd.config import PromptSettings
from squadd.errors import StateError
from squadd.statcache import NotCached, StatCache
from squadd.state.layout import SquadLayout
from squadd.state.learnings import keep_newest
from squadd.state.skills import SkillInfo, SkillSummaries, list_known_skills, list_skills

log = structlog.get_logger("squadd.prompt")


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


def skills_index(layout: SquadLayout, summaries: SkillSummaries | None = None) -> str:
    """One line per skill: `- {name}: {description from its front matter}` (blocking)."""
    return _index(list_skills(layout, summaries))


def _index(skills: list[SkillInfo]) -> str:
    return "\n".join(f"- {s.name}: {s.summary}" if s.summary else f"- {s.name}"
                     for s in skills)


def file_cache(layout: SquadLayout, limit: int = 256) -> StatCache[str]:
    """A cache of the squad's small text files, each read through the layout's "stays inside"
    rule (a symlink out of the repository raises `StateError`)."""
    return StatCache(lambda path: layout.read_text(path, errors="replace"), limit=limit)


def gather(layout: SquadLayout, agent: str, context: str | None,
           files: StatCache[str] | None = None,
           summaries: SkillSummaries | None = None, *,
           charter: str | None = None) -> PromptParts:
    """Read everything the prompt needs (blocking: call from a worker thread), through the
    owner's `files` cache and skill `summaries` (`skills.summary_cache()`) when it has them.
    A file that cannot be read safely (a symlink out of the repository, a FIFO) is left out
    with a note, and logged with the reason. `charter`: as `gather_known`'s."""
    cache = files if files is not None else file_cache(layout, limit=4)

    def read(part: str) -> str:
        if part == "charter" and charter is not None:
            return charter
        path = layout.prompt_file(part, agent)
        try:
            return cache.peek(path)
        except NotCached:  # read here (not by the cache calling back up): then kept
            key = cache.stamp(path)
            text = layout.read_text(path, errors="replace")
            cache.store(path, key, text)
            return text

    return _parts(layout, agent, context, read, skills_index(layout, summaries))


def gather_known(layout: SquadLayout, agent: str, context: str | None,
                 files: StatCache[str], summaries: SkillSummaries, *,
                 charter: str | None = None) -> PromptParts:
    """`gather`'s parts from the caches alone, each file only stat'ed (the event loop may
    call it); `NotCached` when a file would have to be read. `charter`: the charter's text as
    the route's plan read it a moment before (its file is not looked at again)."""

    def look(part: str) -> str:
        if part == "charter" and charter is not None:
            return charter
        # A cache hit was read through the layout's check: only a stat is needed.
        return files.peek(layout.prompt_file(part, agent, check=False))

    return _parts(layout, agent, context, look, _index(list_known_skills(layout, summaries)))


def _parts(layout: SquadLayout, agent: str, context: str | None,
           look: Callable[[str], str], skills: str) -> PromptParts:
    def read(part: str, what: str) -> str:
        try:
            return look(part)
        except (FileNotFoundError, NotADirectoryError):
            return ""
        except StateError as exc:
            log.warning("prompt.file_not_read", part=what, reason=str(exc))
            return f"({what} was not read: it is not a regular file inside the repository)"

    return PromptParts(charter=read("charter", "charter"), history=read("history", "history"),
                       decisions=read("decisions", "decisions"), context=context or "",
                       skills=skills)


def keep_newest_learnings(text: str, budget: int, what: str) -> str:
    """History within `budget`: its oldest learnings left out whole (wherever the file keeps
    them), or, when that cannot fit, its tail."""
    fitted = keep_newest(text, budget)
    return fitted if fitted is not None else keep_tail(text, budget, what)


WORKTREE_NOTE = (
    "You work in a git worktree, on a branch of its own: your commands and file tools run "
    "there. Leave writing to git to squadd: when the task ends it commits what you changed "
    "and lands it when the route asks. Under squadd's sandbox git's own files are read-only "
    "to your commands (`git status`, `git diff` and `git log` work; `git add`, `git commit` "
    "and `git push` fail). Your final answer's first line becomes the commit's subject, "
    "unless the answer has a line `commit_message: <subject>` (at most 72 characters).")
"""The `## Workspace` part of a session that works in a worktree."""
SHARED_NOTE = (
    "You work in the repository's own working tree, which people share: what you change "
    "stays there, uncommitted, for a person to review. squadd's sandbox keeps git's own "
    "files and `.squad/` read-only to your commands (`git status`, `git diff` and `git log` "
    "work; `git add` and `git commit` fail); the team's files change through the squad "
    "tools.")
"""The `## Workspace` part of a session that works in the working tree under the sandbox."""


def workspace_note(*, worktree: bool, sandbox: str) -> str:
    """What a session is told of where it works and how its work reaches git: the same words
    for every session alike (so that its prompt is kept, and cached by providers, once);
    nothing for a session in the working tree with the sandbox off (`sandbox`: its mode)."""
    if worktree:
        return WORKTREE_NOTE
    return "" if sandbox == "off" else SHARED_NOTE


def build_system_prompt(agent: str, parts: PromptParts, budgets: PromptSettings, *,
                        workspace: str = "") -> str:
    """`You are {agent}, a Squad agent.` and each non-empty part under its heading;
    `workspace` (`workspace_note`) under `## Workspace`, after the context."""
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
        if workspace and heading == "## Additional Context":
            sections.append(f"## Workspace\n{workspace}")
    return "\n\n".join(sections)
