"""What every handler shares: bodies read with a nesting limit and without NaN or unpaired
surrogates (a 400 naming the problem, never a 500), whole-number query parameters, and JSON
answers that survive a NaN in the data."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from squadd.daemon.handler_context import (
    answering_errors,
    json_answer,
    object_body,
    query_count,
)


async def echo(request: Request) -> Response:
    return json_answer({"body": await object_body(request),
                        "count": query_count(request, "n", limit=512)})


async def not_finite(request: Request) -> Response:
    return json_answer({"nan": float("nan"), "inf": [float("inf")], "fine": 1.5})


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = Starlette(routes=[Route("/echo", answering_errors(echo), methods=["POST"]),
                            Route("/nan", answering_errors(not_finite), methods=["GET"])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as http:
        yield http


@pytest.mark.parametrize(("body", "problem"), [
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 100 levels"),
    (b'{"a": ' + b"[" * 150 + b"]" * 150 + b"}", "nested deeper than 100 levels (at a"),
    (b'{"t": NaN}', "NaN is not a JSON number"),
    (b'{"t": 1e400}', "too large"),
    (b'{"t": "\\ud800"}', "the string at t holds an unpaired surrogate"),
    (b'{"t": "\xff"}', "not UTF-8"),
    (b'{"t": ' + b"7" * 5000 + b"}", "digits"),
])
async def test_a_hostile_body_is_a_400_naming_the_problem(client: httpx.AsyncClient,
                                                          body: bytes, problem: str) -> None:
    response = await client.post("/echo", content=body)
    assert response.status_code == 400
    assert response.json()["error"].startswith("request body is not valid JSON: ")
    assert problem in response.json()["error"]


async def test_a_large_body_is_parsed_off_the_event_loop_all_the_same(
        client: httpx.AsyncClient) -> None:
    big = b'{"items": [' + b",".join([b'"x"'] * 40_000) + b"]}"
    response = await client.post("/echo", content=big)
    assert response.status_code == 200 and len(response.json()["body"]["items"]) == 40_000
    deep = b'{"pad": "' + b"x" * 100_000 + b'", "d": ' + b"[" * 200 + b"]" * 200 + b"}"
    assert (await client.post("/echo", content=deep)).status_code == 400


@pytest.mark.parametrize(("raw", "expected"), [
    ("7", 7), ("0007", 7), (str(2**64), 512), ("9" * 5000, 512), ("0", 0), ("000", 0)])
async def test_a_count_is_a_whole_number_clamped_to_its_limit(client: httpx.AsyncClient,
                                                              raw: str, expected: int) -> None:
    response = await client.post("/echo", params={"n": raw}, json={})
    assert response.status_code == 200 and response.json()["count"] == expected


@pytest.mark.parametrize("raw", ["-1", "1e3", "²", "٣", "nan", ""])
async def test_a_count_that_is_not_ascii_digits_is_a_422(client: httpx.AsyncClient,
                                                         raw: str) -> None:
    response = await client.post("/echo", params={"n": raw}, json={})
    assert response.status_code == 422 and "must be a whole number" in response.json()["error"]


async def test_nan_in_an_answer_is_written_as_null_not_a_500(client: httpx.AsyncClient) -> None:
    response = await client.get("/nan")
    assert response.status_code == 200
    assert response.json() == {"nan": None, "inf": [None], "fine": 1.5}
