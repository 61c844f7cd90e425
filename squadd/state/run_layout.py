"""The paths of squadd's own files in a squad dir: transcripts and their journals, tool
output, the orchestration log, workspaces and their locks, the daemon's run/ files, the
inbox and the spending ledger. `SquadLayout` has them all (`squadd.state.layout`)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from squadd.contracts.names import safe_name
from squadd.state.inside import safe_id

JOURNAL_SUFFIX = ".log"
"""The end of a group-commit journal's name (`SquadLayout.transcript_journal`)."""
def _entry_name(stamp: str, agent: str) -> str:
    """An orchestration-log entry's file name: `{stamp}-{agent}.md`, both checked."""
    return f"{safe_id(stamp, kind='timestamp')}-{safe_name(agent)}.md"


class RunPaths:
    """The part of `SquadLayout` that names squadd's own files (a mixin: it holds no state;
    `root`, `repo`, `inside` and `_p` are the layout's)."""

    __slots__ = ()

    root: Path
    repo: Path
    _prefix: str

    if TYPE_CHECKING:  # the layout's own methods, named here for the type checker only
        def inside(self, path: Path | str) -> Path: ...

        def _p(self, *parts: str, check: bool = True) -> Path: ...

        def folder(self, *parts: str) -> Path: ...

    # Sessions and their output. squadd's transcripts live under run/ (git-ignored), apart
    # from Squad's own committed `sessions/`; a transcript an older squadd left in `sessions/`
    # is still found there and continued in place.
    @property
    def transcripts_dir(self) -> Path:
        return self.folder("run", "transcripts")

    @property
    def transcript_journals_dir(self) -> Path:
        """`run/transcripts/.journal/`: each runtime's group-commit journal of transcript
        records (see `squadd.state.journal`)."""
        return self._p("run", "transcripts", ".journal")

    def transcript_journal(self, pid: int, token: str) -> Path:
        """`run/transcripts/.journal/{pid}-{token}.log`: the journal a runtime in process
        `pid` writes (`token` tells two of one process apart)."""
        return self.transcript_journals_dir / f"{pid}-{token}{JOURNAL_SUFFIX}"

    def transcript_journals_of(self, pid: int) -> list[Path]:
        """The journals of process `pid` still there, sorted (blocking). A clean close
        removes its own, and a start replays and removes those of ended processes."""
        try:
            return sorted(self.transcript_journals_dir.glob(f"{pid}-*{JOURNAL_SUFFIX}"))
        except OSError:
            return []

    @property
    def transcript_prompts_dir(self) -> Path:
        """`run/transcripts/.prompts/`: each system prompt once, named by its digest, which
        the transcripts' system messages name (see `squadd.state.transcripts`)."""
        return self._p("run", "transcripts", ".prompts")

    @property
    def sessions_dir(self) -> Path:
        """The folder of squadd's transcripts (the same as `transcripts_dir`)."""
        return self.transcripts_dir

    @property
    def legacy_transcripts_dir(self) -> Path:
        """`sessions/`, where squadd kept transcripts before; read, never written anew."""
        return self._p("sessions")

    def transcript(self, session_id: str) -> Path:
        """A session's transcript: `run/transcripts/{id}.jsonl`, or the older `sessions/{id}.jsonl`
        when only that one exists."""
        name = safe_id(session_id) + ".jsonl"
        path = self._p("run", "transcripts", name)
        # two plain stats on the common path; the legacy path is checked only when it is used
        if not os.path.lexists(path) and os.path.isfile(self._prefix + "sessions" + os.sep + name):
            return self._p("sessions", name)
        return path

    def new_transcript(self, session_id: str) -> Path:
        """The transcript of a session this process is creating: `run/transcripts/{id}.jsonl`
        (a new id has no older copy in `sessions/` to look for). Only its folder is checked:
        `TranscriptWriter` opens it with `O_NOFOLLOW`, so a link at the name is refused by the
        open itself, and no lookup of a name not there yet is made."""
        return self.transcripts_dir / (safe_id(session_id) + ".jsonl")

    def tool_output(self, session_id: str, call_id: str) -> Path:
        return self._p(
            "tool-output", safe_id(session_id), safe_id(call_id, kind="tool call id") + ".txt"
        )

    def tool_output_part(self, session_id: str, call_id: str, part: str) -> Path:
        """A piece of a call's output being streamed (one command's), before it is assembled."""
        return self._p(
            "tool-output", safe_id(session_id),
            f"{safe_id(call_id, kind='tool call id')}.{safe_id(part, kind='output part')}.part",
        )

    @property
    def orchestration_dir(self) -> Path:
        return self.folder("orchestration-log")

    def orchestration_entry(self, stamp: str, agent: str) -> Path:
        """`orchestration_log`'s path with only its folder checked, for a writer that opens it
        with `O_NOFOLLOW` (a link at the name is refused by the open itself): a new entry's
        name is not there yet, and looking it up costs more than any other check."""
        return self.orchestration_dir / _entry_name(stamp, agent)

    def orchestration_log(self, stamp: str, agent: str) -> Path:
        return self._p("orchestration-log", _entry_name(stamp, agent))

    # Workspaces: one git worktree per isolated session (git-ignored).
    @property
    def worktrees_dir(self) -> Path:
        return self._p("worktrees")

    def worktree(self, session_id: str) -> Path:
        return self._p("worktrees", safe_id(session_id))

    @property
    def removed_worktrees_dir(self) -> Path:
        """Worktrees moved out of git's sight on their way out, their files deleted in the
        background (`squadd.workspaces.worktrees.move_aside`; git-ignored, under run/)."""
        return self._p("run", "removed-worktrees")

    @property
    def workspaces_dir(self) -> Path:
        """The workspace records (one JSON file per session that has a worktree)."""
        return self._p("run", "workspaces")

    def workspace_record(self, session_id: str) -> Path:
        return self._p("run", "workspaces", safe_id(session_id) + ".json")

    def may_have_workspace(self, session_id: str) -> bool:
        """Whether the session may have a workspace record: one `lstat` of its name in the
        records' folder (checked as `folder` checks it), for a caller that asks for every
        session and reads a record found through `workspace_record`'s checked path."""
        return os.path.lexists(self.folder("run", "workspaces") / (safe_id(session_id) + ".json"))

    def workspace_output(self, session_id: str, step: str) -> Path:
        """The full output of a workspace command (setup, land check) of a session."""
        return self._p("run", "workspaces", f"{safe_id(session_id)}.{safe_id(step)}.txt")

    def land_check_report(self, session_id: str, step: str) -> Path:
        """A fresh path for the JUnit report a land check writes (`{report}`): in the session
        worktree's own copy of the squad dir, which its sandbox may write and squadd never
        commits."""
        return self.worktree(session_id) / self.root.name / "run" / \
            f"land-check.{safe_id(step)}.xml"

    def land_check_result(self, commit: str) -> Path:
        """The land check's result on a target's tip commit, kept until the tip moves."""
        return self._p("run", "land-checks", f"{safe_id(commit)}.json")

    @property
    def land_checks_dir(self) -> Path:
        return self._p("run", "land-checks")

    @property
    def landing_lock(self) -> Path:
        """Held while a branch lands: one landing at a time per repository."""
        return self._p("run", "landing.lock")

    @property
    def worktrees_lock(self) -> Path:
        """Held while git adds, moves or removes a worktree, by every squadd process."""
        return self._p("run", "worktrees.lock")

    # Daemon runtime files (git-ignored): run/ and tool-output/.
    @property
    def log_dir(self) -> Path:
        """Where squadd's own log lives: run/ (`log/` is Squad's, so squadd keeps out)."""
        return self._p("run")

    @property
    def log_file(self) -> Path:
        return self._p("run", "squadd.log")

    def private_dirs(self) -> tuple[Path, ...]:
        """The folders of squadd's own files, kept 0700: transcripts and their journals and
        stored prompts, tool output, workspace records, logs and run/ (never the team's
        committed files)."""
        return (self.run_dir, self.transcripts_dir, self.transcript_journals_dir,
                self.transcript_prompts_dir, self.workspaces_dir, self.log_dir,
                self._p("tool-output"), self._p("sessions"))

    @property
    def ui_handoff(self) -> Path:
        """The page `squadd ui --open` gives the browser (0600 in run/, 0700): it carries the
        dashboard's token, which must never be on a command line."""
        return self._p("run", "ui-open.html")

    @property
    def run_dir(self) -> Path:
        return self._p("run")

    @property
    def squad_id_file(self) -> Path:
        """The squad's id (one line), made by the first cluster coordinator: workers whose
        clone holds it compare it with the coordinator's. Commit it with the squad."""
        return self._p("squad-id")

    @property
    def socket(self) -> Path:
        return self._p("run", "squadd.sock")

    @property
    def pid_file(self) -> Path:
        return self._p("run", "squadd.pid")

    @property
    def daemon_lock(self) -> Path:
        return self._p("run", "squadd.lock")

    @property
    def token_file(self) -> Path:
        return self._p("run", "token")

    @property
    def scribe_lock(self) -> Path:
        return self._p("run", "scribe.lock")

    # The inbox and spending (run/: the daemon's own, git-ignored).
    @property
    def spend_dir(self) -> Path:
        """The spending ledger: one JSON-lines file per UTC day of model calls."""
        return self._p("run", "spend")

    def spend_file(self, day: str) -> Path:
        """The ledger of one UTC day (`YYYY-MM-DD`)."""
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", day):
            raise ValueError(f"not a day: {day!r} (expected YYYY-MM-DD)")
        return self._p("run", "spend", f"{day}.jsonl")

    @property
    def human_inbox(self) -> Path:
        """What waits on a person: the inbox's append-only log of items and their ends."""
        return self._p("run", "inbox.jsonl")

    def lock_for(self, path: Path) -> Path:
        """The lock file that guards `path`: kept under run/locks/ so git never sees it.

        A file of the repo outside the squad dir (a `.github/skills/` skill) gets a lock too,
        named with a `repo__` prefix."""
        flat = None
        if self.root not in Path(path).absolute().parents:
            resolved = Path(os.path.realpath(path))
            repo = Path(os.path.realpath(self.repo))
            if self.root not in resolved.parents and repo in resolved.parents:
                flat = "repo__" + "__".join(resolved.relative_to(repo).parts)
        if flat is None:
            flat = "__".join(self.inside(path).relative_to(self.root).parts)
        return self._p("run", "locks", flat + ".lock")
