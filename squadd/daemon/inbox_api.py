"""The inbox over HTTP: `GET /v1/inbox`, `GET /v1/inbox/{id}`, `POST /v1/inbox/{id}`
(`{"action", "answer", "budget", "reason"}`), shared by the CLI, the dashboard and MCP.

`resume` of a budget item first reads the settings again, so a limit raised in the config
file counts. Each item is shown with its age and the commands that resolve it.
"""

from __future__ import annotations

import math
import time
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response

from squadd.config import load_settings
from squadd.daemon.handler_context import context_of, flag, json_answer, object_body
from squadd.errors import ApiError, ConfigError
from squadd.runtime.inbox import InboxError
from squadd.runtime.runtime import SquadRuntime
from squadd.state.inbox_items import InboxItem
from squadd.state.spending import shown_cost

FIELDS = {"action", "answer", "budget", "reason", "by"}


def shown_item(item: InboxItem, now: float | None = None) -> dict[str, Any]:
    """An item as every surface shows it: its record, age and the commands that resolve it."""
    data = item.model_dump(mode="json")
    data["age_s"] = round(item.age_s(time.time() if now is None else now), 3)
    data["commands"] = [_command(item, action) for action in item.actions] if item.open else []
    details = item.details
    if item.kind == "parked" and details.get("unit") == "usd":
        data["summary"] = (f"{shown_cost(details.get('spent'))} spent of "
                           f"{shown_cost(details.get('limit'))} ({details.get('setting')})")
    return data


def _command(item: InboxItem, action: str) -> str:
    if action == "answer":
        return f'squadd inbox answer {item.id} "TEXT"'
    if action == "approve" and item.kind == "parked":
        return f"squadd inbox approve {item.id} --budget +N"
    return f"squadd inbox {action} {item.id}"


async def list_items(request: Request) -> Response:
    runtime = context_of(request).runtime
    items = runtime.inbox.items(include_resolved=flag(request, "all", False))
    now = time.time()
    return json_answer({"items": [shown_item(item, now) for item in items]})


async def get_item(request: Request) -> Response:
    runtime = context_of(request).runtime
    item = runtime.inbox.get(request.path_params["item_id"])
    if item is None:
        raise ApiError(404, f"no inbox item {request.path_params['item_id']}: 'squadd inbox' "
                            "lists them")
    return json_answer({"item": shown_item(item)})


async def resolve_item(request: Request) -> Response:
    runtime = context_of(request).runtime
    item_id = request.path_params["item_id"]
    body = await object_body(request)
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise ApiError(422, f"unknown field(s) {', '.join(unknown)}: the body is "
                            '{"action": "approve|deny|answer|resume|dismiss", "answer": "...", '
                            '"budget": 5, "reason": "..."}')
    action = body.get("action")
    answer, reason, by = body.get("answer", ""), body.get("reason", ""), body.get("by", "person")
    budget = body.get("budget")
    if not isinstance(action, str):
        raise ApiError(422, "action: required: approve, deny, answer, resume or dismiss")
    for name, value in (("answer", answer), ("reason", reason), ("by", by)):
        if not isinstance(value, str):
            raise ApiError(422, f"{name}: must be a string")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int | float)
                               or not math.isfinite(budget)):
        raise ApiError(422, "budget: must be a number (US dollars, or tokens for a token "
                            "limit)")
    return json_answer({"item": shown_item(await resolve(runtime, item_id, action,
                                                         answer=answer, reason=reason,
                                                         budget=budget, by=by[:64]))})


async def resolve(runtime: SquadRuntime, item_id: str, action: str, *, answer: str = "",
                  reason: str = "", budget: float | None = None,
                  by: str = "person") -> InboxItem:
    """Resolve an item (ApiError for one that cannot be); a `resume` reads the limits again."""
    item = runtime.inbox.get(item_id)
    if item is not None and item.kind == "parked" and action == "resume":
        try:
            settings = await anyio.to_thread.run_sync(load_settings, runtime.layout.root)
        except ConfigError as exc:
            raise ApiError(422, f"the settings cannot be read again: {exc}") from None
        runtime.spending.reload(settings)
    try:
        return await runtime.inbox.resolve(item_id, action, answer=answer, reason=reason,
                                           budget=None if budget is None else float(budget),
                                           by=by)
    except InboxError as exc:
        status = 404 if runtime.inbox.get(item_id) is None else 409
        raise ApiError(status, str(exc)) from None


ROUTES = [
    ("GET", "/v1/inbox", list_items),
    ("GET", "/v1/inbox/{item_id}", get_item),
    ("POST", "/v1/inbox/{item_id}", resolve_item),
]
