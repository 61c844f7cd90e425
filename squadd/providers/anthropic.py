"""The `anthropic` provider: the Messages API, with `tool_use` and `tool_result` blocks.

System messages go in `system`; tool results travel as `tool_result` blocks of a user message,
and consecutive messages of one role are merged, as the API wants roles to alternate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from squadd.config import ProviderSettings
from squadd.contracts.messages import (
    AssistantMessage,
    Completion,
    Message,
    StopReason,
    ToolCall,
    ToolSpec,
)
from squadd.providers.arguments import tool_call
from squadd.providers.base import CompletionRequest, RetryCallback, TextJson, ToolsJson
from squadd.providers.http import (
    DEFAULT_MAX_RESPONSE_BYTES,
    JsonEndpoint,
    api_key_from,
    error_text,
    key_hint,
    malformed,
    timeouts,
    usage_from,
)
from squadd.providers.retry import RetryPolicy

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MODEL = "claude-sonnet-4-5"
DEFAULT_KEY_ENV = "ANTHROPIC_API_KEY"
API_VERSION = "2023-06-01"

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end",
    "stop_sequence": "end",
    "tool_use": "tool_calls",
    "max_tokens": "max_tokens",
}


class AnthropicProvider:
    """Completes turns through Anthropic's Messages API (or a server that speaks it)."""

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        api_key_env: str = DEFAULT_KEY_ENV,
        timeout: httpx.Timeout | None = None,
        policy: RetryPolicy | None = None,
        on_retry: RetryCallback | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        name: str = "anthropic",
    ):
        self.name = name
        self.default_model = model
        headers = {"accept": "application/json", "anthropic-version": API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        self.url = base_url.rstrip("/") + "/v1/messages"
        self._endpoint = JsonEndpoint(
            provider=name, url=self.url, headers=headers,
            timeout=timeout, policy=policy, on_retry=on_retry,
            key_hint=key_hint(api_key, api_key_env), transport=transport,
            max_response_bytes=max_response_bytes)
        self._tools_json = ToolsJson(_tool_specs)
        self._texts = TextJson()

    @classmethod
    def from_settings(
        cls,
        settings: ProviderSettings,
        *,
        on_retry: RetryCallback | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> AnthropicProvider:
        api_key, key_env = api_key_from(settings, DEFAULT_KEY_ENV, environ)
        return cls(model=settings.model or DEFAULT_MODEL,
                   base_url=settings.base_url or DEFAULT_BASE_URL,
                   api_key=api_key, api_key_env=key_env,
                   timeout=timeouts(settings), policy=RetryPolicy.from_settings(settings),
                   on_retry=on_retry, transport=transport,
                   max_response_bytes=settings.max_response_bytes)

    async def complete(self, request: CompletionRequest) -> Completion:
        model = request.model or self.default_model
        system, messages = to_anthropic_messages(request.messages)
        body: dict[str, Any] = {"model": model, "max_tokens": request.max_tokens,
                                "messages": messages}
        encoded: dict[str, str] = {}
        if system:  # the prompt, tens of kilobytes a turn: encoded once
            encoded["system"] = self._texts(system)
        if request.tools:
            encoded["tools"] = self._tools_json(request.tools)
        data = await self._endpoint.post(body, encoded)
        return self._completion(data, model)

    async def aclose(self) -> None:
        await self._endpoint.aclose()

    def _completion(self, data: dict[str, Any], model: str) -> Completion:
        if data.get("type") == "error":
            raise malformed(self.name, self.url, f"an error in a 2xx answer: "
                            f"{error_text(json.dumps(data).encode())}")
        blocks = data.get("content")
        if not isinstance(blocks, list):
            keys = ", ".join(sorted(data)[:10]) or "(none)"
            raise malformed(self.name, self.url, f"no 'content' list (keys: {keys})")
        texts: list[str] = []
        calls: list[ToolCall] = []
        for index, block in enumerate(blocks):
            if not isinstance(block, dict):
                raise malformed(self.name, self.url, f"content[{index}] is not an object")
            if block.get("type") == "text":
                texts.append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                name, call_id = block.get("name"), block.get("id")
                if not isinstance(name, str) or not name:
                    raise malformed(self.name, self.url, f"tool_use block {index} lacks its "
                                                         "'name'")
                # No id (a compatible server's answer): the session names the call.
                calls.append(tool_call(call_id if isinstance(call_id, str) else "", name,
                                       block.get("input")))
        reason = _STOP_REASONS.get(str(data.get("stop_reason")), "other")
        if calls and reason == "other":
            reason = "tool_calls"
        return Completion(
            text="".join(texts), tool_calls=calls, stop_reason=reason,
            usage=usage_from(data, "input_tokens", "output_tokens"),
            model=str(data.get("model") or model),
        )


def to_anthropic_messages(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The `system` text and the `messages` array for a conversation."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            if message.content:
                system.append(message.content)
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue  # the API refuses empty text blocks and empty messages
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return "\n\n".join(system), out


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        content: str | list[dict[str, Any]] = message.content
        if message.images:  # images travel inside the tool_result, after its text
            content = [{"type": "text", "text": message.content}] if message.content else []
            content += [{"type": "image", "source": {"type": "base64",
                                                     "media_type": image.mime_type,
                                                     "data": image.data}}
                        for image in message.images]
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id or "",
                                 "content": content}
        if message.is_error:
            block["is_error"] = True
        return [block]
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls if isinstance(message, AssistantMessage) else []:
        # Broken arguments cannot be sent back as `input` (it must be an object); the tool
        # result that follows tells the model what was wrong with them.
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name,
                       "input": call.arguments if call.arguments_error is None else {}})
    return blocks


def _tool_specs(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Anthropic's `tools` array for `specs`."""
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in specs]
