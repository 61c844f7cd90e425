"""The `squadd` command. `run` is the console script (and `python -m squadd`): a plain
`squadd status` is answered by `squadd.cli.quick` without loading click; every other command
goes to the click group, `squadd.cli.app.main`, which imports each command's module only when
it runs. Nothing here imports click.
"""

from __future__ import annotations

import sys


def run() -> None:
    """Run `squadd` with the process's arguments, and exit with its code."""
    from squadd.cli.quick import answer

    code = answer(sys.argv[1:])
    if code is None:
        from squadd.cli.app import main

        main(prog_name="squadd")
    sys.exit(code)
