"""Traces: the one seam every span squadd makes goes through (OpenTelemetry's GenAI conventions).

Until `configure` turns tracing on (the `squadd[otel]` extra installed, an OTLP endpoint set),
every call here is a check of one global and nothing is imported: `span` yields `NO_SPAN`,
`traceparent` is None, `environment` is empty. With tracing on, spans go to the SDK's batch
processor, which exports from its own thread: nothing here blocks the loop or raises into a
route.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from squadd.telemetry.otel import OtelTracing

Kind = Literal["internal", "client", "server"]
AttributeValue = str | bool | int | float | list[str] | list[int] | list[float]
CONTENT_VAR = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The standard switch for prompts, tool arguments and results on spans (off by default)."""
TRACEPARENT_VAR = "TRACEPARENT"
"""What a tool process finds the trace of the call that started it in (W3C trace context)."""


class Span(Protocol):
    def set(self, key: str, value: AttributeValue | None) -> None:
        """Set one attribute (None: leave it unset)."""

    def fail(self, error_type: str, message: str = "") -> None:
        """Mark the span failed: status ERROR and `error.type`."""


class _NoSpan:
    """The span of a process without tracing: every call does nothing."""

    def set(self, key: str, value: AttributeValue | None) -> None:
        return None

    def fail(self, error_type: str, message: str = "") -> None:
        return None


NO_SPAN = _NoSpan()
_tracing: OtelTracing | None = None


def active() -> bool:
    """Whether spans are being recorded (so that costly attributes may be worked out)."""
    return _tracing is not None


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, AttributeValue | None] | None = None, *,
         kind: Kind = "internal") -> Iterator[Span]:
    """A span named `name`, current for the block (its children nest under it); an exception
    that leaves the block marks it failed with `error.type` (a cancellation: `cancelled`)."""
    tracing = _tracing
    if tracing is None:
        yield NO_SPAN
        return
    with tracing.span(name, attributes or {}, kind) as current:
        yield current


def traceparent() -> str | None:
    """The W3C `traceparent` of the current span, or None."""
    tracing = _tracing
    return tracing.traceparent() if tracing is not None else None


def trace_id() -> str | None:
    """The current trace's id (32 hex digits), or None."""
    value = traceparent()
    return value.split("-")[1] if value else None


def environment() -> dict[str, str]:
    """What a process started now inherits of the trace: `TRACEPARENT`, or nothing."""
    value = traceparent()
    return {TRACEPARENT_VAR: value} if value else {}


@contextlib.contextmanager
def continued(parent: str | None) -> Iterator[None]:
    """Spans made in the block are children of `parent` (a W3C `traceparent` from an HTTP
    header, an MCP request's `_meta`, a cluster job). None or a malformed value: no change."""
    tracing = _tracing
    if tracing is None or not parent:
        yield
        return
    with tracing.continued(parent):
        yield


def capture() -> object | None:
    """The current trace context, to be `resumed` in another task (a background route)."""
    tracing = _tracing
    return tracing.capture() if tracing is not None else None


@contextlib.contextmanager
def resumed(captured: object | None) -> Iterator[None]:
    tracing = _tracing
    if tracing is None or captured is None:
        yield
        return
    with tracing.resumed(captured):
        yield


def capture_content() -> bool:
    """Whether prompts, tool arguments and results go on spans (redacted all the same)."""
    tracing = _tracing
    return tracing is not None and tracing.capture_content


def redact(text: str) -> str:
    """`text` with the secrets the owner knows replaced (before it goes on a span)."""
    tracing = _tracing
    return tracing.redact(text) if tracing is not None else text


def content_on(environ: Mapping[str, str] | None = None) -> bool:
    """Whether `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` asks for content."""
    value = (environ if environ is not None else os.environ).get(CONTENT_VAR, "")
    return value.strip().lower() in ("true", "1", "yes", "on")


def configure(*, traces: Literal["auto", "on", "off"], service_name: str, version: str,
              capture_content: bool, max_queue: int, export_timeout_s: float,
              redact: Callable[[str], str] | None = None,
              environ: Mapping[str, str] | None = None,
              exporter: Any = None) -> str:
    """Turn tracing on when `traces` says so (`auto`: when an OTLP endpoint is set in the
    environment); what was done, in words for the log. Without the `squadd[otel]` extra,
    tracing stays off (and `on` says how to install it)."""
    global _tracing
    env = environ if environ is not None else os.environ
    if traces == "off" or env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return "traces off"
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT")
    if traces == "auto" and not endpoint and exporter is None:
        return "traces off (no OTEL_EXPORTER_OTLP_ENDPOINT set)"
    if env.get("OTEL_TRACES_EXPORTER", "otlp").lower() == "none":
        return "traces off (OTEL_TRACES_EXPORTER=none)"
    try:
        from squadd.telemetry.otel import OtelTracing
    except ImportError as exc:
        return (f"traces off: the OpenTelemetry SDK is not installed ({exc}); install "
                "squadd[otel] to export them")
    shutdown()
    try:
        _tracing = OtelTracing(service_name=service_name, version=version,
                               capture_content=capture_content,
                               max_queue=max_queue, export_timeout_s=export_timeout_s,
                               redact=redact, exporter=exporter)
    except Exception as exc:  # a bad OTEL_* value must not keep squadd from serving
        return f"traces off: the OpenTelemetry SDK refused its settings: {exc}"
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    note = "" if protocol == "http/protobuf" else (
        f" (OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported: squadd[otel] ships the "
        "http/protobuf exporter, used instead)")
    return f"traces on: exported over OTLP/HTTP to {endpoint or 'the given exporter'}{note}"


def shutdown() -> None:
    """Export what is left (bounded by the export timeout) and turn tracing off (blocking)."""
    global _tracing
    tracing, _tracing = _tracing, None
    if tracing is not None:
        tracing.shutdown()
