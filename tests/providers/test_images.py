"""Images from tool results in each provider's request body (seen at the transport with
`httpx.MockTransport`), and the note that stands in for them where a provider takes none."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx

from squadd.contracts.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
    image_note,
)
from squadd.providers.anthropic import AnthropicProvider
from squadd.providers.command import render_prompt
from squadd.providers.openai import OpenAIProvider
from tests.providers._shared import FAST_RETRIES, TIMEOUT, ask

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff" + b"\x01" * 20).decode()


def _conversation() -> list[Message]:
    """A turn of two calls: the first returned an image, the second two; then the user."""
    request = ask()
    calls = [ToolCall(id="call_a", name="screenshot"), ToolCall(id="call_b", name="plot")]
    return [*request.messages,
            AssistantMessage(content="Looking.", tool_calls=calls, id="msg-1"),
            ToolMessage(tool_call_id="call_a", name="screenshot", content="the page",
                        images=[ImagePart(data=PNG, mime_type="image/png")]),
            ToolMessage(tool_call_id="call_b", name="plot", content="two plots",
                        images=[ImagePart(data=JPEG, mime_type="image/jpeg"),
                                ImagePart(data=PNG, mime_type="image/png")]),
            UserMessage(content="and now?")]


class Capture:
    def __init__(self, answer: dict[str, Any]):
        self.bodies: list[dict[str, Any]] = []
        self.answer = answer

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return httpx.Response(200, json=self.answer)


async def _openai_body(messages: list[Message]) -> dict[str, Any]:
    """The request body the OpenAI provider sends for `messages`."""
    capture = Capture({"choices": [{"message": {"role": "assistant", "content": "ok"},
                                    "finish_reason": "stop"}]})
    provider = OpenAIProvider(base_url="http://model.test/v1", model="m", timeout=TIMEOUT,
                              policy=FAST_RETRIES, transport=httpx.MockTransport(capture))
    request = ask()
    request.messages = messages
    await provider.complete(request)
    await provider.aclose()
    return capture.bodies[0]


async def test_openai_gets_images_as_data_urls_after_the_turns_tool_messages() -> None:
    messages = (await _openai_body(_conversation()))["messages"]
    assert [m["role"] for m in messages] == [
        "system", "user", "assistant", "tool", "tool", "user", "user"]
    # tool messages stay text, so every tool message answers its call before anything else
    assert messages[3] == {"role": "tool", "tool_call_id": "call_a", "content": "the page"}
    assert messages[4]["content"] == "two plots"
    parts = messages[5]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url"] * 3
    assert parts[0]["text"] == "Image returned by tool call call_a:"
    assert parts[1]["image_url"]["url"] == f"data:image/png;base64,{PNG}"
    assert parts[3]["image_url"]["url"] == f"data:image/jpeg;base64,{JPEG}"
    assert parts[4]["text"] == "Image returned by tool call call_b:"
    assert messages[6] == {"role": "user", "content": "and now?"}


async def test_openai_images_of_the_last_turn_are_sent_too() -> None:
    last = (await _openai_body(_conversation()[:-1]))["messages"][-1]
    assert last["role"] == "user" and len(last["content"]) == 6


async def test_anthropic_gets_image_blocks_inside_each_tool_result() -> None:
    capture = Capture({"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                       "usage": {"input_tokens": 1, "output_tokens": 1}})
    provider = AnthropicProvider(base_url="http://model.test", model="m", timeout=TIMEOUT,
                                 policy=FAST_RETRIES, transport=httpx.MockTransport(capture))
    request = ask()
    request.messages = _conversation()
    await provider.complete(request)
    await provider.aclose()
    messages = capture.bodies[0]["messages"]
    results = messages[2]["content"]
    assert [b["type"] for b in results] == ["tool_result", "tool_result", "text"]
    assert results[0]["content"] == [
        {"type": "text", "text": "the page"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    ]
    assert [b["type"] for b in results[1]["content"]] == ["text", "image", "image"]
    assert results[1]["content"][1]["source"]["media_type"] == "image/jpeg"


def test_a_provider_without_images_reads_a_short_note_instead() -> None:
    prompt = render_prompt(_conversation())
    assert PNG not in prompt and JPEG not in prompt
    assert "two plots\n[the tool also returned 2 images (image/jpeg, 23 bytes, image/png, " \
           "48 bytes); this model's provider is not sent images]" in prompt
    assert image_note([]) == ""
