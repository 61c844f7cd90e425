"""RouteRequest: one model for the tool, the API body and the runtime, camelCase on the wire."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from squadd.contracts.routes import MAX_ROUTE_TIMEOUT_S, RouteRequest


def test_wire_names_and_python_names_build_the_same_request() -> None:
    by_alias = RouteRequest.model_validate({
        "task": "t", "targetAgent": "lead", "waitForResult": False, "sessionId": "s1",
        "availableTools": ["squad_*"], "timeoutSeconds": 5})
    by_name = RouteRequest(task="t", target_agent="lead", wait_for_result=False,
                           session_id="s1", available_tools=["squad_*"], timeout_s=5)
    assert by_alias == by_name
    assert by_alias.wire() == {"task": "t", "targetAgent": "lead", "waitForResult": False,
                               "sessionId": "s1", "availableTools": ["squad_*"],
                               "timeoutSeconds": 5.0}


def test_wire_leaves_out_what_was_not_given() -> None:
    assert RouteRequest(task="t").wire() == {"task": "t"}
    assert RouteRequest(task="t").target_agent == "auto"


def test_the_schema_offers_camel_case_fields_and_hides_requested_by() -> None:
    schema = RouteRequest.model_json_schema()
    assert list(schema["properties"]) == [
        "targetAgent", "task", "context", "priority", "waitForResult", "model", "sessionId",
        "availableTools", "timeoutSeconds", "isolation", "land"]
    assert schema["required"] == ["task"] and schema["additionalProperties"] is False
    assert "description" not in schema


@pytest.mark.parametrize("body, field", [
    ({"task": ""}, "task"),
    ({"task": "t", "timeoutSeconds": True}, "timeoutSeconds"),
    ({"task": "t", "timeoutSeconds": MAX_ROUTE_TIMEOUT_S + 1}, "timeoutSeconds"),
    ({"task": "t", "requestedBy": "a/b"}, "requestedBy"),
    ({"task": "t", "priority": "asap"}, "priority"),
    ({"task": "t", "surprise": 1}, "surprise"),
])
def test_bad_fields_are_refused_by_their_wire_name(body: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        RouteRequest.model_validate(body)
    assert [error["loc"][0] for error in caught.value.errors()] == [field]
