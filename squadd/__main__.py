"""`python -m squadd`: the same as the `squadd` command."""

from squadd.cli import main

main(prog_name="squadd")
