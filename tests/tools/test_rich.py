"""Rich results: the `{content: [...], details: {...}}` shape a Python tool may return, parsed
once, carried through the pipeline (text to the model, images on, details to events only)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from squadd import tool
from squadd.config import Settings, ToolsSettings
from squadd.contracts.events import BaseEvent, ToolCompleted
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolSet
from squadd.tools.invoke import CallOrigin, ToolInvoker
from squadd.tools.rich import (
    MAX_DETAILS_BYTES,
    RichResultError,
    bounded_details,
    is_rich,
    rich_result,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(32))).decode()


def test_only_the_exact_shape_counts_as_rich() -> None:
    assert is_rich({"content": [{"type": "text", "text": "x"}], "details": {}})
    assert is_rich({"content": []})
    assert not is_rich({"content": "text"})
    assert not is_rich({"content": [{"type": "text", "text": "x"}], "status": "ok"})
    assert not is_rich({"content": [{"type": "audio"}]})
    assert not is_rich(["content"])


def test_text_parts_join_images_and_details_are_kept_apart() -> None:
    result = rich_result({"content": [
        {"type": "text", "text": "first"},
        {"type": "image", "data": PNG, "mimeType": "image/png"},
        {"type": "text", "text": "second"}], "details": {"rows": 3}})
    assert result.ok and result.text == "first\nsecond"
    assert [(i.mime_type, i.data) for i in result.images] == [("image/png", PNG)]
    assert result.details == {"rows": 3}


@pytest.mark.parametrize(("part", "expected"), [
    ({"type": "image", "data": "not base64!", "mimeType": "image/png"}, "not valid base64"),
    ({"type": "image", "data": PNG, "mimeType": "image/tiff"}, "mimeType 'image/tiff'"),
    ({"type": "image", "mimeType": "image/png"}, "needs 'data'"),
    ({"type": "text", "text": 3}, "needs 'text' as a string"),
])
def test_a_bad_part_is_named(part: dict[str, Any], expected: str) -> None:
    with pytest.raises(RichResultError, match="content\\[1\\]") as caught:
        rich_result({"content": [{"type": "text", "text": "ok"}, part]})
    assert expected in str(caught.value)


def test_large_details_are_kept_as_a_note_of_their_size() -> None:
    big = {"blob": "x" * (MAX_DETAILS_BYTES + 1)}
    assert bounded_details(big)["omitted_bytes"] > MAX_DETAILS_BYTES
    assert bounded_details({"path": SquadLayout}) == {"path": str(SquadLayout)}


class Recorder:
    def __init__(self) -> None:
        self.events: list[BaseEvent] = []

    def publish(self, event: BaseEvent) -> None:
        self.events.append(event)


@tool
def snapshot(lines: int = 1) -> dict[str, Any]:
    """A picture, some text, and details for people."""
    return {"content": [{"type": "text", "text": "row\n" * lines},
                        {"type": "image", "data": PNG, "mimeType": "image/png"}],
            "details": {"rendered_by": "test", "lines": lines}}


@tool
def broken() -> dict[str, Any]:
    """A rich result with a bad image."""
    return {"content": [{"type": "image", "data": "%%%", "mimeType": "image/png"}]}


async def _invoke(layout: SquadLayout, name: str, arguments: dict[str, Any],
                  settings: Settings | None = None) -> tuple[Any, Recorder]:
    events = Recorder()
    invoker = ToolInvoker(layout, settings or Settings(), events)
    tools = ToolSet([snapshot.bound("snapshot", source="project", file=None),
                     broken.bound("broken", source="project", file=None)])
    result = await invoker.invoke(tools, ToolCall(id="c1", name=name, arguments=arguments),
                                  CallOrigin(session_id="s-1", agent="fenster"))
    return result, events


async def test_pipeline_keeps_images_and_sends_details_to_the_event(layout: SquadLayout) -> None:
    result, events = await _invoke(layout, "snapshot", {"lines": 2})
    assert result.ok and result.text == "row\nrow\n"
    assert [i.mime_type for i in result.images] == ["image/png"]
    [done] = [e for e in events.events if isinstance(e, ToolCompleted)]
    assert done.details == {"rendered_by": "test", "lines": 2}
    assert "rendered_by" not in result.text


async def test_truncated_rich_text_still_carries_its_images(layout: SquadLayout) -> None:
    settings = Settings(tools=ToolsSettings(max_output_lines=3))
    result, _ = await _invoke(layout, "snapshot", {"lines": 10}, settings)
    assert "[output truncated" in result.text and len(result.images) == 1
    assert result.details["full_output"]


async def test_a_malformed_rich_result_is_a_failure_naming_the_part(layout: SquadLayout) -> None:
    result, _ = await _invoke(layout, "broken", {})
    assert not result.ok
    assert result.text == ("broken returned a result squadd cannot use: content[0]: 'data' is "
                           "not valid base64")


def test_too_many_or_too_large_images_are_refused() -> None:
    from squadd.tools import rich

    part = {"type": "image", "data": PNG, "mimeType": "image/png"}
    with pytest.raises(RichResultError, match="9 images in one result; at most 8"):
        rich_result({"content": [part] * 9})
    big = base64.b64encode(b"\x00" * 3_000_000).decode()
    with pytest.raises(RichResultError, match="at most 5000000"):
        rich_result({"content": [{**part, "data": base64.b64encode(
            b"\x00" * (rich.MAX_IMAGE_BYTES + 1)).decode()}]})
    with pytest.raises(RichResultError, match="together; at most 10000000"):
        rich_result({"content": [{**part, "data": big}] * 4})
