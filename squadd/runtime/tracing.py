"""Turning traces on for a serving process (the daemon, a cluster worker) from its settings:
`[telemetry]` and the standard `OTEL_*` variables, the owner's secrets redacted from content;
and a session's model call as a span (`traced_completion`)."""

from __future__ import annotations

import os
from collections.abc import Callable

import structlog

from squadd import telemetry
from squadd._version import __version__
from squadd.config import TelemetrySettings
from squadd.contracts.messages import AssistantMessage, Completion
from squadd.providers.base import CompletionRequest, Provider
from squadd.telemetry import genai

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


async def traced_completion(provider: Provider, request: CompletionRequest, agent: str,
                            session_id: str) -> Completion:
    """`provider.complete` as a `chat {model}` span (GenAI conventions)."""
    model = request.model or provider.default_model
    with telemetry.span(f"{genai.CHAT} {model}".strip(), {
            genai.OPERATION: genai.CHAT, genai.PROVIDER: provider.name,
            genai.REQUEST_MODEL: model or None,
            genai.REQUEST_MAX_TOKENS: request.max_tokens,
            genai.AGENT_NAME: agent, genai.CONVERSATION_ID: session_id,
    }, kind="client") as span:
        if telemetry.capture_content():
            span.set(genai.INPUT_MESSAGES, genai.bounded(telemetry.redact(
                genai.messages_json(request.messages))))
            span.set(genai.SYSTEM_INSTRUCTIONS, genai.system_json(request.messages))
        completion = await provider.complete(request)
        usage = completion.usage
        span.set(genai.RESPONSE_MODEL, completion.model or model or None)
        finish = genai.FINISH_REASONS.get(completion.stop_reason, completion.stop_reason)
        span.set(genai.RESPONSE_FINISH_REASONS, [finish])
        span.set(genai.USAGE_INPUT, usage.input_tokens)
        span.set(genai.USAGE_OUTPUT, usage.output_tokens)
        span.set(genai.USAGE_CACHE_READ, usage.cache_read_input_tokens)
        span.set(genai.USAGE_CACHE_CREATION, usage.cache_creation_input_tokens)
        if telemetry.capture_content():
            reply = AssistantMessage(content=completion.text,
                                     tool_calls=completion.tool_calls)
            span.set(genai.OUTPUT_MESSAGES, genai.bounded(telemetry.redact(
                genai.messages_json([reply], finish_reason=finish))))
        return completion
