"""The process-wide secret registry: the secret values one owner's resolvers have handed out.

Each owner (a `SquadRuntime`, a command) has one `SecretRegistry`: its resolvers remember the
secret values they hand out there, and the owner's log processor (`registry.redact_log_event`,
given to `configure_logging`) redacts them. Two runtimes in one process share nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, MutableMapping
from typing import Any

from squadd.tools.redaction import redact


class SecretRegistry:
    """Secret values one owner's resolvers have handed out, so that its log records can be
    redacted wherever they go. Bounded and thread-safe (tools resolve in worker threads).

        secrets = SecretRegistry()
        configure_logging(redact=secrets.redact_log_event)
        runtime = SquadRuntime.from_settings(layout, settings, secrets=secrets)
    """

    MAX_VALUES = 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, str] = {}

    def remember(self, secrets: Mapping[str, str]) -> None:
        if not secrets:
            return
        with self._lock:
            for name, value in secrets.items():
                if value and (name in self._values or len(self._values) < self.MAX_VALUES):
                    self._values[name] = value

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return dict(self._values)

    def redact(self, text: str) -> str:
        return redact(text, self.snapshot())

    def redact_log_event(self, logger: Any, method: str,
                         event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        """A structlog processor: replace this registry's secret values in every string of a
        log record. Put it after `format_exc_info` (so tracebacks are redacted too) and before
        the renderer."""
        secrets = self.snapshot()
        if not secrets:
            return event_dict
        for key, value in list(event_dict.items()):
            event_dict[key] = _redact_value(value, secrets)
        return event_dict


def _redact_value(value: Any, secrets: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {k: _redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(v, secrets) for v in value]
    if isinstance(value, BaseException):
        return redact(f"{type(value).__name__}: {value}", secrets)
    return value
