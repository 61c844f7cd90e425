"""`squadd tools`: list, show, call, test and scaffold custom tools, in this process.

The click commands only: what each does is in `cli/_tools_run.py`, imported when one runs, so
that `squadd tools --help` loads neither the tools nor their settings.
"""

from __future__ import annotations

from pathlib import Path

import click

from squadd.cli._squad import TEXT, dir_option


@click.group()
def tools() -> None:
    """List, inspect, run, test and create custom tools (.squad/tools/*.py, *.yaml)."""


@tools.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the tools as JSON.")
@dir_option
def list_tools(as_json: bool, directory: Path | None) -> None:
    """List every tool: name, source (builtin, project, user, extra, cycod-project,
    cycod-user, cycod-global), file, and status.

    A shadowed tool lost its name to an earlier folder; a file that failed to load is listed
    with the reason, and every other tool still loads. A tool that cannot run on this machine
    is unavailable; a key squadd cannot honour here is a warning on its tool.
    """
    from squadd.cli import _tools_run

    _tools_run.list_tools(as_json, directory)


@tools.command("show")
@click.argument("name", type=TEXT)
@dir_option
def show(name: str, directory: Path | None) -> None:
    """Print tool NAME as the model sees it: its description and the JSON schema of its
    arguments, with where it comes from and its approval policy."""
    from squadd.cli import _tools_run

    _tools_run.show(name, directory)


CALL_HELP = """Run tool NAME through the full pipeline and print its result.

\b
Examples:
  squadd tools call word-count --arg TEXT="one two three"
  squadd tools call greet --args '{"name": "Ada", "times": 2}'
"""


@tools.command("call", help=CALL_HELP)
@click.argument("name", type=TEXT)
@click.option("--arg", "pairs", type=TEXT, multiple=True, metavar="KEY=VALUE",
              help="An argument (repeatable); non-string values are read as JSON.")
@click.option("--args", "raw_json", type=TEXT, default=None, metavar="JSON",
              help="All arguments as one JSON object.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
@dir_option
def call(name: str, pairs: tuple[str, ...], raw_json: str | None, as_json: bool,
         directory: Path | None) -> None:
    from squadd.cli import _tools_run

    _tools_run.call(name, pairs, raw_json, as_json, directory)


@tools.command("test")
@click.argument("name", type=TEXT, required=False)
@dir_option
def test(name: str | None, directory: Path | None) -> None:
    """Run the `tests:` of YAML tool NAME (default: of every YAML tool that has tests)."""
    from squadd.cli import _tools_run

    _tools_run.test(name, directory)


@tools.command("new")
@click.argument("name", type=TEXT)
@click.option("--python", "kind", flag_value="python", default=True,
              help="A Python tool (.py, the default).")
@click.option("--yaml", "kind", flag_value="yaml", help="A YAML shell tool (.yaml).")
@dir_option
def new(name: str, kind: str, directory: Path | None) -> None:
    """Create a working example tool NAME in .squad/tools/ to start from."""
    from squadd.cli import _tools_run

    _tools_run.new(name, kind, directory)
