"""The stop's deadline: a daemon whose graceful stop does not end in time exits anyway.

A stop waits for things that need the disk: the group commit's last batch, the journal's
checkpoint, the Scribe's last merge. A disk that stops answering would hold such a wait, and
the daemon with it, for good. `StopDeadline` runs in a thread of its own, so it fires even
while the event loop waits: past the deadline it logs why and ends the process as a `kill -9`
would. That is safe by design: every record a caller was told of is durable, the journal is
replayed and the stale files are cleaned at the next start.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger("squadd.daemon")

EXIT_CODE = 75
"""The status a daemon ends with when its stop ran past the deadline (EX_TEMPFAIL)."""

LOG_WAIT_S = 2.0
"""How long the expiry waits for its log line (the log is on a disk that may not answer)."""


class StopDeadline:
    """Ends the process (`exit(EXIT_CODE)`) unless `disarm` comes before the armed time.

    `arm` may be called again: the earlier deadline wins (a second signal only shortens it).
    `exit` is injectable for tests."""

    def __init__(self, *, exit: Callable[[int], object] = os._exit):
        self._exit = exit
        self._changed = threading.Condition()
        self._at: float | None = None
        self._why = ""
        self._disarmed = False
        self._thread: threading.Thread | None = None
        self.expired = False

    def arm(self, seconds: float, why: str) -> None:
        """Exit `seconds` from now (or at the earlier time armed before), logging `why`."""
        with self._changed:
            if self._disarmed:
                return
            at = time.monotonic() + seconds
            if self._at is None or at < self._at:
                self._at, self._why = at, why
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="squadd-stop-deadline",
                                                daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def waiting_for(self, why: str) -> None:
        """Say what is waited for now, without moving the deadline (it logs `why` if it
        fires)."""
        with self._changed:
            self._why = why

    def disarm(self) -> None:
        """The stop has ended: never exit (for good, even if armed again)."""
        with self._changed:
            self._disarmed = True
            self._changed.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _watch(self) -> None:
        with self._changed:
            while not self._disarmed:
                assert self._at is not None  # set before the thread starts
                left = self._at - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            if self._disarmed:
                return
            self.expired = True
            why = self._why
        told = threading.Event()

        def tell() -> None:
            try:
                log.error("squadd stop did not end in time; exiting without finishing it (what "
                          "callers were told of is durable: the journal is replayed and stale "
                          "files are cleaned at the next start)", waited_for=why,
                          exit_code=EXIT_CODE)
            finally:
                told.set()

        threading.Thread(target=tell, name="squadd-stop-deadline-log", daemon=True).start()
        told.wait(LOG_WAIT_S)
        self._exit(EXIT_CODE)
