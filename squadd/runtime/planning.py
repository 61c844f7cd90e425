"""Route planning: from a `RouteRequest` to the session that will run it, or a refusal.

Resolves the agent (named, `@name`, routing.md, or the session being continued), loads its
charter, checks depth and cycles, and chooses model and tools. A refusal carries the failure
`RouteResult` that says why; nothing here touches the pool.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from squadd.config import Settings
from squadd.contracts.names import safe_name
from squadd.contracts.routes import FailureReason, RoutedBy, RouteOrigin, RouteRequest, RouteResult
from squadd.contracts.sessions import LIVE_STATES, SessionState, SessionView
from squadd.contracts.workspaces import Isolation
from squadd.errors import InvalidNameError, StateError
from squadd.runtime.router import Router
from squadd.runtime.session_info import SessionInfo, choose_model, intent_of, new_session_id
from squadd.statcache import StatCache
from squadd.state.charters import Charter, no_charter, parse_charter
from squadd.state.layout import SquadLayout, safe_id
from squadd.state.members import folder_for
from squadd.state.owner import is_current, owner_alive
from squadd.state.transcripts import Transcript, TranscriptSink, read_transcript

log = structlog.get_logger("squadd.planning")


class Refusal(Exception):
    """A route that must not run; `result` is the failure to hand back."""

    def __init__(self, reason: FailureReason, message: str, **fields: Any):
        super().__init__(message)
        self.result = RouteResult(ok=False, reason=reason, message=message, error=message,
                                  **fields)


@dataclass
class RoutePlan:
    """What a route will run: a new session, or the next task of an existing one."""

    info: SessionInfo
    charter: Charter
    routed_by: RoutedBy
    task: str | None
    """The task to send; None resumes an interrupted task from the transcript."""
    context: str | None
    continuing: bool
    timeout_s: float
    available_tools: list[str] | None
    sink: TranscriptSink
    """Where every record of the session's transcript goes, from the route's acceptance on
    (`FileSinks.new` for a new session, `.existing` for a continued one)."""
    isolation: Isolation | None = None
    """The route's `isolation` (None: the agent's or the settings')."""
    land: bool = False
    """Land the session's worktree branch when its task ends."""


class CharterCache:
    """Parsed charters. A hit costs one `stat`; a changed or new file is checked (naming rule,
    no symlink out of the squad dir), read and parsed again. Safe to share between the event
    loop and worker threads."""

    def __init__(self, layout: SquadLayout):
        self.layout = layout
        self._parsed: StatCache[Charter] = StatCache(
            lambda path: parse_charter(path.parent.name,
                                       layout.read_text(path, errors="replace")),
            limit=1024)

    def get(self, agent: str) -> Charter | None:
        """The agent's charter, None when it has none (blocking: it may be read and parsed)."""
        return self._charter(agent, lambda: self._parsed.get(self.layout.charter(agent)))

    def known(self, agent: str) -> Charter | None:
        """`get` when the file is cached and unchanged: only stat'ed (the event loop may call
        it); `NotCached` when it must be read and parsed."""
        # A hit was read through the layout's check: a stat is enough.
        return self._charter(agent, lambda: self._parsed.peek(
            self.layout.prompt_file("charter", agent, check=False)))

    def _charter(self, agent: str, look: Callable[[], Charter]) -> Charter | None:
        try:
            charter = look()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except StateError as exc:  # a charter leading outside the repository: not an agent
            log.warning("charter.not_read", agent=agent, reason=str(exc))
            return None
        # A folder linked inside the squad dir reaches the same file under another name.
        return charter if charter.agent == agent else dataclasses.replace(charter, agent=agent)

    def exists(self, agent: str) -> bool:
        return self.get(agent) is not None


def unknown_agent(layout: SquadLayout, agent: str) -> Refusal:
    """The refusal for an agent without a charter; lists the agents there are (blocking)."""
    return Refusal("unknown_agent", f'unknown agent "{agent}": {no_charter(layout, agent)}',
                   agent=agent)


def resolve_agent(request: RouteRequest, router: Router, charters: CharterCache,
                  busy: frozenset[str] = frozenset()) -> tuple[str, RoutedBy]:
    """The agent a new session is for (blocking only on the auto path: call it in a thread).
    `busy`: the agents with a live session, whom a rule's Secondary stands in for."""
    target = (request.target_agent or "").strip()
    if target and target.lower() != "auto":
        try:
            return safe_name(target.lstrip("@")), "explicit"
        except InvalidNameError as exc:
            folder = folder_for(target)  # a display name as team.md writes it: `EECOM 🔧`
            if folder is None:
                raise Refusal("invalid", f"cannot route: {exc}") from None
            return folder, "explicit"
    choice = router.choose(request.task, charters.exists, busy.__contains__)
    if choice is None:
        raise Refusal(
            "no_route",
            "no agent was named and routing.md matched nothing in the task. Name one "
            "(targetAgent, or @name in the task) or add a row to routing.md. "
            f"The routing table:\n{router.describe()}",
        )
    return choice.agent, choice.routed_by


def check_chain(agent: str, origin: RouteOrigin, settings: Settings) -> int:
    """The new session's depth; `Refusal` when the route is too deep or closes a cycle."""
    chain = _lineage(origin)
    if agent in chain:
        path = " -> ".join([*chain, agent])
        raise Refusal("cycle", f"routing to {agent} would make a cycle ({path}): {agent} is "
                               "already working on this chain of tasks; answer it yourself or "
                               "route to someone else", agent=agent)
    depth = origin.depth + 1
    limit = settings.route.max_depth
    if depth > limit:
        path = " -> ".join([*chain, agent])
        raise Refusal("too_deep", f"routing to {agent} would be {depth} routes deep ({path}); "
                                  f"route.max_depth is {limit}. Do this part yourself or hand "
                                  "it back to your caller", agent=agent)
    return depth


def new_plan(request: RouteRequest, origin: RouteOrigin, agent: str, routed_by: RoutedBy,
             charter: Charter, settings: Settings, provider_default: str,
             new_sink: Callable[[str], TranscriptSink]) -> RoutePlan:
    """The plan for a new session; `new_sink` makes its transcript's sink from its id."""
    depth = check_chain(agent, origin, settings)
    model = choose_model(request.model, charter, settings, agent, provider_default)
    info = SessionInfo(
        session_id=new_session_id(), agent=agent, model=model, task=request.task,
        parent_session_id=origin.session_id,
        requested_by=request.requested_by or origin.agent or "user",
        depth=depth, lineage=_lineage(origin), priority=request.priority,
        available_tools=(tuple(request.available_tools)
                         if request.available_tools is not None else None),
        isolation=request.isolation, land=request.land,
    )
    return RoutePlan(info=info, charter=charter, routed_by=routed_by, task=request.task,
                     context=request.context, continuing=False,
                     timeout_s=request.timeout_s or settings.route.timeout_s,
                     available_tools=request.available_tools, sink=new_sink(info.session_id),
                     isolation=info.isolation, land=info.land)


def _lineage(origin: RouteOrigin) -> tuple[str, ...]:
    """The agents working on this chain of tasks, the caller last."""
    lineage = origin.lineage
    if origin.session_id is not None and origin.agent and (not lineage
                                                          or lineage[-1] != origin.agent):
        lineage = (*lineage, origin.agent)
    return lineage


def continue_plan(request: RouteRequest | None, origin: RouteOrigin, base: SessionInfo,
                  state: str | None, charter: Charter, settings: Settings,
                  sink: TranscriptSink) -> RoutePlan:
    """The plan for the next task of an existing session (None request: resume its last),
    whose records go to `sink`."""
    if state in LIVE_STATES:
        raise Refusal("busy", f"session {base.session_id} ({base.agent}) is {state}: wait for "
                              "its task to end (squad_status with sessionId) before sending "
                              "another", session_id=base.session_id, agent=base.agent)
    if request is not None and request.target_agent and request.target_agent.lower() not in (
            "auto", base.agent):
        raise Refusal("invalid", f"session {base.session_id} belongs to {base.agent}, not "
                                 f"{request.target_agent}", session_id=base.session_id)
    depth = check_chain(base.agent, origin, settings)
    info = dataclasses.replace(
        base, task=request.task if request is not None else base.task,
        model=(request.model if request is not None and request.model else base.model),
        depth=depth, lineage=_lineage(origin),
        parent_session_id=origin.session_id or base.parent_session_id,
        priority=request.priority if request is not None else base.priority,
        requested_by=((request.requested_by if request is not None else None)
                      or origin.agent or base.requested_by),
        # A resume works and lands as the route of the task it resumes asked.
        isolation=request.isolation if request is not None else base.isolation,
        land=request.land if request is not None else base.land,
    )
    return RoutePlan(
        info=info, charter=charter, routed_by="session",
        task=request.task if request is not None else None,
        context=None, continuing=True,
        timeout_s=(request.timeout_s if request is not None and request.timeout_s
                   else settings.route.timeout_s),
        available_tools=request.available_tools if request is not None else None, sink=sink,
        isolation=info.isolation, land=info.land,
    )


def load_transcript(layout: SquadLayout, session_id: str) -> Transcript | None:
    """The transcript of `session_id`, or None when there is none (blocking)."""
    try:
        path = layout.transcript(safe_id(session_id))
    except InvalidNameError:
        return None
    try:
        return read_transcript(path)
    except FileNotFoundError:
        return None


TERMINAL_STATES = frozenset({"completed", "error", "interrupted", "cancelled"})
"""Last states of a transcript whose session has no task in hand."""


def running_elsewhere(transcript: Transcript) -> int | None:
    """The pid of the other, still running process whose task the transcript records (a
    `squadd run` beside the daemon), or None."""
    if transcript.last_state in TERMINAL_STATES:
        return None
    owner = transcript.meta.get("owner")
    if owner_alive(owner) and not is_current(owner):
        assert isinstance(owner, dict)
        return int(owner["pid"])
    return None


def refuse_if_elsewhere(transcript: Transcript) -> None:
    """`Refusal` (busy) for a session another process is running: one writer per transcript."""
    pid = running_elsewhere(transcript)
    if pid is not None:
        raise Refusal("busy", f"session {transcript.session_id} is running in another squadd "
                              f"process (pid {pid}); wait for it to end",
                      session_id=transcript.session_id)


def info_from_transcript(transcript: Transcript) -> SessionInfo:
    meta = transcript.meta
    isolation, land = intent_of(meta)
    return SessionInfo(
        session_id=transcript.session_id, agent=str(meta.get("agent", "")),
        model=str(meta.get("model") or ""), task=str(meta.get("task") or ""),
        parent_session_id=meta.get("parent_session_id"),
        requested_by=meta.get("requested_by"), depth=int(meta.get("depth") or 0),
        lineage=tuple(meta.get("lineage") or ()),
        priority=str(meta.get("priority") or "normal"),
        available_tools=_names(meta.get("available_tools")),
        isolation=isolation, land=land,
    )


def _names(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(str(item) for item in value)


def view_from_transcript(transcript: Transcript) -> SessionView:
    """An ended session's view, rebuilt from its transcript (it is no longer in the pool)."""
    info = info_from_transcript(transcript)
    last = transcript.states[-1] if transcript.states else {}
    last_state = last.get("state")
    error = None
    live: SessionState | None = None
    if running_elsewhere(transcript) is not None:
        live = last_state if last_state in ("queued", "active", "waiting") else "active"
    elif last_state in ("error", "interrupted", "cancelled"):
        error = f"{last_state}: {last.get('error') or last.get('reason') or 'no reason recorded'}"
    elif last_state not in ("completed", None):
        error = f"interrupted: the session stopped while {last_state} (squadd stopped?)"
    tokens_in = sum(int(r.get("input_tokens") or 0) for r in transcript.records
                    if r.get("kind") == "message")
    tokens_out = sum(int(r.get("output_tokens") or 0) for r in transcript.records
                     if r.get("kind") == "message")
    claims = [r for r in transcript.states if r.get("worker")]
    return SessionView(
        session_id=info.session_id, agent=info.agent or "?", state=live or "destroyed",
        worker=str(claims[-1]["worker"]) if claims else None,
        worker_host=str(claims[-1].get("host") or "") or None if claims else None,
        task=info.task[:500], model=info.model,
        priority="urgent" if info.priority == "urgent" else "normal",
        parent_session_id=info.parent_session_id, requested_by=info.requested_by,
        depth=info.depth, input_tokens=tokens_in, output_tokens=tokens_out,
        answer=transcript.final_answer if last_state == "completed" else None, error=error,
    )
