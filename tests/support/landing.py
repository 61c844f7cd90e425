"""A real daemon on a real git repository whose sessions work in worktrees, and a scripted
model that writes one file per task: what the landing-outcome and live-settings tests share."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from squadd.state.scaffold import templates_dir
from squadd.state.team import add_agent
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess, clean_env
from tests.support.fixing_agent import tool_results
from tests.support.model_servers import OpenAIServer, Reply
from tests.workspaces.conftest import git, make_repo

WORKTREE_CONFIG = FAST_CONFIG + """
[workspace]
isolation = "worktree"
spares = 0
"""


def writer(body: dict[str, Any]) -> Reply:
    """`write NAME TEXT` as the task: one `write` call, then "wrote NAME"."""
    task = next(m["content"] for m in body["messages"] if m["role"] == "user")
    name, text = re.search(r"write (\S+) (\S+)", task).groups()  # type: ignore[union-attr]
    if not tool_results(body):
        return OpenAIServer.tool_call_turn(("write", {"path": name, "content": text + "\n"}))
    return OpenAIServer.text_turn(f"wrote {name}")


def worktree_daemon(tmp_path: Path, url: str, config: str = WORKTREE_CONFIG) -> DaemonProcess:
    layout = make_repo(tmp_path / "repo", {"app.txt": "one\n"})
    add_agent(layout, "lead", "Lead", templates=templates_dir())
    layout.config_toml.write_text(config, encoding="utf-8")
    git(layout.repo, "add", "--all")
    git(layout.repo, "commit", "--quiet", "-m", "squad")
    return DaemonProcess(layout, url, env=clean_env(
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"), GIT_AUTHOR_NAME="Tester",
        GIT_AUTHOR_EMAIL="tester@example.com", GIT_COMMITTER_NAME="Tester",
        GIT_COMMITTER_EMAIL="tester@example.com"))


def set_config(daemon: DaemonProcess, extra: str) -> None:
    """.squad/config.toml: the worktree settings and `extra`, replaced in one rename as an
    editor saves it (a file written in place could be read by the daemon's watcher half
    written, an empty or shorter file that is valid)."""
    path = daemon.layout.config_toml
    spare = path.with_name(f".{path.name}.new")
    spare.write_text(WORKTREE_CONFIG + extra, encoding="utf-8")
    os.replace(spare, path)


def wait_for_event(daemon: DaemonProcess, kind: str, session: str | None = None,
                   timeout: float = 15.0, since: int = 0) -> dict[str, Any]:
    """The first `kind` event (of `session`, with a `seq` past `since`): among the last 200
    the daemon keeps, else as it happens (its event stream, followed for `timeout` seconds)."""
    try:
        with daemon.follow_events(timeout, types=[kind], session_id=session,
                                  recent=200) as events:
            for event in events:
                if int(event.get("seq") or 0) > since:
                    return event
    except TimeoutError:
        pass
    raise TimeoutError(f"no {kind} event" + (f" for {session}" if session else ""))
