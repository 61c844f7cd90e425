"""A blocking function held in its thread until the test lets it go: for checking what waits
for it, and what does not, without timing anything."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import anyio
import pytest


@dataclass
class Held:
    entered: threading.Event = field(default_factory=threading.Event)
    """Set when a call has started (and is held)."""
    release: threading.Event = field(default_factory=threading.Event)
    """Set by the test: every held call, and every later one, goes on."""
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    async def wait_entered(self) -> None:
        """Wait (in a thread: the call holds no event loop) until a call is held."""
        if not await anyio.to_thread.run_sync(self.entered.wait, 30):
            raise TimeoutError("no call was held within 30 s")


def hold(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str) -> Held:
    """Replace `module.name` with a version that records its arguments, then waits for
    `release` before doing what it did (an `OSError` after 30 s: never a hang)."""
    real = getattr(module, name)
    held = Held()

    def waiting(*args: Any, **kwargs: Any) -> Any:
        held.calls.append(args)
        held.entered.set()
        if not held.release.wait(30):
            raise OSError("never released")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, waiting)
    return held
