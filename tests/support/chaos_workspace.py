"""The chaos agents' work on the repository with the built-in workspace tools.

A conversation that draws this work owns one file, `soak-work/{task}.txt`, and works on it in
three turns: it `write`s it; `read`s it back and `edit`s one line (an exact replacement); looks
for it with `grep` and `find` and shows it with `bash` (`cat`, `wc -l`). Now and then its first
turn also tries to write outside the repository (a `..` path, and a path through a symlink in
the repo that leads out), which confinement must refuse. What each call asks for, and what the
file holds after each step, follow from the task id alone, so the invariants read the run's
transcripts and the files and know what is allowed.
"""

from __future__ import annotations

import re
from typing import Any

from tests.support.model_servers import ToolCallSpec

WORKSPACE_FOLDER = "soak-work"
"""Where, in the repository, the conversations' files go."""
OUTSIDE_FOLDER = "soak-outside"
"""A folder beside the repository that nothing may change."""
ESCAPE_LINK = "soak-escape"
"""A symlink in the repository to `../soak-outside`."""
SENTINEL = "sentinel.txt"
"""A file in the outside folder that the escape step tries to edit."""
SCENE = ("ws_write", "ws_edit", "ws_look")
"""The steps of the work, in their order (one turn each)."""
ESCAPE = "ws_write_escape"
"""`ws_write`, and then the calls that try to leave the repository (in its place when drawn)."""
BASH_PAUSE_S = 0.5
"""How long the `bash` step's command runs before it shows the file: a kill can fall inside."""
FILE_RE = re.compile(r"^(?P<task>[A-Za-z0-9][A-Za-z0-9.-]*)\.txt$")
CALL_TASK_RE = re.compile(r"^(?P<task>[A-Za-z0-9][A-Za-z0-9.-]*)-(?:s\d+-\d+|x\d+)$")


def scene_file(task_id: str) -> str:
    """The file of a conversation, relative to the repository."""
    return f"{WORKSPACE_FOLDER}/{task_id}.txt"


def task_of_call(call_id: str) -> str | None:
    """The task a chaos agent's tool call id belongs to."""
    found = CALL_TASK_RE.match(call_id)
    return found.group("task") if found else None


def written(task_id: str) -> str:
    """What `ws_write` puts in the file."""
    return "".join(f"{task_id} line {n}\n" for n in range(1, 4))


def edit_old(task_id: str) -> str:
    return f"{task_id} line 2\n"


def edit_new(task_id: str) -> str:
    return f"{task_id} line 2 edited\n"


def edited(task_id: str) -> str:
    """What the file holds once `ws_edit` has run."""
    return written(task_id).replace(edit_old(task_id), edit_new(task_id), 1)


def bash_command(task_id: str) -> str:
    path = scene_file(task_id)
    return f"sleep {BASH_PAUSE_S}; cat {path}; wc -l < {path}"


def scene_calls(kind: str, task_id: str, call_id: str) -> tuple[ToolCallSpec, ...]:
    """The calls of one step (`kind` in SCENE, or ESCAPE); each call's id is `call_id` and its
    index in the turn."""
    path = scene_file(task_id)
    if kind in ("ws_write", ESCAPE):
        calls: tuple[ToolCallSpec, ...] = (
            ("write", {"path": path, "content": written(task_id)}, f"{call_id}-0"),)
        if kind == ESCAPE:
            calls += (("write", {"path": f"../{OUTSIDE_FOLDER}/{task_id}.txt",
                                 "content": written(task_id)}, f"{call_id}-1"),
                      ("edit", {"path": f"{ESCAPE_LINK}/{SENTINEL}", "old": "sentinel",
                                "new": f"taken by {task_id}"}, f"{call_id}-2"))
        return calls
    if kind == "ws_edit":
        return (("read", {"path": path}, f"{call_id}-0"),
                ("edit", {"path": path, "old": edit_old(task_id), "new": edit_new(task_id)},
                 f"{call_id}-1"))
    if kind == "ws_look":
        return (("grep", {"pattern": f"^{re.escape(task_id)} line 2 edited$",
                          "path": WORKSPACE_FOLDER}, f"{call_id}-0"),
                ("find", {"pattern": f"{task_id}.txt", "path": WORKSPACE_FOLDER},
                 f"{call_id}-1"),
                ("bash", {"command": bash_command(task_id)}, f"{call_id}-2"))
    raise ValueError(f"{kind!r} is not a workspace step")


def invalid_calls(task_id: str) -> list[tuple[str, dict[str, Any] | str]]:
    """Workspace calls with arguments the tools must refuse before touching anything."""
    path = scene_file(task_id)
    return [
        ("write", {"path": path}),
        ("edit", {"path": path, "old": "", "new": "x"}),
        ("read", {"path": path, "offset": 0}),
        ("bash", {"command": ""}),
        ("grep", {"pattern": "(unclosed", "path": WORKSPACE_FOLDER}),
        ("find", {"pattern": "*.txt", "depth": 2}),
        ("write", f'{{"path": "{path}", "content": "cut'),
    ]
