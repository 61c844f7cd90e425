"""What a soak run starts from: the daemon's settings, the custom tools in `.squad/tools/`, and
the folder beside the repository that the workspace tools' escapes aim at (a symlink in the
repository leads to it), with the snapshot that proves it untouched at the end.
"""

from __future__ import annotations

import os
from pathlib import Path

from squadd.state.layout import SquadLayout
from tests.reliability.workspace_invariants import Snapshot, snapshot
from tests.support.chaos_workspace import ESCAPE_LINK, OUTSIDE_FOLDER, SENTINEL

READ_TIMEOUT_S = 2.0
OUTSIDE_TIME_NS = 1_000_000_000 * 10**9
"""The times the outside folder's entries are given (September 2001)."""
HARNESS_FILES = ("repo", "mcp-stderr.log")
"""What the harness itself writes beside the repository (and the daemon's output file)."""
CONFIG = f"""\
[pool]
max_concurrent = 8

[route]
max_depth = 3
timeout_s = 120.0

[provider]
read_timeout_s = {READ_TIMEOUT_S}
connect_timeout_s = 2.0
max_attempts = 4
retry_backoff_s = 0.05
retry_backoff_max_s = 0.5
max_retry_wait_s = 10.0

[daemon]
grace_s = 5.0

[scribe]
debounce_ms = 200

[tools]
approvals = {{ bash = "allow" }}
"""
PYTHON_TOOL = '''\
from squadd import tool


@tool
def soak_note(text: str, count: int = 1) -> str:
    """Repeat TEXT COUNT times (the soak's Python tool)."""
    return " ".join([text] * count)
'''
STALL_TOOL = '''\
import time
from squadd import tool


@tool(timeout_s=2)
def soak_stall(text: str) -> str:
    """Never ends on its own (the soak's runaway Python tool: its timeout must stop it)."""
    time.sleep(600)
    return text
'''
SHELL_TOOL = """\
description: Echo a word after a short pause (the soak's shell tool)
tags: [read]
parameters:
  WORD: {type: string, description: the word to echo}
bash: sleep 0.05; echo soak-shell {WORD}
"""


def prepare(layout: SquadLayout, tmp_path: Path) -> None:
    """Put the custom tools in place, and the outside folder with its way in from the repo."""
    tools = layout.tools_dir
    tools.mkdir(parents=True, exist_ok=True)
    (tools / "soak_note.py").write_text(PYTHON_TOOL, encoding="utf-8")
    (tools / "soak_stall.py").write_text(STALL_TOOL, encoding="utf-8")
    (tools / "soak_shell.yaml").write_text(SHELL_TOOL, encoding="utf-8")
    outside = tmp_path / OUTSIDE_FOLDER
    (outside / "nested").mkdir(parents=True, exist_ok=True)
    (outside / SENTINEL).write_text("sentinel: no workspace tool may change this\n",
                                    encoding="utf-8")
    (outside / "nested" / "kept.txt").write_text("kept\n", encoding="utf-8")
    for path in [*sorted(outside.rglob("*"), reverse=True), outside]:
        # Times long past: any change, even a file made and removed, sets them to now.
        os.utime(path, ns=(OUTSIDE_TIME_NS, OUTSIDE_TIME_NS))
    (layout.repo / ESCAPE_LINK).symlink_to(Path("..") / OUTSIDE_FOLDER)


def around_repo(tmp_path: Path, daemon_output: Path) -> Snapshot:
    """Everything beside the repository but what the harness writes."""
    return snapshot(tmp_path, skip=(*HARNESS_FILES, daemon_output.name))
