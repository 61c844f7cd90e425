"""`squadd init`: create the `.squad/` folder from the scaffold, never overwriting a file."""

from __future__ import annotations

from pathlib import Path

import click

from squadd.cli._output import print_json
from squadd.cli._squad import show_path
from squadd.state.layout import SQUAD_DIRNAMES


def _enclosing_squad(repo: Path) -> Path | None:
    for folder in repo.resolve().parents:
        for dirname in SQUAD_DIRNAMES:
            if (folder / dirname).is_dir():
                return folder / dirname
    return None


@click.command()
@click.option("--dir", "directory", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="The repository to set up (default: the working directory).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def init(directory: Path | None, as_json: bool) -> None:
    """Create .squad/ in a repository, or add the files it is missing.

    Existing files are never changed, so running it again is safe: it says "nothing to do".
    A legacy .ai-team/ folder is used in place.

    \b
    Examples:
      squadd init
      squadd init --dir ~/src/my-repo
      squadd init --json
    """
    from squadd.state.scaffold import init_squad

    repo = (directory or Path.cwd()).resolve()
    result = init_squad(repo)
    if as_json:
        print_json({
            "squad_dir": result.squad_dir,
            "legacy": result.legacy,
            "created": [str(p.relative_to(result.squad_dir)) for p in result.created],
            "existing": [str(p.relative_to(result.squad_dir)) for p in result.existing],
        })
        return
    where = show_path(result.squad_dir)
    if not result.created:
        click.echo(f"nothing to do: {where} already has every file of the scaffold")
        return
    verb = "Created" if result.created_dir else "Added missing files to"
    click.echo(f"{verb} {where}{'/' if not where.endswith('/') else ''}:")
    for path in result.created:
        click.echo(f"  {path.relative_to(result.squad_dir)}")
    if result.legacy:
        click.echo("(using the legacy .ai-team/ folder in place)")
    if result.created_dir:
        above = _enclosing_squad(repo)
        if above is not None:
            click.echo(f"note: {above} above this folder is no longer used from here", err=True)
        click.echo("Next: squadd agent add NAME --role ROLE, then squadd agent list")
