"""`squadd inbox`: what waits on a person, and the commands that resolve it.

`squadd inbox` lists open items (`--json` for scripts, `--all` with resolved ones);
`show ID`; `approve ID [--budget +N]`, `deny ID`, `answer ID TEXT`, `resume ID`, `dismiss ID`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from squadd.cli._daemon import client_for
from squadd.cli._output import print_json, print_table
from squadd.cli._report import duration, one_line
from squadd.cli._squad import TEXT, dir_option

_REASON_SHOWN = 70


@click.group("inbox", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the items as JSON.")
@click.option("--all", "include_resolved", is_flag=True, help="Include resolved items.")
@dir_option
@click.pass_context
def inbox(ctx: click.Context, as_json: bool, include_resolved: bool,
          directory: Path | None) -> None:
    """What waits on a person: approvals, questions (squad_ask), sessions parked by a budget,
    failed sessions and landings that need attention. Each item lists the commands that
    resolve it.

    \b
    Examples:
      squadd inbox                       open items, oldest first
      squadd inbox show i3f2a9c01        one item in full
      squadd inbox approve i3f2a9c01     let a waiting tool call run
      squadd inbox approve i5 --budget +5   give a parked route $5 more
      squadd inbox answer i7 "use the staging DB"
    """
    if ctx.invoked_subcommand is not None:
        return
    with client_for(directory) as client:
        items = client.inbox(include_resolved=include_resolved)["items"]
    if as_json:
        print_json(items)
        return
    if not items:
        click.echo("The inbox is empty: nothing waits on you.")
        return
    rows = [[item["id"], item["kind"], duration(item["age_s"]), item.get("agent") or "-",
             item.get("session_id") or "-", _short(item["reason"]),
             ", ".join(item["actions"]) if item["resolved"] is None
             else f"resolved: {(item.get('resolution') or {}).get('action')}"]
            for item in items]
    print_table(["id", "kind", "age", "agent", "session", "reason", "actions"], rows)


def _short(text: str) -> str:
    return one_line(text, _REASON_SHOWN)


@inbox.command("show")
@click.argument("item_id", type=TEXT)
@click.option("--json", "as_json", is_flag=True, help="Print the item as JSON.")
@dir_option
def show(item_id: str, as_json: bool, directory: Path | None) -> None:
    """One item in full: why it waits, its details and the commands that resolve it."""
    with client_for(directory) as client:
        item = client.inbox_item(item_id)["item"]
    if as_json:
        print_json(item)
        return
    _print_item(item)


def _print_item(item: dict[str, Any]) -> None:
    click.echo(f"{item['id']}  {item['kind']}  (waiting {duration(item['age_s'])})")
    click.echo(f"reason:  {item['reason']}")
    for label, key in (("agent", "agent"), ("session", "session_id"), ("route", "route")):
        if item.get(key):
            click.echo(f"{label}:{' ' * (8 - len(label))}{item[key]}")
    if item.get("summary"):
        click.echo(f"budget:  {item['summary']}")
    for key, value in item.get("details", {}).items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        click.echo(f"  {key}: {shown}")
    if item.get("resolved") is not None:
        click.echo(f"resolved: {json.dumps(item.get('resolution'), ensure_ascii=False)}")
    elif item.get("commands"):
        click.echo("resolve with:")
        for command in item["commands"]:
            click.echo(f"  {command}")


def _budget(value: str | None) -> float | None:
    if value is None:
        return None
    text = value.strip().removeprefix("+").removeprefix("$")
    try:
        amount = float(text)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an amount: write it like +5 or 2.50",
                                 param_hint="--budget") from None
    if not amount > 0 or amount == float("inf"):
        raise click.BadParameter(f"{value!r}: the amount must be above 0",
                                 param_hint="--budget")
    return amount


def _resolve(item_id: str, action: str, directory: Path | None, **body: Any) -> None:
    with client_for(directory) as client:
        item = client.inbox_resolve(item_id, action, **body)["item"]
    click.echo(f"{action}: {item['id']} ({item['kind']}"
               f"{', session ' + item['session_id'] if item.get('session_id') else ''})")


@inbox.command("approve")
@click.argument("item_id", type=TEXT)
@click.option("--budget", "budget", type=TEXT, default=None, metavar="+N",
              help="For a session parked by a budget: allow N more (US dollars; tokens for "
                   "per_session_tokens) for the limit it reached, then go on.")
@click.option("--reason", type=TEXT, default="", help="Why (the agent sees it).")
@dir_option
def approve(item_id: str, budget: str | None, reason: str, directory: Path | None) -> None:
    """Approve: a waiting tool call runs; a parked session goes on (with --budget: with more
    budget)."""
    _resolve(item_id, "approve", directory, budget=_budget(budget), reason=reason)


@inbox.command("deny")
@click.argument("item_id", type=TEXT)
@click.option("--reason", type=TEXT, default="", help="Why (the agent sees it).")
@dir_option
def deny(item_id: str, reason: str, directory: Path | None) -> None:
    """Refuse a waiting tool call; the agent is told, with your reason."""
    _resolve(item_id, "deny", directory, reason=reason)


@inbox.command("answer")
@click.argument("item_id", type=TEXT)
@click.argument("text", type=TEXT)
@dir_option
def answer(item_id: str, text: str, directory: Path | None) -> None:
    """Answer an agent's question (squad_ask): the text is the tool's result."""
    _resolve(item_id, "answer", directory, answer=text)


@inbox.command("resume")
@click.argument("item_id", type=TEXT)
@dir_option
def resume(item_id: str, directory: Path | None) -> None:
    """Go on: a parked session re-reads the limits (raise them in the settings first); a
    failed session gets a task to continue."""
    _resolve(item_id, "resume", directory)


@inbox.command("dismiss")
@click.argument("item_id", type=TEXT)
@click.option("--reason", type=TEXT, default="", help="Why.")
@dir_option
def dismiss(item_id: str, reason: str, directory: Path | None) -> None:
    """Clear an item without doing what it asks (a parked session stops there)."""
    _resolve(item_id, "dismiss", directory, reason=reason)
