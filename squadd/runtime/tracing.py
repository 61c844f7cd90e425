"""Turning traces on for a serving process (the daemon, a cluster worker) from its settings:
`[telemetry]` and the standard `OTEL_*` variables, the owner's secrets redacted from content."""

from __future__ import annotations

import os
from collections.abc import Callable

import structlog

from squadd import telemetry
from squadd._version import __version__
from squadd.config import TelemetrySettings

log = structlog.get_logger("squadd.telemetry")


def start_tracing(settings: TelemetrySettings, *,
                  redact: Callable[[str], str] | None = None) -> bool:
    """Configure tracing for this process and log what was done; whether spans are recorded.
    Call `telemetry.shutdown()` when the process stops (it exports what is left)."""
    said = telemetry.configure(
        traces=settings.traces, service_name=settings.service_name, version=__version__,
        capture_content=settings.capture_content or telemetry.content_on(os.environ),
        max_queue=settings.max_queue, export_timeout_s=settings.export_timeout_s,
        redact=redact)
    if telemetry.active():
        log.info(said, capture_content=telemetry.capture_content())
    elif settings.traces == "on":
        log.warning(said)
    return telemetry.active()
