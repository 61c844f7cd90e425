"""`squadd X --help` for every command X loads no heavy module: what the command runs (the
runtime, the daemon's app and its web stack, httpx, pydantic, anyio, the tools, the settings,
even the daemon client's `http.client`)
is imported only when it runs. Asserted on the modules loaded, not on time; the timing is
`scripts/bench/cli_help.py`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from squadd.cli.app import COMMANDS
from squadd.cli.route import MAX_TIMEOUT_S
from squadd.contracts.routes import MAX_ROUTE_TIMEOUT_S

REPO_ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("squadd.runtime", "squadd.daemon.app", "squadd.daemon.server", "squadd.config",
         "squadd.tools", "squadd.providers", "squadd.scribe", "squadd.workspaces",
         "starlette", "uvicorn", "httpx", "pydantic", "anyio", "structlog", "yaml", "griffe",
         "textual", "mcp", "redis", "http.client", "aiohttp")

# One process asks every command for its help in turn and notes the heavy modules loaded
# after each: the first command to load one is the one that imports it.
PROBE = """
import json, sys
from squadd.cli.app import COMMANDS, main
heavy = tuple(sys.argv[1:])
found = {}
for name in sorted(COMMANDS):
    try:
        main([name, "--help"], prog_name="squadd")
    except SystemExit as exc:
        assert exc.code == 0, (name, exc.code)
    found[name] = sorted({m for m in sys.modules for h in heavy
                          if m == h or m.startswith(h + ".")})
print(json.dumps(found))
"""


def test_every_command_s_help_loads_no_heavy_module() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, *HEAVY], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(found) == sorted(COMMANDS)
    assert {name: loaded for name, loaded in found.items() if loaded} == {}


def test_route_s_timeout_bound_is_the_route_request_s() -> None:
    assert MAX_TIMEOUT_S == MAX_ROUTE_TIMEOUT_S
