"""Unix socket addresses that fit: AF_UNIX paths are limited to 107 bytes, and a repo can live
deeper than that. A longer path is reached through its open folder as `/proc/self/fd/N/NAME`.
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_UNIX_PATH_BYTES = 107
"""The longest path `bind` and `connect` accept on Linux (108 bytes with the NUL)."""


class SocketAddress:
    """The path to bind or connect to for `path`; keep the object alive while it is in use."""

    def __init__(self, path: Path):
        self.path = path
        self._dir_fd: int | None = None
        if len(os.fsencode(path)) <= MAX_UNIX_PATH_BYTES:
            self.usable = str(path)
        else:
            # Raises FileNotFoundError when the folder is missing: nothing can listen there.
            self._dir_fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            self.usable = f"/proc/self/fd/{self._dir_fd}/{path.name}"

    @property
    def aliased(self) -> bool:
        """True when the path was too long and `usable` goes through the folder's fd."""
        return self._dir_fd is not None

    def close(self) -> None:
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

    def __enter__(self) -> SocketAddress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
