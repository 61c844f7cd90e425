"""The `openai` provider: any OpenAI-compatible `/chat/completions` endpoint, tools included.

OpenAI itself, Ollama, vLLM, llama.cpp server and LM Studio all speak it; `base_url` is the API
root that holds `/chat/completions` (e.g. `http://127.0.0.1:11434/v1` for Ollama).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from squadd.config import ProviderSettings
from squadd.contracts.messages import Completion, ImagePart, Message, StopReason, ToolCall
from squadd.errors import ProviderError
from squadd.providers.arguments import arguments_json, tool_call
from squadd.providers.base import (
    CompletionRequest,
    RetryCallback,
    TextJson,
    ToolsJson,
    tool_specs,
)
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

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4.1-mini"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "end",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "max_tokens",
}


class OpenAIProvider:
    """Completes turns through an OpenAI-compatible chat completions API."""

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
        name: str = "openai",
    ):
        self.name = name
        self.default_model = model
        headers = {"accept": "application/json"}
        if api_key:  # local servers (Ollama, vLLM) need none
            headers["authorization"] = f"Bearer {api_key}"
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._endpoint = JsonEndpoint(
            provider=name, url=self.url, headers=headers,
            timeout=timeout, policy=policy, on_retry=on_retry,
            key_hint=key_hint(api_key, api_key_env), transport=transport,
            max_response_bytes=max_response_bytes)
        self._tools_json = ToolsJson(tool_specs)
        self._texts = TextJson()

    @classmethod
    def from_settings(
        cls,
        settings: ProviderSettings,
        *,
        on_retry: RetryCallback | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> OpenAIProvider:
        api_key, key_env = api_key_from(settings, DEFAULT_KEY_ENV, environ)
        return cls(model=settings.model or DEFAULT_MODEL,
                   base_url=settings.base_url or DEFAULT_BASE_URL,
                   api_key=api_key, api_key_env=key_env,
                   timeout=timeouts(settings), policy=RetryPolicy.from_settings(settings),
                   on_retry=on_retry, transport=transport,
                   max_response_bytes=settings.max_response_bytes)

    async def complete(self, request: CompletionRequest) -> Completion:
        model = request.model or self.default_model
        body: dict[str, Any] = {"model": model, "max_tokens": request.max_tokens}
        encoded = {"messages": messages_json(request.messages, self._texts)}
        if request.tools:
            encoded["tools"] = self._tools_json(request.tools)
        data = await self._endpoint.post(body, encoded)
        return self._completion(data, model)

    async def aclose(self) -> None:
        await self._endpoint.aclose()

    def _completion(self, data: dict[str, Any], model: str) -> Completion:
        if "error" in data and "choices" not in data:
            raise malformed(self.name, self.url, f"an error in a 2xx answer: "
                            f"{error_text(json.dumps(data).encode())}")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise malformed(self.name, self.url, f"no 'choices' in {_keys(data)}")
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise malformed(self.name, self.url, "'choices[0]' has no 'message' object")
        text = message.get("content") or ""
        if not isinstance(text, str):
            raise malformed(self.name, self.url, "'choices[0].message.content' is not text")
        calls = [self._tool_call(i, raw) for i, raw in enumerate(message.get("tool_calls") or [])]
        reason = _FINISH_REASONS.get(str(choice.get("finish_reason")), "other")
        if calls and reason in ("end", "other"):
            reason = "tool_calls"  # some local servers say "stop" after a tool call
        return Completion(
            text=text, tool_calls=calls, stop_reason=reason,
            usage=usage_from(data, "prompt_tokens", "completion_tokens"),
            model=str(data.get("model") or model),
        )

    def _tool_call(self, index: int, raw: object) -> ToolCall:
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(raw, dict) or not isinstance(function, dict):
            raise malformed(self.name, self.url, f"tool call {index} has no 'function' object")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise malformed(self.name, self.url, f"tool call {index} has no function name")
        # No id (some local servers send none): the session names the call, unique in it.
        call_id = raw.get("id")
        return tool_call(call_id if isinstance(call_id, str) else "", name,
                         function.get("arguments"))


def to_openai_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """The `messages` array. Tool messages carry text only, so the images of a turn's tool
    results follow its last tool message as one user message of `image_url` data-URL parts."""
    out: list[dict[str, Any]] = []
    images: list[tuple[str, ImagePart]] = []
    for message in messages:
        if message.role != "tool" and images:
            out.append(_images_message(images))
            images = []
        out.append(_message(message))
        if message.role == "tool":
            images.extend((message.tool_call_id or "", image) for image in message.images)
    if images:
        out.append(_images_message(images))
    return out


def messages_json(messages: list[Message], texts: TextJson) -> str:
    """The `messages` array as JSON text, each long content (the system prompt) encoded once
    by `texts` and written last in its message."""
    parts: list[str] = []
    for item in to_openai_messages(messages):
        content = item.get("content")
        if isinstance(content, str) and len(content) >= texts.min_chars:
            rest = {key: value for key, value in item.items() if key != "content"}
            parts.append(texts.object_with(rest, "content", content))
        else:
            parts.append(json.dumps(item))
    return "[" + ", ".join(parts) + "]"


def _images_message(images: list[tuple[str, ImagePart]]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for call_id, image in images:
        parts.append({"type": "text", "text": f"Image returned by tool call {call_id}:"})
        parts.append({"type": "image_url",
                      "image_url": {"url": f"data:{image.mime_type};base64,{image.data}"}})
    return {"role": "user", "content": parts}


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        if not message.tool_call_id:
            raise ProviderError("openai: a tool result message has no tool_call_id",
                                provider="openai")
        return {"role": "tool", "tool_call_id": message.tool_call_id,
                "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": arguments_json(call)}}
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.content}



def _keys(data: dict[str, Any]) -> str:
    return "an object with keys " + (", ".join(sorted(data)[:10]) or "(none)")
