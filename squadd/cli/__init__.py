"""The `squadd` command. `run` is the console script (and `python -m squadd`): a plain
`squadd status` is answered by `squadd.cli.quick` without loading click; every other command
goes to the click group, `squadd.cli.app.main`, which imports each command's module only when
it runs. Nothing here imports click. (`squadd.cli.main` is still the click group, for the
console scripts an older install wrote, which import it from here.)
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


def __getattr__(name: str) -> object:
    if name == "main":
        from squadd.cli.app import main

        return main
    raise AttributeError(f"module 'squadd.cli' has no attribute {name!r}")
