"""`squadd scribe`: one Scribe pass (merge the inbox, archive, compact histories), or `--watch`
to run the Scribe worker in the foreground until Ctrl-C.
"""

from __future__ import annotations

import functools
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import click

from squadd.cli._output import print_json
from squadd.cli._squad import dir_option, find_layout
from squadd.errors import SquaddError
from squadd.state.layout import SquadLayout

if TYPE_CHECKING:
    from squadd.config import Settings
    from squadd.contracts.events import BaseEvent
    from squadd.scribe import ScribeReport

SHOWN_FILES = 20
"""File names listed per kind in the human output (the counts are always complete)."""


@click.command("scribe")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--dry-run", is_flag=True, help="Show what a pass would do; change nothing.")
@click.option("--watch", is_flag=True,
              help="Run the Scribe worker in the foreground: merge on every inbox change.")
@dir_option
def scribe(as_json: bool, dry_run: bool, watch: bool, directory: Path | None) -> None:
    """Merge the decisions inbox into decisions.md, archive old decisions, compact histories."""
    if watch and dry_run:
        raise click.UsageError("--watch and --dry-run do not go together: a dry run is one pass")
    from squadd.config import load_settings
    from squadd.logs import configure_logging
    from squadd.scribe import merge_inbox
    from squadd.tools.secrets import SecretRegistry

    # A pass reports what it merged and rejected itself; log lines would only repeat it. A
    # watcher has no report at the end: its failures are logged on stderr. No tool runs here,
    # so no secret is resolved: the registry stays empty, the processor is required all the same.
    configure_logging(redact=SecretRegistry().redact_log_event,
                      console_level="warning" if watch else "error")
    try:
        layout = find_layout(directory)
        settings = load_settings(layout.root)
        if watch:
            _watch(layout, settings, as_json)
            return
        report = merge_inbox(layout, settings, dry_run=dry_run)
    except SquaddError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:  # a file the pass needs cannot be read or written
        where = f"{exc.filename}: " if exc.filename else ""
        raise click.ClickException(f"{where}{exc.strerror or exc}; nothing more was "
                                   "changed (fix it and run 'squadd scribe' again)") from exc
    except UnicodeDecodeError as exc:
        raise click.ClickException(f"a squad file is not UTF-8 text ({exc.reason} at byte "
                                   f"{exc.start}); nothing more was changed") from exc
    if as_json:
        print_json(report.model_dump(mode="json"))
    else:
        for line in describe(report):
            click.echo(line)


def describe(report: ScribeReport) -> list[str]:
    """The report in words, for people."""
    would = "would be " if report.dry_run else ""
    lines = [
        f"{'Dry run: ' if report.dry_run else ''}{report.merged} "
        f"decision{'s' if report.merged != 1 else ''} {would}merged, {report.skipped} "
        f"duplicate{'s' if report.skipped != 1 else ''} skipped, {len(report.rejected)} "
        f"file{'s' if len(report.rejected) != 1 else ''} {would}rejected, {report.archived} "
        f"{would}archived"
    ]
    lines += _files(f"inbox files {would}merged", report.merged_files)
    for rejected in report.rejected[:SHOWN_FILES]:
        where = f" -> {rejected.moved_to}" if rejected.moved_to else ""
        lines.append(f"  rejected {rejected.file}{where}: {rejected.reason}")
    if len(report.rejected) > SHOWN_FILES:
        lines.append(f"  ... and {len(report.rejected) - SHOWN_FILES} more rejected")
    lines += _files("left for a later pass", report.deferred)
    lines += _files(f"decisions {would}archived to decisions-archive.md",
                    report.archived_titles)
    if report.archive_note:
        lines.append(f"  note: {report.archive_note}")
    for compaction in report.compacted:
        lines.append(f"  history of {compaction.agent}: {compaction.moved} "
                     f"entr{'ies' if compaction.moved != 1 else 'y'} {would}moved to "
                     "history-archive.md")
    if report.team_updates:
        lines.append(f"  {report.team_updates} team update"
                     f"{'s' if report.team_updates != 1 else ''} added to agents' histories")
    lines += [f"  skipped {problem.file}: {problem.reason}" for problem in report.problems]
    lines += [f"  recovered: {note}" for note in report.recovered]
    return lines


def _files(label: str, names: list[str]) -> list[str]:
    if not names:
        return []
    shown = ", ".join(names[:SHOWN_FILES])
    more = f" and {len(names) - SHOWN_FILES} more" if len(names) > SHOWN_FILES else ""
    return [f"  {label}: {shown}{more}"]


class _EchoSink:
    """Prints each Scribe event as it happens (as JSON lines with --json)."""

    def __init__(self, as_json: bool):
        self._as_json = as_json

    def publish(self, event: BaseEvent) -> None:
        from squadd.contracts.events import ScribeArchived, ScribeMerged, ScribeRejected

        if self._as_json:
            click.echo(event.model_dump_json())
        elif isinstance(event, ScribeMerged):
            click.echo(f"merged {event.merged} decision{'s' if event.merged != 1 else ''} "
                       f"({event.skipped} duplicate{'s' if event.skipped != 1 else ''} "
                       f"skipped) from {', '.join(event.files)}")
        elif isinstance(event, ScribeRejected):
            click.echo(f"rejected {event.file}: {event.reason}")
        elif isinstance(event, ScribeArchived):
            click.echo(f"archived {event.moved} to {event.target}: {event.reason}")


def _watch(layout: SquadLayout, settings: Settings, as_json: bool) -> None:
    import anyio

    from squadd.scribe.worker import run_scribe_worker

    async def main() -> None:
        stop = anyio.Event()
        async with anyio.create_task_group() as group:

            async def wait_for_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        stop.set()
                        return

            group.start_soon(wait_for_signal)
            await group.start(functools.partial(run_scribe_worker, layout, settings,
                                                _EchoSink(as_json), stop=stop))
            if not as_json:
                click.echo(f"Scribe watching {layout.inbox_dir} (Ctrl-C to stop)")

    anyio.run(main)
