"""Rich tool results: ``{"content": [text and image parts], "details": {...}}`` as a `ToolResult`.

A Python tool may return this shape instead of a string. Text parts become the text the model
reads, image parts go to providers that take images, and ``details`` goes to events and the
transcript only. `rich_result` is the one parser, for in-process and out-of-process tools alike.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from squadd.contracts.messages import ImagePart
from squadd.errors import RichResultError as RichResultError
from squadd.tools.base import ToolResult

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
MAX_IMAGES = 8
MAX_IMAGE_BYTES = 5_000_000
"""Largest image (decoded) sent on: the providers that take images refuse bigger ones."""
MAX_RESULT_IMAGE_BYTES = 10_000_000
"""All the images of one result together (they are kept in the transcript)."""
MAX_DETAILS_BYTES = 65_536
"""Details past this (as JSON) are kept as a note of their size in events and transcripts."""
_KEYS = {"content", "details"}


def is_rich(value: object) -> bool:
    """True for a dict in the rich shape: a `content` list of typed parts, maybe `details`."""
    if not isinstance(value, Mapping) or "content" not in value or not set(value) <= _KEYS:
        return False
    content = value["content"]
    return isinstance(content, list) and all(
        isinstance(part, Mapping) and part.get("type") in ("text", "image") for part in content)


def rich_result(value: Mapping[str, Any]) -> ToolResult:
    """The `ToolResult` of a rich-shaped value (check `is_rich` first); `RichResultError` when
    a part is malformed."""
    texts: list[str] = []
    images: list[ImagePart] = []
    for index, part in enumerate(value["content"]):
        where = f"content[{index}]"
        if part["type"] == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise RichResultError(f"{where}: a text part needs 'text' as a string")
            texts.append(text)
            continue
        images.append(_image(part, where))
    if len(images) > MAX_IMAGES:
        raise RichResultError(f"{len(images)} images in one result; at most {MAX_IMAGES}")
    total = sum(image.size for image in images)
    if total > MAX_RESULT_IMAGE_BYTES:
        raise RichResultError(f"the images of one result have {total} bytes together; at most "
                              f"{MAX_RESULT_IMAGE_BYTES}")
    details = value.get("details", {})
    if details is None:
        details = {}
    if not isinstance(details, Mapping):
        raise RichResultError(f"'details' must be an object, got {type(details).__name__}")
    return ToolResult(result_type="success", text="\n".join(texts), details=dict(details),
                      images=tuple(images))


def _image(part: Mapping[str, Any], where: str) -> ImagePart:
    mime = part.get("mimeType", part.get("mime_type"))
    if mime not in IMAGE_TYPES:
        raise RichResultError(f"{where}: mimeType {mime!r} is not one of {', '.join(IMAGE_TYPES)}")
    data = part.get("data")
    if not isinstance(data, str) or not data:
        raise RichResultError(f"{where}: an image part needs 'data' as base64 text")
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise RichResultError(f"{where}: 'data' is not valid base64") from None
    if len(decoded) > MAX_IMAGE_BYTES:
        raise RichResultError(f"{where}: the image has {len(decoded)} bytes; at most "
                              f"{MAX_IMAGE_BYTES} are sent to a model")
    return ImagePart(data=data, mime_type=str(mime))


def bounded_details(details: Mapping[str, Any]) -> dict[str, Any]:
    """`details` as events and transcripts keep them: plain JSON, or a note when too large."""
    try:
        text = json.dumps(details, default=str, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return {"unrecordable": True}
    size = len(text.encode("utf-8"))
    if size > MAX_DETAILS_BYTES:
        return {"omitted_bytes": size,
                "keys": sorted(str(k) for k in details)[:50]}
    plain: dict[str, Any] = json.loads(text)
    return plain
