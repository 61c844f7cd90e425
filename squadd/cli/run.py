"""`squadd run AGENT "TASK"`: one agent session in this process, no daemon needed.

Tool calls are printed to stderr as they happen and the final answer to stdout, so
`squadd run lead "..." > answer.txt` keeps just the answer. Exit code 0 means the session completed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import click

from squadd.cli._output import print_json
from squadd.cli._provider import provider_options, provider_overrides
from squadd.cli._squad import dir_option, find_layout


@click.command("run")
@click.argument("agent")
@click.argument("task")
@click.option("--context", default=None, help="Additional context for the agent's prompt.")
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
    from squadd.config import load_settings
    from squadd.logs import configure_logging

    # Progress is shown from events; log lines would repeat it (and must never reach stdout).
    configure_logging(console_level="info" if verbose else "error")
    layout = find_layout(directory)
    overrides = provider_overrides(provider_kind, base_url, replay_file)
    settings = load_settings(layout.root, overrides={"provider": overrides} if overrides else None)
    outcome = anyio.run(_run_session, layout, settings, agent, task, context, model, as_json)
    if as_json:
        print_json(outcome)
    elif outcome["status"] == "completed":
        click.echo(outcome["answer"])
    else:
        click.echo(f"Error: {agent} {outcome['status']}: {outcome['error']}", err=True)
    if outcome["status"] != "completed":
        sys.exit(1)


async def _run_session(layout: Any, settings: Any, agent: str, task: str, context: str | None,
                       model: str | None, quiet: bool) -> dict[str, Any]:
    from squadd.providers.factory import make_provider
    from squadd.runtime.events import BaseEvent, EventBus, ProviderRetry, ToolCompleted, ToolStarted
    from squadd.runtime.session import (
        AgentSession,
        SessionInfo,
        choose_model,
        new_session_id,
        session_toolset,
    )
    from squadd.tools.base import ToolSet
    from squadd.tools.invoke import ToolInvoker
    from squadd.tools.squad import file_tools

    bus = EventBus()

    def show(event: BaseEvent) -> None:
        if quiet:
            return
        if isinstance(event, ToolStarted):
            args = ", ".join(f"{k}={_short(v)}" for k, v in event.arguments.items())
            click.echo(click.style(f"→ {event.tool}({args})", fg="cyan"), err=True)
        elif isinstance(event, ToolCompleted):
            mark = click.style("✓", fg="green") if event.result_type == "success" else \
                click.style("✗", fg="red")
            click.echo(f"  {mark} {event.tool}: {_short(event.summary, 100)}", err=True)
        elif isinstance(event, ProviderRetry):
            click.echo(click.style(
                f"  … {event.provider} retry {event.attempt} in {event.wait_s:.1f}s: "
                f"{event.reason}", fg="yellow"), err=True)

    bus.add_listener(show)

    def on_retry(info: Any) -> None:
        bus.publish(ProviderRetry(provider=info.provider, attempt=info.attempt,
                                  wait_s=info.wait_s, reason=info.reason, status=info.status))

    charter = AgentSession.load_charter(layout, agent)
    provider = make_provider(settings.provider, on_retry=on_retry, cwd=layout.repo)
    try:
        tools = session_toolset(ToolSet(file_tools(layout, settings)), None, charter)
        info = SessionInfo(session_id=new_session_id(), agent=charter.agent, task=task,
                           model=choose_model(model, charter, settings, charter.agent,
                                              provider.default_model))
        session = AgentSession(info, layout=layout, settings=settings, provider=provider,
                               invoker=ToolInvoker(layout, settings, bus), tools=tools, sink=bus)
        outcome = await session.start(task, context, timeout_s=settings.route.timeout_s)
    finally:
        await provider.aclose()
    return {
        "session_id": outcome.session_id, "agent": outcome.agent, "status": outcome.status,
        "answer": outcome.answer, "error": outcome.error, "turns": outcome.turns,
        "model": outcome.model, "input_tokens": outcome.usage.input_tokens,
        "output_tokens": outcome.usage.output_tokens,
        "duration_s": round(outcome.duration_s, 3),
        "transcript": str(layout.transcript(outcome.session_id).relative_to(layout.repo)),
    }


def _short(value: Any, limit: int = 40) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
