"""`squadd status` without click: the console script's fast path.

People type `squadd status` often, and scripts poll it, so it must start in a few times the
interpreter's own start-up; loading click and the command group costs more than the rest of the
command. `answer` is offered the arguments first. A plain status call (`--json`, `--all`,
`--agent NAME`, `--dir PATH`, in any order, `--opt VALUE` or `--opt=VALUE`) is answered here with
the output, errors and exit codes of `squadd.cli.status`, built from the same `_report` lines.
Anything else (`--help`, `--watch`, an option or value it does not know, a value click would
refuse, such as a `--dir` that is not a folder) returns None, and the click group answers it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TYPE_CHECKING = False  # no `typing` at run time: this path must start fast
if TYPE_CHECKING:
    from typing import Any

_FLAGS = {"--json": "as_json", "--all": "include_ended"}
_VALUES = {"--agent": "agent", "--dir": "directory"}


def parse_status(args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments of `_status` for a plain `squadd status ...` call, or None when
    click should answer it."""
    if not args or args[0] != "status":
        return None
    options: dict[str, Any] = {"as_json": False, "include_ended": False, "agent": None,
                               "directory": None}
    rest = iter(args[1:])
    for arg in rest:
        name, equals, value = arg.partition("=")
        if not equals and arg in _FLAGS:
            options[_FLAGS[arg]] = True
            continue
        if name not in _VALUES:
            return None
        if not equals:
            value = next(rest, "-")  # a missing value: click names it
        if value.startswith("-") or not _accepted(name, value):
            return None
        options[_VALUES[name]] = value
    return options


def _accepted(name: str, value: str) -> bool:
    """Whether click would take `value` for `name` as it is (else click answers, and explains)."""
    try:
        value.encode("utf-8")  # text the shell passed that is not UTF-8
    except UnicodeEncodeError:
        return False
    if name == "--dir":
        return Path(value).is_dir() and os.access(value, os.R_OK)
    return True


def answer(args: list[str]) -> int | None:
    """Answer a plain `squadd status` call and return its exit code; None for anything else."""
    options = parse_status(args)
    if options is None:
        return None
    try:
        return _status(**options)
    except KeyboardInterrupt:
        sys.stderr.write("\nAborted!\n")
        return 1


def _status(*, as_json: bool, include_ended: bool, agent: str | None,
            directory: str | None) -> int:
    from squadd.cli._report import bold, json_text, status_lines
    from squadd.daemon.client import DaemonClient
    from squadd.errors import SquaddError
    from squadd.state.layout import SquadLayout

    try:
        with DaemonClient(SquadLayout.find(Path(directory) if directory else None)) as client:
            report = client.status(agent=agent, include_ended=include_ended)
    except SquaddError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    if as_json:
        text = json_text(report) + "\n"
    else:  # bold only on a terminal, as `click.echo` strips it elsewhere
        lines = status_lines(report, header=bold if sys.stdout.isatty() else str)
        text = "".join(line + "\n" for line in lines)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `squadd status | head -1`: quiet, as click is
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0
