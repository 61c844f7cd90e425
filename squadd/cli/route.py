"""`squadd route [AGENT] "TASK"`: hand a task to the daemon and follow it to its answer.

Progress goes to stderr (one line per tool start and end, routes to other agents, retries, and
a spinner on a terminal while the model thinks); the final answer goes to stdout, so
`squadd route lead "..." > answer.txt` keeps just the answer. Exit 0 only when it completed
and, when it landed its worktree, the landing landed (`squadd.cli._landing`: 3 refused, 4
pending).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from squadd.cli._landing import exit_code, lines
from squadd.cli._output import print_json
from squadd.cli._report import one_line
from squadd.cli._squad import TEXT, FiniteFloatRange, dir_option, find_layout
from squadd.daemon.wire import ROUTE_WAIT_LIMIT_S, route_wire
from squadd.errors import DaemonError, DaemonRequestError

if TYPE_CHECKING:
    from squadd.daemon.client import AsyncDaemonClient

MAX_TIMEOUT_S = ROUTE_WAIT_LIMIT_S
"""`--timeout`'s bound: `contracts.routes.MAX_ROUTE_TIMEOUT_S` (a test holds them equal), named
here without importing pydantic, so that `squadd route --help` starts fast."""
PROGRESS_TYPES = ("agent.spawned", "agent.state", "tool.started", "tool.completed",
                  "provider.retry", "approval.requested", "variable.requested",
                  "bus.overflow")
_SPIN = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class Progress:
    """Prints progress lines to stderr, with a spinner on a terminal between them."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.tty = sys.stderr.isatty() and not quiet
        self.status = "waiting for a slot"
        self.started = time.monotonic()
        self._spinning = False

    def line(self, text: str) -> None:
        if self.quiet:
            return
        self._clear()
        click.echo(text, err=True)

    def _clear(self) -> None:
        if self._spinning:
            click.echo("\r\033[K", nl=False, err=True)
            self._spinning = False

    async def spin(self) -> None:
        import anyio

        if not self.tty:
            return
        frame = 0
        try:
            while True:
                elapsed = int(time.monotonic() - self.started)
                click.echo(f"\r\033[K{_SPIN[frame % len(_SPIN)]} {self.status} ({elapsed}s)",
                           nl=False, err=True)
                self._spinning = True
                frame += 1
                await anyio.sleep(0.1)
        finally:
            self._clear()

    def show(self, event: dict[str, Any], root: str) -> None:
        kind, agent = event.get("type"), event.get("agent") or "?"
        if kind == "tool.started":
            args = ", ".join(f"{k}={one_line(str(v), 40)}"
                             for k, v in (event.get("arguments") or {}).items())
            self.line(click.style(f"→ {agent}: {event.get('tool')}({args})", fg="cyan"))
            self.status = f"{agent} is running {event.get('tool')}"
        elif kind == "tool.completed":
            ok = event.get("result_type") == "success"
            mark = click.style("✓", fg="green") if ok else click.style("✗", fg="red")
            self.line(f"  {mark} {event.get('tool')}: {one_line(event.get('summary'), 100)}")
            self.status = f"{agent} is thinking"
        elif kind == "agent.spawned" and event.get("session_id") != root:
            self.line(click.style(f"↳ {agent} is on it ({event.get('session_id')}): "
                                  f"{one_line(event.get('task'), 80)}", fg="blue"))
        elif kind == "agent.state" and event.get("state") == "active":
            self.status = f"{agent} is thinking"
        elif kind == "provider.retry":
            self.line(click.style(f"  … {event.get('provider')} retry {event.get('attempt')} in "
                                  f"{event.get('wait_s')}s: {one_line(event.get('reason'), 100)}",
                                  fg="yellow"))
        elif kind == "approval.requested":
            approval = event.get("approval_id")
            self.line(click.style(f"? {agent} asks to run {event.get('tool')}: "
                                  f"'squadd approve {approval}' or 'squadd deny {approval}'",
                                  fg="magenta", bold=True))
        elif kind == "variable.requested":
            name = event.get("name")
            self.line(click.style(f"? {event.get('tool')} needs {name}: "
                                  f"'squadd var set {name}' (it waits "
                                  f"{event.get('timeout_s')}s)", fg="magenta", bold=True))


async def follow(client: AsyncDaemonClient, start: Callable[[], Awaitable[dict[str, Any]]],
                 progress: Progress, holder: dict[str, str], *, task: str | None = None,
                 agent: str | None = None) -> dict[str, Any]:
    """Subscribe, then `start` the route and wait on that request: the daemon answers when the
    session has ended, with its view (`view=session`). Meanwhile the event stream shows its
    progress and that of the routes it makes; the session is known from the stream by its
    `agent.spawned` (its own task, from outside), or from the start (`holder`, a resume).
    Returns the session's outcome, or the failed start's result.

    The subscription comes from the daemon's reserve for followed routes; should even that be
    taken, the route still runs and its answer still comes (no progress lines).
    """
    import anyio

    async with contextlib.AsyncExitStack() as stack:
        stream: AsyncIterator[dict[str, Any]] | None
        try:
            stream = await stack.enter_async_context(
                client.subscribe_raw(types=PROGRESS_TYPES, reserve=True))
        except DaemonRequestError as exc:
            if exc.status != 503:
                raise
            progress.line(click.style(f"(no progress lines: {exc})", fg="yellow"))
            stream = None
        watched = {holder["session"]} if "session" in holder else set()
        answered: dict[str, Any] = {}

        def is_root(event: dict[str, Any]) -> bool:
            return (not watched and task is not None and event.get("type") == "agent.spawned"
                    and event.get("parent_session_id") is None
                    and event.get("task") == task[:500]
                    and agent in (None, event.get("agent")))

        async def watch_events() -> None:
            if stream is None:
                return
            try:
                async for event in stream:
                    session = event.get("session_id")
                    if is_root(event):
                        holder["session"] = str(session)
                        watched.add(str(session))
                    elif event.get("type") == "agent.spawned" and \
                            event.get("parent_session_id") in watched:
                        watched.add(str(session))
                    if session in watched:
                        progress.show(event, holder["session"])
            except DaemonError as exc:  # progress only: the answer still comes from the request
                progress.line(click.style(f"(no more progress lines: {exc})", fg="yellow"))

        failed: list[Exception] = []
        async with anyio.create_task_group() as group:
            async def request() -> None:
                try:
                    answered.update(await start())
                except Exception as exc:  # raised below as itself, not inside an ExceptionGroup
                    failed.append(exc)
                finally:
                    group.cancel_scope.cancel()

            group.start_soon(watch_events)
            group.start_soon(progress.spin)
            group.start_soon(request)
        if failed:
            raise failed[0]
    view = answered.get("session")
    if not answered.get("session_id") or not isinstance(view, dict):
        return answered
    holder["session"] = str(answered["session_id"])
    landing = (view.get("workspace") or {}).get("outcome")
    return {"ok": view.get("state") == "idle" and view.get("error") is None, **view,
            "landing": landing}


def finish(outcome: dict[str, Any], as_json: bool) -> None:
    """Print the answer (or the failure) and the landing; exit 1 unless the task completed,
    3 or 4 when its landing was refused or did not finish (`squadd.cli._landing`)."""
    landing = outcome.get("landing")
    if as_json:
        print_json(outcome)
    elif outcome.get("ok"):
        click.echo(outcome.get("answer") or "")
        if landing:
            refused = exit_code(landing) != 0
            for line in lines(landing):
                click.echo(click.style(line, fg="red" if refused else None), err=True)
    else:
        agent = outcome.get("agent") or "the route"
        reason = outcome.get("error") or outcome.get("message") or outcome.get("state")
        click.echo(f"Error: {agent} did not complete: {reason}", err=True)
    if not outcome.get("ok"):
        sys.exit(1)
    code = exit_code(landing)
    if code:
        sys.exit(code)


def run_following(directory: Path | None, start: Callable[[AsyncDaemonClient],
                  Awaitable[dict[str, Any]]], quiet: bool, *, session: str | None = None,
                  task: str | None = None, agent: str | None = None) -> dict[str, Any]:
    """Follow a route (its `task` and `agent`, as sent) or a known `session` in an event
    loop; on Ctrl-C cancel it and exit 130."""
    import anyio

    from squadd.daemon.client import AsyncDaemonClient, DaemonClient

    layout = find_layout(directory)
    holder: dict[str, str] = {"session": session} if session else {}

    async def main() -> dict[str, Any]:
        async with AsyncDaemonClient(layout) as client:
            return await follow(client, lambda: start(client), Progress(quiet), holder,
                                task=task, agent=agent)

    try:
        return anyio.run(main)
    except KeyboardInterrupt:
        session = holder.get("session")
        if session:
            with DaemonClient(layout) as client:
                try:
                    client.cancel(session)
                    click.echo(f"\ncancelled session {session}", err=True)
                except DaemonError as exc:
                    click.echo(f"\ncould not cancel session {session}: {exc}", err=True)
        sys.exit(130)


@click.command("route")
@click.argument("words", type=TEXT, nargs=-1, required=True)
@click.option("--context", type=TEXT, default=None,
              help="Additional context for the agent's prompt.")
@click.option("--priority", type=click.Choice(["normal", "urgent"]), default="normal",
              show_default=True, help="Urgent routes are admitted before normal ones.")
@click.option("--model", type=TEXT, default=None,
              help="Model for this session (overrides the charter).")
@click.option("--session", "session_id", type=TEXT, default=None,
              help="Continue this session (from an earlier route) instead of a new one.")
@click.option("--timeout", "timeout_s", type=FiniteFloatRange(min=1, max=MAX_TIMEOUT_S),
              default=None, help="Seconds the task may run (default: route.timeout_s).")
@click.option("--isolation", type=click.Choice(["shared", "worktree"]), default=None,
              help="worktree: the agent works in its own git worktree and branch "
                   "(default: workspace.isolation).")
@click.option("--land", is_flag=True,
              help="With a worktree: land the session's commits when it ends.")
@click.option("--no-wait", is_flag=True, help="Print the session id and return at once.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines, just the answer.")
@dir_option
def route(words: tuple[str, ...], context: str | None, priority: str, model: str | None,
          session_id: str | None, timeout_s: float | None, isolation: str | None, land: bool,
          no_wait: bool, as_json: bool, quiet: bool, directory: Path | None) -> None:
    """Route TASK to AGENT (or, with no agent, to whoever routing.md picks) and print the answer.

    With a worktree that lands (--land, or workspace.land = "auto"), the landing's state,
    detail and next step follow the answer (on stderr), and --json carries them as `landing`
    ({state, commit, fixed, broke, detail, next}); `ok` says whether the task completed.

    \b
    Examples:
      squadd route lead "Plan the parser rewrite"
      squadd route "Fix the flaky test in @backend's suite"
      squadd route backend "Add tests" --priority urgent --no-wait
      squadd route backend "Fix the parser" --isolation worktree --land

    \b
    Exit status:
      0  completed (and landed, or nothing to land)
      1  did not complete (or did not start)
      3  completed, but the landing was refused: check_failed or conflict
      4  completed, but the landing did not finish: pending (see `next`)
      130  interrupted with Ctrl-C (the session is cancelled)
    A --no-wait route learns its landing from the workspace.landed and
    workspace.land_failed events (squadd events --follow --session ID).
    """
    if len(words) > 2:
        raise click.UsageError("expected [AGENT] \"TASK\": quote the task")
    agent, task = (words[0], words[1]) if len(words) == 2 else (None, words[0])
    options: dict[str, Any] = dict(context=context, priority=priority, model=model,
                                   session_id=session_id, timeout_s=timeout_s,
                                   isolation=isolation, land=land)
    if no_wait:
        from squadd.daemon.client import DaemonClient

        with DaemonClient(find_layout(directory)) as client:
            result = client.route(task, agent, wait=False, **options)
        if as_json:
            print_json(result)
        elif result.get("ok"):
            click.echo(result.get("session_id"))
            click.echo(f"follow it with 'squadd events --follow --session "
                       f"{result.get('session_id')}'", err=True)
        else:
            click.echo(f"Error: {result.get('message')}", err=True)
        if not result.get("ok"):
            sys.exit(1)
        return

    async def start(client: AsyncDaemonClient) -> dict[str, Any]:
        return await client.route_args(route_wire(
            task, agent, context, priority, True, model, session_id, None, timeout_s,
            isolation, land), view=True)

    finish(run_following(directory, start, quiet or as_json, session=session_id, task=task,
                         agent=agent), as_json)
