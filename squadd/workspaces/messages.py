"""The message of a landed session's commit: a subject of at most 72 characters written from the
agent's final answer (or the `commit_message:` line it ends with), a body with the task and a
short summary, and the `Squad-Session:` / `Squad-Agent:` (and, traced, `Squad-Trace:`) trailers.

An agent names its own subject with a line of its final answer such as
``commit_message: Fix the overflow in parse_duration``; that line is left out of the summary.
"""

from __future__ import annotations

import re
import textwrap

SUBJECT_CHARS = 72
SUMMARY_CHARS = 1200
WRAP = 72
_GIVEN_RE = re.compile(r"^\s*(?:commit[_ -]message)\s*:\s*(.*\S)\s*$", re.IGNORECASE | re.M)
_MARKUP_RE = re.compile(r"^(?:#+\s*|[-*>]\s+|\*\*|__)")


def given_subject(answer: str) -> str | None:
    """The subject the agent named with a `commit_message:` line (its last one), if any."""
    found = _GIVEN_RE.findall(answer or "")
    return found[-1] if found else None


def subject(text: str, limit: int = SUBJECT_CHARS) -> str:
    """The first meaningful line of `text`, without markdown markup, cut at a word boundary
    to at most `limit` characters ("…" marks a cut)."""
    for raw in (text or "").splitlines():
        line = _MARKUP_RE.sub("", raw.strip()).strip().rstrip("*_").strip()
        if line and not line.startswith("```"):
            break
    else:
        return ""
    line = " ".join(line.split())
    if len(line) <= limit:
        return line
    cut = line[:limit - 1]
    if " " in cut[limit // 2:]:
        cut = cut[:cut.rindex(" ")]
    return cut.rstrip(" ,;:.-") + "…"


def _summary(answer: str) -> str:
    kept = "\n".join(line for line in answer.splitlines() if not _GIVEN_RE.match(line)).strip()
    if len(kept) > SUMMARY_CHARS:
        kept = kept[:SUMMARY_CHARS].rsplit(" ", 1)[0] + " …"
    return "\n".join(textwrap.fill(p, WRAP) if not p.startswith(("    ", "- ", "* ", "```"))
                     else p for p in kept.split("\n"))


def commit_message(*, task: str, answer: str, session_id: str, agent: str,
                   trace: str | None = None) -> str:
    """The whole message of a session's commit."""
    head = given_subject(answer) or subject(answer) or subject(task) or f"work of {agent}"
    head = subject(head)
    parts = [head]
    task_text = " ".join(task.split())
    if task_text:
        parts.append(textwrap.fill(f"Task: {task_text[:SUMMARY_CHARS]}", WRAP))
    summary = _summary(answer)
    first, _, rest = summary.partition("\n")
    if subject(first) == head:  # said once, as the subject
        summary = rest.strip()
    if summary:
        parts.append(summary)
    parts.append(f"Squad-Session: {session_id}\nSquad-Agent: {agent}"
                 + (f"\nSquad-Trace: {trace}" if trace else ""))
    return "\n\n".join(parts) + "\n"


def parse_identity(text: str) -> tuple[str, str] | None:
    """(name, email) of "Name <email>", or None when `text` is not one."""
    found = re.fullmatch(r"\s*([^<>]+?)\s*<([^<>\s]+)>\s*", text or "")
    return (found.group(1), found.group(2)) if found else None
