"""Tracing on the OpenTelemetry SDK (the `squadd[otel]` extra), imported only once tracing is
turned on: a tracer provider of squadd's own (the global one is left to the application), the
resource, sampler and exporter from the standard `OTEL_*` variables, and a batch processor that
exports from its own thread and drops spans when its queue is full rather than wait.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import anyio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("squadd.telemetry")

_KINDS = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT, "server": SpanKind.SERVER}
_PROPAGATOR = TraceContextTextMapPropagator()


class _Span:
    def __init__(self, span: trace.Span):
        self._span = span

    def set(self, key: str, value: Any) -> None:
        if value is not None:
            self._span.set_attribute(key, value)

    def fail(self, error_type: str, message: str = "") -> None:
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR, message[:500] or None))


class OtelTracing:
    def __init__(self, *, service_name: str, version: str, capture_content: bool,
                 max_queue: int,
                 export_timeout_s: float, redact: Callable[[str], str] | None,
                 exporter: SpanExporter | None = None):
        attributes: dict[str, str] = {"service.version": version}
        if not os.environ.get("OTEL_SERVICE_NAME"):
            attributes[SERVICE_NAME] = service_name
        # `create` reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; the provider reads
        # OTEL_TRACES_SAMPLER (and its argument); the exporter OTEL_EXPORTER_OTLP_*.
        self.provider = TracerProvider(resource=Resource.create(attributes))
        self.exporter = exporter if exporter is not None else OTLPSpanExporter(
            timeout=export_timeout_s)
        self.provider.add_span_processor(BatchSpanProcessor(
            self.exporter, max_queue_size=max_queue, max_export_batch_size=min(512, max_queue),
            export_timeout_millis=int(export_timeout_s * 1000)))
        self.tracer = self.provider.get_tracer("squadd", version)
        self.capture_content = capture_content
        self.redact: Callable[[str], str] = redact or (lambda text: text)
        self.export_timeout_s = export_timeout_s

    @contextlib.contextmanager
    def span(self, name: str, attributes: Mapping[str, Any], kind: str) -> Iterator[_Span]:
        given = {k: v for k, v in attributes.items() if v is not None}
        with self.tracer.start_as_current_span(
                name, kind=_KINDS.get(kind, SpanKind.INTERNAL), attributes=given,
                record_exception=False, set_status_on_exception=False) as current:
            wrapped = _Span(current)
            try:
                yield wrapped
            except anyio.get_cancelled_exc_class():
                wrapped.fail("cancelled")
                raise
            except BaseException as exc:
                wrapped.fail(type(exc).__qualname__, str(exc))
                raise

    def traceparent(self) -> str | None:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        return carrier.get("traceparent")

    @contextlib.contextmanager
    def continued(self, parent: str) -> Iterator[None]:
        context = _PROPAGATOR.extract({"traceparent": parent})
        if not trace.get_current_span(context).get_span_context().is_valid:
            yield  # a malformed traceparent: start a trace of our own
            return
        token = otel_context.attach(context)
        try:
            yield
        finally:
            otel_context.detach(token)

    def capture(self) -> object:
        return otel_context.get_current()

    @contextlib.contextmanager
    def resumed(self, captured: object) -> Iterator[None]:
        token = otel_context.attach(captured)  # type: ignore[arg-type]
        try:
            yield
        finally:
            otel_context.detach(token)

    def shutdown(self) -> None:
        try:
            self.provider.force_flush(int(self.export_timeout_s * 1000))
            self.provider.shutdown()
        except Exception:  # exporting must never fail a stop either
            log.warning("traces not flushed at shutdown", exc_info=True)
