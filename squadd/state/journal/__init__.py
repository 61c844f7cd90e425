"""The one durability log: every write-ahead record in squadd, its format and its replay.

`format` holds the frame every record is written as; `writer` the commit thread's journal
file; `commit` the group commit's state machine on the event loop (`GroupCommit`); `replay`
puts back, after a crash, what a record holds and its file lacks (`replay_journals`, and
`finish_append` for a team file's append intent, `squadd.state.intent`).
"""

from squadd.state.journal.commit import (
    AHEAD_BYTES,
    BACKGROUND_PER_BATCH,
    CHECKPOINT_BYTES,
    COMMIT_THREAD,
    COMMIT_TIMEOUT_S,
    LINGER_S,
    GroupCommit,
)
from squadd.state.journal.replay import Replayed, finish_append, replay_journals
from squadd.state.journal.states import CommitState, Pending
from squadd.state.journal.writer import Appender

__all__ = [
    "AHEAD_BYTES",
    "BACKGROUND_PER_BATCH",
    "CHECKPOINT_BYTES",
    "COMMIT_THREAD",
    "COMMIT_TIMEOUT_S",
    "LINGER_S",
    "Appender",
    "CommitState",
    "GroupCommit",
    "Pending",
    "Replayed",
    "finish_append",
    "replay_journals",
]
