"""`squadd demo`: a squad of three agents plans a feature, end to end, on a recorded model.

It sets up a throwaway git repo (or uses this one with `--here`), starts a real daemon on the
`replay` provider with the recording shipped in `squadd/demo/`, routes one task to the lead,
narrates the events, and shows decisions.md and every file written. No model is called.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import click

from squadd.cli._daemon import client_for, print_sessions
from squadd.cli._squad import FiniteFloatRange
from squadd.cli.app import load_command
from squadd.state.layout import SquadLayout

LEAD = "lead"
TEAM: tuple[tuple[str, str], ...] = (
    (LEAD, "Lead"), ("backend", "Backend Developer"), ("tester", "Tester"))
TASK = ("Add rate limiting to the public API. Split the work between the team, record what we "
        "decide, and give me the plan.")
RECORDING = "recording.yaml"

HONEST = ("The model is a RECORDING: no model is called, no API key is needed, and nothing "
          "leaves this machine.\nEverything else is real: the daemon and its socket, the "
          "sessions, the tool calls, the files they write, and the Scribe.")


@dataclass(frozen=True)
class FileState:
    size: int
    mtime_ns: int


def snapshot(root: Path) -> dict[str, FileState]:
    """Every file under `root`, by path relative to it."""
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            with contextlib.suppress(FileNotFoundError):
                stat = path.stat()
                files[str(path.relative_to(root))] = FileState(stat.st_size, stat.st_mtime_ns)
    return files


def changes(before: dict[str, FileState], after: dict[str, FileState]
            ) -> list[tuple[str, str]]:
    """(mark, path) for each file created (+), changed (~) or removed (-), sorted by path."""
    marked = [("+" if path not in before else "~", path)
              for path, state in after.items() if before.get(path) != state]
    marked += [("-", path) for path in before if path not in after]
    return sorted(marked, key=lambda item: item[1])


def written_lines(layout: SquadLayout, before: dict[str, FileState],
                  merged: list[str]) -> list[str]:
    """The files the run wrote, for people: the run/ folder's locks on one line, and the
    inbox files the Scribe merged and removed."""
    from squadd.state.transcripts import PROMPTS_DIRNAME, SPARES_DIRNAME

    lines, run_files, spares, prompts = [], 0, 0, 0
    inbox = layout.inbox_dir.relative_to(layout.root)
    for mark, path in changes(before, snapshot(layout.root)):
        parts = Path(path).parts
        transcripts = layout.transcripts_dir.relative_to(layout.root).parts
        if parts[:len(transcripts) + 1] == (*transcripts, SPARES_DIRNAME):
            spares += 1
            continue
        if parts[:len(transcripts) + 1] == (*transcripts, PROMPTS_DIRNAME):
            prompts += 1
            continue
        if parts[0] == layout.run_dir.name and parts[:len(transcripts)] != transcripts:
            run_files += 1
            continue
        lines.append(f"  {mark} {path}")
    lines += [f"  ± {inbox / name}   (written, then merged and removed by the Scribe)"
              for name in merged]
    if spares:
        folder = layout.transcripts_dir.relative_to(layout.root)
        lines.append(f"  + {folder}/{SPARES_DIRNAME}/: empty files made ahead for new "
                     "transcripts and orchestration-log entries (ignored by git)")
    if prompts:
        folder = layout.transcripts_dir.relative_to(layout.root)
        lines.append(f"  + {folder}/{PROMPTS_DIRNAME}/: {prompts} system prompts, each kept once "
                     "for the transcripts that name it (ignored by git)")
    if run_files:
        lines.append(f"  + {layout.run_dir.name}/: {run_files} lock and index files "
                     "(ignored by git)")
    return lines


def heading(text: str) -> None:
    click.echo("\n" + click.style(f"== {text}", bold=True))


def run_command(*args: str) -> None:
    """Run `squadd ARGS` in this process, shown as a person would type it."""
    shown = " ".join(f'"{a}"' if " " in a else a for a in args)
    click.echo(click.style(f"$ squadd {shown}", bold=True))
    load_command(args[0]).main(list(args[1:]), prog_name=f"squadd {args[0]}",
                               standalone_mode=False)


def git_init(repo: Path) -> None:
    from squadd import gitsafe

    click.echo(click.style("$ git init", bold=True))
    if shutil.which("git") is None:
        click.echo("(git is not installed: the demo goes on without a git repository)")
        return
    subprocess.run(gitsafe.hardened_argv(["git", "init", "--quiet", str(repo)]), check=True,
                   timeout=30, stdin=subprocess.DEVNULL, env=gitsafe.hardened_env(os.environ))
    click.echo(f"Initialized an empty git repository in {repo}")


def demo_file(*parts: str) -> Traversable:
    return resources.files("squadd").joinpath("demo", *parts)


def set_up(repo: Path, *, here: bool) -> SquadLayout:
    from squadd.fsio import TEAM_FILE, atomic_write

    heading("Setting up the squad")
    if not here:
        git_init(repo)
    run_command("init")
    layout = SquadLayout.find(repo)
    for name, role in TEAM:
        if layout.charter(name).exists():
            click.echo(f"(agent {name} exists already: kept as it is)")
            continue
        run_command("agent", "add", name, "--role", role)
        charter = demo_file("charters", f"{name}.md").read_text(encoding="utf-8")
        atomic_write(layout.charter(name), charter, new_mode=TEAM_FILE)
        click.echo(f"(the demo wrote {name}'s charter: what it owns, how it works)")
    run_command("agent", "list")
    return layout


@contextlib.contextmanager
def working_dir(path: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


@click.command("demo")
@click.option("--here", is_flag=True,
              help="Use the repository in the working directory instead of a temporary one "
                   "(the recorded decisions are written into its .squad/).")
@click.option("--keep", is_flag=True, help="Keep the temporary repository, and say where.")
@click.option("--pace", type=FiniteFloatRange(0, 5), default=0.06, show_default=True,
              help="Seconds between narrated events, so the run can be followed.")
@click.option("--ui", is_flag=True,
              help="Serve the live dashboard too, print its URL, and (on a terminal) keep the "
                   "daemon up until Enter, so the page can be looked at.")
def demo(here: bool, keep: bool, pace: float, ui: bool) -> None:
    """Watch a squad of three agents plan a feature, on a recorded model (no API key needed).

    It creates a temporary git repository with a squad (lead, backend, tester), starts a daemon
    on the replay provider, and asks the lead to plan rate limiting for an API. The lead routes
    work to backend and tester, who record decisions and learnings and report back; the Scribe
    merges the decisions into decisions.md. The daemon is always stopped at the end.

    \b
    Examples:
      squadd demo
      squadd demo --keep          # look at the files afterwards
      squadd demo --here          # in this repository's .squad/
      squadd demo --ui --pace 1   # watch it in the browser as it runs
    """
    click.echo(click.style("squadd demo", bold=True) + ": a squad of three agents plans a "
               "feature.\n" + HONEST)
    repo = Path.cwd() if here else Path(tempfile.mkdtemp(prefix="squadd-demo-"))
    try:
        with working_dir(repo):
            layout = set_up(repo, here=here)
            _run(layout, pace, ui)
    finally:
        if not here and not keep:
            shutil.rmtree(repo, ignore_errors=True)
    if keep and not here:
        click.echo(f"\nThe demo repository is kept at {repo}")


def _run(layout: SquadLayout, pace: float, ui: bool) -> None:
    import anyio

    from squadd.cli._demo_run import DemoDaemon, play
    from squadd.daemon.startup import console_log
    from squadd.fsio import read_text

    with resources.as_file(demo_file(RECORDING)) as recording:
        before = snapshot(layout.root)
        heading("Starting the daemon on the recording")
        with DemoDaemon(layout, recording, console_log(layout), ui=ui) as daemon:
            click.echo(f"$ squadd serve --provider replay --replay-file {RECORDING}"
                       f"{' --ui' if ui else ''}   "
                       f"(PID {daemon.pid}, socket {layout.socket.relative_to(layout.repo)})")
            if ui:
                with client_for(layout.repo) as client:
                    click.echo(f"$ squadd ui\n{client.ui()['link']}")
            heading(f"Asking {LEAD}: {TASK}")
            agents = [name for name, _ in TEAM]
            outcome = anyio.run(functools.partial(play, layout, agents, TASK, lead=LEAD,
                                                     pace=pace))
            if ui and sys.stdin.isatty():
                click.prompt("\nThe dashboard stays up: press Enter to stop the daemon",
                             default="", show_default=False)
        click.echo(f"\nStopped the daemon (PID {daemon.pid}).")
    heading(f"{LEAD}'s answer")
    result = outcome.result
    if result.get("ok"):
        click.echo(result.get("answer") or result.get("message", ""))
    else:
        click.echo(click.style(f"the route failed: {result.get('message')}", fg="red"))
    heading("$ squadd status")
    print_sessions(outcome.status)
    heading("The Scribe")
    if not outcome.scribe_caught_up:
        click.echo("The Scribe worker had not merged everything yet; one pass now:")
        run_command("scribe")
    else:
        click.echo(f"The daemon's Scribe merged {outcome.decisions_merged} inbox decision(s) "
                   f"of {outcome.decisions_written} written into decisions.md.")
    heading(f"{layout.decisions_md.relative_to(layout.repo)}")
    click.echo(read_text(layout.decisions_md).rstrip())
    heading(f"Files written under {layout.root.name}/ "
            "(+ new, ~ changed, - removed, ± came and went)")
    for line in written_lines(layout, before, outcome.merged_files):
        click.echo(line)
    click.echo("\n" + click.style("That was a recording: no model was called.", bold=True)
               + " The daemon, the sessions, the tool calls and the files were real.\n"
               "To use a real model, start the daemon with a provider, e.g. "
               "'squadd serve --provider openai --base-url http://127.0.0.1:11434/v1 --model "
               "llama3.1' for Ollama (README: \"Use a real model\").")
    if not result.get("ok"):
        raise click.ClickException("the demo's route failed (see above)")
