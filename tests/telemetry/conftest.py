"""Fixtures for the telemetry tests: an in-memory span exporter, and tracing shut down after
each test whatever it configured."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from squadd import telemetry


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Where the test's spans go once it configures tracing with `exporter=`."""
    memory = InMemorySpanExporter()
    yield memory
    telemetry.shutdown()
