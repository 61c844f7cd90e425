"""`squadd run AGENT "TASK"`: one agent session in this process, no daemon needed.

Tool calls are printed to stderr as they happen and the final answer to stdout, so
`squadd run lead "..." > answer.txt` keeps just the answer. Exit code 0 means the session completed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from squadd.cli._output import print_json
from squadd.cli._provider import provider_options, provider_overrides
from squadd.cli._squad import TEXT, dir_option, find_layout


@click.command("run")
@click.argument("agent", type=TEXT)
@click.argument("task", type=TEXT)
@click.option("--context", type=TEXT, default=None,
              help="Additional context for the agent's prompt.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="Also show squadd's own log lines.")
@provider_options
@dir_option
def run(agent: str, task: str, context: str | None, as_json: bool, verbose: bool,
        provider_kind: str | None,
        model: str | None, base_url: str | None, replay_file: Path | None,
        directory: Path | None) -> None:
    """Run one session of AGENT on TASK here, without a daemon.

    \b
    Examples:
      squadd run lead "Plan the parser rewrite"
      squadd run backend "Add tests" --provider openai --base-url http://127.0.0.1:11434/v1 \\
          --model llama3.1
      squadd run lead "Try it" --provider replay --replay-file recording.yaml
    """
    import anyio

    from squadd.config import load_settings
    from squadd.logs import configure_logging
    from squadd.tools.secrets import SecretRegistry

    # Progress is shown from events; log lines would repeat it (and must never reach stdout).
    known_secrets = SecretRegistry()  # the session's runtime remembers its secrets here
    configure_logging(redact=known_secrets.redact_log_event,
                      console_level="info" if verbose else "error")
    layout = find_layout(directory)
    overrides = provider_overrides(provider_kind, base_url, replay_file)
    settings = load_settings(layout.root, overrides={"provider": overrides} if overrides else None)
    from squadd import telemetry
    from squadd.runtime.tracing import start_tracing

    start_tracing(settings.telemetry, redact=known_secrets.redact)
    try:
        outcome = anyio.run(_run_session, layout, settings, known_secrets, agent, task, context,
                            model, as_json)
    finally:
        telemetry.shutdown()
    if as_json:
        print_json(outcome)
    elif outcome["status"] == "completed":
        click.echo(outcome["answer"])
    elif outcome["session_id"] is None:  # refused before any session ran
        click.echo(f"Error: {outcome['error']}", err=True)
    else:
        click.echo(f"Error: {agent} {outcome['status']}: {outcome['error']}", err=True)
    if outcome["status"] != "completed":
        sys.exit(1)


async def _run_session(layout: Any, settings: Any, known_secrets: Any, agent: str, task: str,
                       context: str | None, model: str | None, quiet: bool) -> dict[str, Any]:
    from pydantic import ValidationError

    from squadd.contracts.events import (
        ApprovalRequested,
        BaseEvent,
        ProviderRetry,
        ToolCompleted,
        ToolStarted,
        VariableRequested,
    )
    from squadd.contracts.routes import RouteRequest, RouteResult
    from squadd.runtime.runtime import SquadRuntime

    # One session and out: no spare worktree (it would be made only to be thrown away, and
    # a daemon's spares are its own to hand out).
    settings = settings.model_copy(update={
        "workspace": settings.workspace.model_copy(update={"spares": 0})})
    runtime = SquadRuntime.from_settings(layout, settings, secrets=known_secrets)

    def show(event: BaseEvent) -> None:
        if quiet:
            return
        who = f"[{event.agent}] " if event.agent and event.agent != agent else ""
        if isinstance(event, ToolStarted):
            args = ", ".join(f"{k}={_short(v)}" for k, v in event.arguments.items())
            click.echo(click.style(f"→ {who}{event.tool}({args})", fg="cyan"), err=True)
        elif isinstance(event, ToolCompleted):
            mark = click.style("✓", fg="green") if event.result_type == "success" else \
                click.style("✗", fg="red")
            click.echo(f"  {mark} {who}{event.tool}: {_short(event.summary, 100)}", err=True)
        elif isinstance(event, ProviderRetry):
            click.echo(click.style(
                f"  … {event.provider} retry {event.attempt} in {event.wait_s:.1f}s: "
                f"{event.reason}", fg="yellow"), err=True)
        elif isinstance(event, ApprovalRequested):
            click.echo(click.style(
                f"  ? {event.tool} needs approval, which 'squadd run' cannot give: it will be "
                f"denied after {event.timeout_s:g}s (run it under 'squadd serve' and use "
                "'squadd approve')", fg="yellow"), err=True)
        elif isinstance(event, VariableRequested):
            click.echo(click.style(
                f"  ? {event.tool} needs {event.name}, which 'squadd run' cannot be given while "
                f"it runs: the call fails after {event.timeout_s:g}s (set it first with "
                f"'squadd var set {event.name}' or export it)", fg="yellow"), err=True)

    runtime.bus.add_listener(show)
    try:
        request = RouteRequest(task=task, target_agent=agent, context=context, model=model,
                               wait_for_result=True, requested_by="cli")
    except ValidationError as exc:  # refused as the runtime refuses a bad route: no session
        message = "invalid route: " + "; ".join(
            f"{_ARGUMENT.get(str(error['loc'][0]), error['loc'][0])}: {error['msg']}"
            for error in exc.errors())
        result = RouteResult(ok=False, reason="invalid", message=message, error=message)
    else:
        async with runtime:
            result = await runtime.route(request)
    transcript = None
    if result.session_id:
        transcript = str(layout.transcript(result.session_id).relative_to(layout.repo))
    return {
        "session_id": result.session_id, "agent": result.agent,
        "status": "completed" if result.ok else (result.state or "error"),
        "answer": result.answer or "", "error": result.error or (None if result.ok
                                                                 else result.message),
        "reason": result.reason, "turns": result.turns, "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens, "duration_s": round(result.duration_s, 3),
        "transcript": transcript,
    }


_ARGUMENT = {"target_agent": "AGENT", "task": "TASK", "context": "--context", "model": "--model"}
"""The command's own name for each field of the route it builds."""


def _short(value: Any, limit: int = 40) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
