"""The soak's invariants. Each check reads what a run left behind (transcripts, decisions.md and
its archive, histories, the chaos server's request log, the process table, .squad/run/) and
returns a `Check` that names every violation; `assert_all` fails with all of them at once.
The checks about the built-in workspace tools are in `workspace_invariants`.

    checks = [routes_ended(...), transcripts_well_formed(...), ...]
    assert_all(checks)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from squadd.state.decisions import parse_decisions
from squadd.state.history import format_learning
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import Transcript, list_transcripts, read_transcript
from tests.support.chaos_server import CLIENT_ERRORS, ChaosRecord

ENDED_STATES = frozenset({"completed", "error", "interrupted"})
RESTING_VIEWS = frozenset({"idle", "error", "interrupted", "destroyed"})
CLOCK_SLACK_S = 0.002
"""Allowed for turning an HTTP-date Retry-After (wall clock) into a monotonic deadline."""
RSS_GROWTH_LIMIT = 1.5
SHOWN = 25
"""Violations listed per check (the count is always complete)."""


@dataclass
class Check:
    """One invariant: how many things it looked at, and what broke it."""

    name: str
    checked: int = 0
    failures: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "checked": self.checked,
                "violations": len(self.failures), **self.notes}


def assert_all(checks: Iterable[Check]) -> None:
    failed = [check for check in checks if not check.ok]
    if not failed:
        return
    parts = []
    for check in failed:
        shown = "\n    ".join(check.failures[:SHOWN])
        more = f"\n    ... and {len(check.failures) - SHOWN} more" \
            if len(check.failures) > SHOWN else ""
        parts.append(f"{check.name}: {len(check.failures)} violation(s) among {check.checked} "
                     f"checked:\n    {shown}{more}")
    raise AssertionError("soak invariants broken:\n" + "\n".join(parts))


def load_transcripts(layout: SquadLayout) -> dict[str, Transcript]:
    return {path.name.removesuffix(".jsonl"): read_transcript(path)
            for path in list_transcripts(layout)}


def routes_ended(accepted: Mapping[str, str], views: Mapping[str, dict[str, Any] | None],
                 transcripts: Mapping[str, Transcript]) -> Check:
    """Every accepted route (session id -> what submitted it) ended as completed, error with a
    reason, or interrupted, in its transcript and in the API; no transcript at all is stuck."""
    check = Check("every accepted route ended; none stuck, none vanished")
    for session_id, origin in sorted(accepted.items()):
        check.checked += 1
        view = views.get(session_id)
        if session_id not in transcripts:
            check.failures.append(f"vanished: {origin} was accepted as session {session_id}, "
                                  "which has no transcript")
        if view is None:
            check.failures.append(f"vanished: {origin} was accepted as session {session_id}, "
                                  "which GET /v1/sessions/{id} does not know")
        elif view.get("state") not in RESTING_VIEWS:
            check.failures.append(f"stuck: {origin} (session {session_id}) is still "
                                  f"{view.get('state')} in the API")
    for session_id, transcript in sorted(transcripts.items()):
        last = transcript.states[-1] if transcript.states else {}
        state = last.get("state")
        where = f"session {session_id} ({accepted.get(session_id, 'a routed sub-task')})"
        if state not in ENDED_STATES:
            check.failures.append(f"stuck: {where} ends in state {state!r}, not one of "
                                  f"{sorted(ENDED_STATES)}")
        elif state == "error" and not str(last.get("error") or "").strip():
            check.failures.append(f"{where} ended in error without a reason")
        elif state == "interrupted" and not str(last.get("reason") or last.get("error")
                                                or "").strip():
            check.failures.append(f"{where} was interrupted without a reason")
    outcomes = Counter(t.last_state for t in transcripts.values())
    check.notes = {"sessions": len(transcripts), "outcomes": dict(sorted(
        (str(k), v) for k, v in outcomes.items()))}
    return check


def transcripts_well_formed(transcripts: Mapping[str, Transcript]) -> Check:
    """Every line parses, the meta comes first, and each assistant message's tool results
    follow it, in the order of its calls, before anything else is said."""
    check = Check("every transcript parses; tool results follow their calls in order")
    for session_id, transcript in sorted(transcripts.items()):
        check.checked += 1
        if transcript.torn_lines:
            check.failures.append(f"session {session_id}: {transcript.torn_lines} line(s) do "
                                  "not parse")
        if not transcript.records or transcript.records[0].get("kind") != "meta":
            check.failures.append(f"session {session_id}: the first record is not its meta")
        due: list[str] = []
        for number, record in enumerate(transcript.records, 1):
            if record.get("kind") != "message":
                continue
            message = record.get("message") or {}
            role = message.get("role")
            if role == "tool":
                call_id = message.get("tool_call_id")
                if not due:
                    check.failures.append(f"session {session_id} record {number}: tool result "
                                          f"{call_id} answers no pending call")
                elif call_id != due[0]:
                    check.failures.append(f"session {session_id} record {number}: tool result "
                                          f"{call_id} came where the result of {due[0]} was due")
                    if call_id in due:
                        due.remove(call_id)
                else:
                    due.pop(0)
                continue
            if due:
                check.failures.append(f"session {session_id} record {number}: a {role} message "
                                      f"came while results of {due} were still due")
            due = [str(c.get("id")) for c in message.get("tool_calls") or []]
        if due and transcript.last_state != "interrupted":
            check.failures.append(f"session {session_id} ended {transcript.last_state} with "
                                  f"calls {due} never answered")
    return check


def pool_consistent(problems: Iterable[str]) -> Check:
    """The daemon's own check of its slot accounting (`SessionPool.invariant_violations`,
    read from `/v1/health` once the run has settled) found nothing wrong."""
    check = Check("slots in use equal the sessions holding one; no session at rest waits")
    check.checked = 1
    check.failures.extend(problems)
    return check


def call_ids_unique(transcripts: Mapping[str, Transcript]) -> Check:
    """No tool call id is used twice in one session (spill files and results are keyed by it)."""
    check = Check("tool call ids are unique within each session")
    for session_id, transcript in sorted(transcripts.items()):
        ids = Counter(str(call.get("id")) for message in transcript.messages
                      for call in message.get("tool_calls") or [])
        check.checked += sum(ids.values())
        check.failures.extend(f"session {session_id}: call id {call_id} used {count} times"
                              for call_id, count in sorted(ids.items()) if count > 1)
    return check


def stalls_stopped(transcripts: Mapping[str, Transcript], tool: str = "soak_stall") -> Check:
    """Every call of the runaway Python tool ended in its timeout (or, cut off by a stop, in
    the interruption's stand-in): none ran on, none succeeded."""
    check = Check(f"every {tool} call was stopped by its timeout")
    for session_id, transcript in sorted(transcripts.items()):
        for message in transcript.messages:
            if message.get("role") != "tool" or message.get("name") != tool:
                continue
            check.checked += 1
            text = str(message.get("content") or "")
            if not (text.startswith(f"{tool} timed out after") or text.startswith("interrupted:")):
                check.failures.append(f"session {session_id}: {tool} answered {text[:120]!r}")
    return check


def _successes(transcripts: Mapping[str, Transcript], tool: str
               ) -> list[tuple[str, dict[str, Any]]]:
    """(session id, arguments) of each call of `tool` whose result was a success."""
    found = []
    for session_id, transcript in transcripts.items():
        calls: dict[str, dict[str, Any]] = {}
        for record in transcript.records:
            message = record.get("message") if record.get("kind") == "message" else None
            if not isinstance(message, dict):
                continue
            for call in message.get("tool_calls") or []:
                calls[str(call.get("id"))] = call
            call = calls.get(str(message.get("tool_call_id")))
            if (message.get("role") == "tool" and record.get("result_type") == "success"
                    and call is not None and call.get("name") == tool):
                found.append((session_id, dict(call.get("arguments") or {})))
    return found


def decisions_once(layout: SquadLayout, transcripts: Mapping[str, Transcript],
                   direct: Iterable[str] = ()) -> Check:
    """Each successful squad_decide (and each title in `direct`, decided over MCP or HTTP) is in
    decisions.md or decisions-archive.md exactly once; no entry is there twice."""
    check = Check("every successful squad_decide is in decisions.md or the archive exactly once")
    entries = (parse_decisions(layout.decisions_md).entries
               + parse_decisions(layout.decisions_archive).entries)
    titles = Counter(entry.title for entry in entries)
    wanted = [(f"session {sid}", str(args.get("title")))
              for sid, args in _successes(transcripts, "squad_decide")]
    wanted += [("a direct call", title) for title in direct]
    for where, title in wanted:
        check.checked += 1
        if titles[title] != 1:
            check.failures.append(f"decision {title!r} ({where}) appears {titles[title]} times "
                                  "in decisions.md and decisions-archive.md")
    doubled = sorted(t for t, n in titles.items() if n > 1 and t not in {w[1] for w in wanted})
    check.failures += [f"decision {title!r} appears {titles[title]} times" for title in doubled]
    inbox_left = sorted(p.name for p in layout.inbox_dir.glob("*.md"))
    if inbox_left:
        check.failures.append(f"the final Scribe pass left {len(inbox_left)} inbox file(s): "
                              f"{inbox_left[:5]}")
    rejected = sorted(p.name for p in layout.rejected_dir.glob("*")) \
        if layout.rejected_dir.is_dir() else []
    if rejected:  # every inbox file here was written by squad_decide: all must parse
        check.failures.append(f"the Scribe rejected {len(rejected)} inbox file(s) squad_decide "
                              f"wrote: {rejected[:5]}")
    check.notes = {"entries": len(entries), "archived": len(
        parse_decisions(layout.decisions_archive).entries)}
    return check


def learnings_once(layout: SquadLayout, transcripts: Mapping[str, Transcript]) -> Check:
    """Each successful squad_memory is in its agent's history.md or history-archive.md exactly
    once."""
    check = Check("every successful squad_memory is in history.md or its archive exactly once")
    lines: dict[str, Counter[str]] = {}

    def history_lines(agent: str) -> Counter[str]:
        if agent not in lines:
            counted: Counter[str] = Counter()
            for path in (layout.history(agent), layout.history_archive(agent)):
                if path.exists():
                    counted.update(line.strip() for line in
                                   path.read_text(encoding="utf-8").splitlines())
            lines[agent] = counted
        return lines[agent]

    for session_id, args in _successes(transcripts, "squad_memory"):
        check.checked += 1
        agent = str(args.get("agentName", "")).lower()
        learning = str(args.get("learning", ""))
        expected = format_learning(learning, str(args.get("category", "general")))
        # A bullet (`- **[category]** text`) in a bullet-style history, or the text below its
        # `### YYYY-MM-DD: title` heading in Squad's style (a fresh history's): once in all.
        counted = history_lines(agent)
        count = counted[expected] + counted[learning.strip()]
        if count != 1:
            check.failures.append(f"learning {expected!r} (session {session_id}) appears "
                                  f"{count} times in {agent}'s history.md and archive")
    archived = sum(layout.history_archive(a).exists() for a in lines)
    check.notes = {"agents_with_history_archive": archived}
    return check


def retries_respected(records: list[ChaosRecord], *, slack_s: float = CLOCK_SLACK_S) -> Check:
    """No retry arrived sooner than the Retry-After its previous attempt was answered with, and
    no request answered 400/401/404 (or answered well) was sent again by the same daemon.

    A retry is the next request with the same body from the same daemon process (epoch)."""
    check = Check("no retry sooner than Retry-After; nothing retried after 400/401/404")
    last: dict[tuple[int, str], ChaosRecord] = {}
    retries = honoured = 0
    for record in sorted(records, key=lambda r: r.arrived):
        check.checked += 1
        key = (record.epoch, record.body_hash)
        previous = last.get(key)
        last[key] = record
        if previous is None:
            continue
        retries += 1
        where = (f"request #{record.seq} ({record.conversation or '?'} turn {record.turn}, "
                 f"attempt {record.attempt})")
        if previous.status in CLIENT_ERRORS:
            check.failures.append(f"{where} repeats #{previous.seq}, which was answered "
                                  f"{previous.status}: a 4xx other than 429 is never retried")
        elif previous.status == 200 and not previous.fault:
            check.failures.append(f"{where} repeats #{previous.seq}, which was answered "
                                  "successfully")
        if previous.not_before is not None:
            honoured += 1
            early = previous.not_before - record.arrived
            if early > slack_s:
                check.failures.append(
                    f"{where} arrived {record.arrived - previous.answered:.3f}s after "
                    f"#{previous.seq} was answered {previous.status} with Retry-After "
                    f"{previous.retry_after!r}: {early:.3f}s too early")
    if honoured == 0:
        check.failures.append("no retry after a Retry-After answer was seen: the check "
                              "proved nothing (are the fault rates zero?)")
    check.notes = {"retries": retries, "retries_after_retry_after": honoured}
    return check


def no_processes_left(root: Path, *, exclude: Iterable[int] = ()) -> Check:
    """No process runs in (or names) `root`: the daemon, `squadd mcp`, CLI runs and the custom
    tools' process groups are all gone."""
    check = Check("no process left behind")
    skip = set(exclude)
    marker = str(root)
    for proc in psutil.process_iter(["pid", "cmdline", "cwd", "status"]):
        if proc.pid in skip:
            continue
        check.checked += 1
        info = proc.info
        cmdline = " ".join(info.get("cmdline") or [])
        cwd = info.get("cwd") or ""
        if cwd == marker or cwd.startswith(marker + "/") or marker in cmdline:
            check.failures.append(f"PID {proc.pid} ({info.get('status')}) is still there: "
                                  f"{cmdline[:200] or '?'} (cwd {cwd or '?'})")
    for child in psutil.Process().children(recursive=True):
        if child.pid not in skip:
            check.failures.append(f"PID {child.pid} is a child of the test still running: "
                                  f"{' '.join(child.cmdline())[:200]}")
    return check


def run_dir_clean(layout: SquadLayout) -> Check:
    """After a clean stop .squad/run/ has no socket, pid or token file, no pending intent in
    its journal and no temp file: only lock files and the Scribe's index stay, beside what is
    kept on purpose (the transcripts folder, the daemon's log, the inbox's log and the
    spending ledger, which the next daemon reads)."""
    check = Check("no stale file under .squad/run/ after a clean stop")
    daemon_files = {layout.socket, layout.pid_file, layout.token_file}
    run_dir = layout.run_dir
    kept = (layout.transcripts_dir, layout.spend_dir)
    logs = (layout.log_file.name, layout.log_file.with_suffix(".out").name)
    for path in sorted(run_dir.rglob("*")) if run_dir.exists() else []:
        if path.is_dir() or any(folder in path.parents for folder in kept) \
                or path.name.startswith(logs) or path == layout.human_inbox:
            continue
        check.checked += 1
        name = path.relative_to(run_dir)
        if path in daemon_files:
            check.failures.append(f"the daemon's {name} is still in .squad/run/ after it stopped")
        elif path.suffix != ".lock" and path != layout.decisions_index:
            check.failures.append(f"{name} is left in .squad/run/ after the daemon stopped")
    return check


@dataclass(frozen=True)
class RssSample:
    daemon: int
    """Which daemon process (0 = the first, +1 per restart)."""
    pid: int
    warm_bytes: int | None
    end_bytes: int | None


def rss_bounded(samples: Iterable[RssSample], *, limit: float = RSS_GROWTH_LIMIT) -> Check:
    """Each daemon's RSS when it ended is within `limit` times its RSS after warm-up."""
    check = Check(f"daemon RSS at the end within {limit}x of its RSS after warm-up")
    ratios = []
    for sample in samples:
        if sample.warm_bytes is None or sample.end_bytes is None:
            continue
        check.checked += 1
        ratio = sample.end_bytes / sample.warm_bytes
        ratios.append(round(ratio, 3))
        if ratio > limit:
            check.failures.append(
                f"daemon {sample.daemon} (PID {sample.pid}) grew from "
                f"{sample.warm_bytes / 2**20:.1f} MiB after warm-up to "
                f"{sample.end_bytes / 2**20:.1f} MiB ({ratio:.2f}x)")
    if check.checked == 0:
        check.failures.append("no daemon lived long enough to be measured after warm-up")
    check.notes = {"ratios": ratios}
    return check
