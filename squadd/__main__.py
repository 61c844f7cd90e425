"""`python -m squadd`: the same as the `squadd` command."""

from squadd.cli import run

run()
