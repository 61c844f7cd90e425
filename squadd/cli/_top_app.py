"""`squadd top`'s Textual app: the dashboard's picture in the terminal, kept live by the
daemon's event stream. One snapshot (`GET /v1/dashboard`), then each event either patches it
(tool progress) or asks for a fresh one (a session began, changed state, ended...).

Keys: f cycles the agent filter, Escape clears it, Enter opens the selected session's
transcript, a / d approve or deny the selected approval, q quits.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import anyio
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from squadd.cli._report import duration, one_line, tokens
from squadd.daemon.client import AsyncDaemonClient
from squadd.errors import DaemonError

REFRESH_S = 0.2
"""Structural events within this long are folded into one snapshot fetch."""
RECONNECT_S = 1.0
TRANSCRIPT_TAIL = 200
MAX_SHOWN_DEPTH = 16
"""Deepest indent of a nested session in the table (deeper ones are still listed)."""
_REFRESHING = frozenset({
    "route.queued", "agent.spawned", "agent.state", "agent.idle", "agent.completed",
    "agent.error", "tool.started", "tool.completed", "pool.empty", "pool.at_capacity",
    "scribe.merged", "approval.requested", "approval.resolved", "daemon.started", "bus.overflow",
})


def session_order(sessions: list[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(depth, session) in tree order: each session under the one whose route started it.
    Every session is listed once, however deep its chain (the depth shown stops at
    `MAX_SHOWN_DEPTH`) and even when hand-edited parents make a loop."""
    ids = {s["session_id"] for s in sessions}
    children: dict[str, list[dict[str, Any]]] = {}
    for s in sessions:
        parent = s.get("parent_session_id")
        children.setdefault(parent if isinstance(parent, str) and parent in ids else "",
                            []).append(s)
    seen: set[str] = set()
    # The roots first; then whatever only a loop of parents reaches, each as a root.
    for root in [*children.get("", []), *sessions]:
        stack = [(0, root)]
        while stack:
            depth, s = stack.pop()
            if s["session_id"] in seen:
                continue
            seen.add(s["session_id"])
            yield min(depth, MAX_SHOWN_DEPTH), s
            below = children.get(s["session_id"], [])
            stack.extend((depth + 1, child) for child in reversed(below))


def tool_cell(tool: dict[str, Any] | None) -> str:
    if not tool:
        return ""
    fraction = tool.get("fraction")
    shown = f" {round(fraction * 100)}%" if isinstance(fraction, int | float) else ""
    message = f" {one_line(tool.get('message'), 40)}" if tool.get("message") else ""
    return f"{tool['tool']}{shown}{message}"


class TranscriptScreen(Screen[None]):
    """One session's transcript (its latest records); Escape goes back."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, title: str, lines: list[str]):
        super().__init__()
        self.heading = title
        self.lines = lines

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll():
            yield Static(self.heading, id="transcript-title")
            yield Static("\n".join(self.lines) or "(empty)", id="transcript", markup=False)
        yield Footer()


def transcript_lines(records: list[dict[str, Any]]) -> list[str]:
    lines = []
    for record in records:
        message = record.get("message") or {}
        role = message.get("role") or record.get("kind", "?")
        text = message.get("content") or record.get("state") or ""
        calls = ", ".join(c.get("name", "?") for c in message.get("tool_calls") or [])
        lines.append(f"{role:>9}: {one_line(str(text), 200)}" + (f" → {calls}" if calls else ""))
    return lines


class TopApp(App[None]):
    """The live view; `client` talks to the repo's daemon."""

    TITLE = "squadd top"
    CSS = """
    #pool { height: auto; padding: 0 1; }
    #sessions { height: 2fr; }
    #approvals-title { padding: 0 1; text-style: bold; }
    #approvals { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("f", "next_agent", "Filter agent"),
        Binding("escape", "clear_filter", "All agents"),
        Binding("a", "answer(True)", "Approve"),
        Binding("d", "answer(False)", "Deny"),
    ]

    def __init__(self, client: AsyncDaemonClient):
        super().__init__()
        self.client = client
        self.snapshot: dict[str, Any] = {}
        self.agent: str | None = None
        self.status = "connecting…"
        self.session_rows: list[str] = []
        self.approval_rows: list[str] = []
        self._refresh_due = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="pool")
        yield DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
        yield Static("Waiting for you", id="approvals-title")
        yield DataTable(id="approvals", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#sessions", DataTable).add_columns(
            "agent", "state", "age", "model", "turns", "tokens", "tool", "task")
        self.query_one("#approvals", DataTable).add_columns("agent", "tool", "question",
                                                            "arguments", "id")
        self.follow()

    # Keeping up with the daemon.
    @work(exclusive=True, group="follow")
    async def follow(self) -> None:
        while True:
            try:
                async with self.client.subscribe_raw() as events:
                    self.status = "live"
                    await self.reload()  # after subscribing: nothing falls between the two
                    async for event in events:
                        self.take_event(event)
                self.status = "the daemon closed the stream"
            except DaemonError as exc:
                self.status = f"disconnected: {one_line(str(exc), 80)}"
            self.draw()
            await anyio.sleep(RECONNECT_S)

    def take_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type", "")
        if kind == "tool.updated":
            for session in self.snapshot.get("sessions", []):
                tool = session.get("tool")
                if session["session_id"] == event.get("session_id") and tool \
                        and tool.get("call_id") == event.get("call_id"):
                    tool["fraction"], tool["message"] = event.get("fraction"), event.get("message")
                    self.draw()
        if kind in _REFRESHING and not self._refresh_due:
            self._refresh_due = True
            self.set_timer(REFRESH_S, self._refresh)

    async def _refresh(self) -> None:
        self._refresh_due = False
        try:
            await self.reload()
        except DaemonError as exc:
            self.status = f"disconnected: {one_line(str(exc), 80)}"
            self.draw()

    async def reload(self) -> None:
        self.snapshot = await self.client.dashboard()
        self.draw()

    # Drawing.
    def visible_sessions(self) -> list[tuple[int, dict[str, Any]]]:
        rows = list(session_order(self.snapshot.get("sessions", [])))
        return [(d, s) for d, s in rows if self.agent is None or s["agent"] == self.agent]

    def draw(self) -> None:
        pool = self.snapshot.get("pool") or {}
        shown = f" · agent {self.agent}" if self.agent else ""
        capacity = " · AT CAPACITY" if self.snapshot.get("at_capacity") else ""
        self.query_one("#pool", Static).update(
            f"{self.status}{shown} · pool {pool.get('running', 0)}/"
            f"{pool.get('max_concurrent', 0)} running, {pool.get('queued', 0)} queued, "
            f"{pool.get('waiting', 0)} waiting, {pool.get('idle', 0)} at rest{capacity}")
        table = self.query_one("#sessions", DataTable)
        cursor = table.cursor_row
        table.clear()
        self.session_rows = []
        for depth, s in self.visible_sessions():
            spent = int(s.get("input_tokens") or 0) + int(s.get("output_tokens") or 0)
            table.add_row("  " * depth + ("└ " if depth else "") + s["agent"], s["state"],
                          duration(s.get("age_s")), s.get("model") or "-", str(s.get("turns", 0)),
                          tokens(spent), tool_cell(s.get("tool")), one_line(s.get("task"), 60))
            self.session_rows.append(s["session_id"])
        if self.session_rows:
            table.move_cursor(row=min(cursor, len(self.session_rows) - 1))
        approvals = self.query_one("#approvals", DataTable)
        approvals.clear()
        self.approval_rows = []
        for a in self.snapshot.get("approvals", []):
            if self.agent is None or a["agent"] == self.agent:
                # The size says how much there is; 'squadd approvals' shows all of it.
                approvals.add_row(a["agent"], a["tool"], one_line(a.get("question"), 60),
                                  f"{a.get('arguments_bytes', 0)} B (squadd approvals)",
                                  a["approval_id"])
                self.approval_rows.append(a["approval_id"])

    # Keys.
    def action_next_agent(self) -> None:
        agents = sorted({s["agent"] for s in self.snapshot.get("sessions", [])})
        if not agents:
            return
        position = agents.index(self.agent) + 1 if self.agent in agents else 0
        self.agent = agents[position] if position < len(agents) else None
        self.draw()

    def action_clear_filter(self) -> None:
        self.agent = None
        self.draw()

    async def action_answer(self, approved: bool) -> None:
        if not self.approval_rows:
            self.notify("no approval is waiting")
            return
        row = self.query_one("#approvals", DataTable).cursor_row
        approval_id = self.approval_rows[min(max(row, 0), len(self.approval_rows) - 1)]
        try:
            await self.client.resolve_approval(approval_id, approved, "from squadd top")
        except DaemonError as exc:
            self.notify(str(exc), severity="error")
            return
        self.notify(f"{'approved' if approved else 'denied'} {approval_id}")
        await self.reload()

    async def on_data_table_row_selected(self, message: DataTable.RowSelected) -> None:
        if message.data_table.id != "sessions" or not self.session_rows:
            return
        session_id = self.session_rows[min(message.cursor_row, len(self.session_rows) - 1)]
        try:
            shown = await self.client.session(session_id, tail=TRANSCRIPT_TAIL)
        except DaemonError as exc:
            self.notify(str(exc), severity="error")
            return
        view = shown["session"]
        await self.push_screen(TranscriptScreen(
            f"{view['agent']} · {session_id} · {view['state']} · {view.get('task', '')}",
            transcript_lines(shown.get("transcript", []))))
