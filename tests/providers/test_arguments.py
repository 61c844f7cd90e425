"""Tool-call arguments as a model wrote them: broken, hostile or too deep, each becomes a
parse error the model is told about (never an exception), and bad text is mended."""

from __future__ import annotations

from squadd.providers.arguments import arguments_json, tool_call


def test_arguments_nested_past_any_recursion_limit_are_an_error_not_a_crash() -> None:
    call = tool_call("c1", "squad_decide", "[" * 100_000 + "]" * 100_000)
    assert call.arguments == {} and call.arguments_error is not None
    assert "nested deeper than" in call.arguments_error
    assert arguments_json(call) == "[" * 100_000 + "]" * 100_000  # sent back as written


def test_arguments_nested_past_the_limit_are_an_error_in_either_form() -> None:
    text = '{"title": ' + "[" * 150 + "]" * 150 + "}"
    assert "nested deeper than 100" in (tool_call("c", "t", text).arguments_error or "")
    nested: dict[str, object] = {}
    inner = nested
    for _ in range(150):  # an Anthropic-style object, already parsed
        inner["x"] = {}
        inner = inner["x"]  # type: ignore[assignment]
    deep = tool_call("c", "t", nested)
    assert deep.arguments == {} and "nested deeper than 100" in (deep.arguments_error or "")


def test_nan_infinity_and_overflowing_numbers_are_argument_errors() -> None:
    for raw in ('{"timeoutSeconds": NaN}', '{"t": -Infinity}', '{"t": 1e400}'):
        call = tool_call("c", "squad_route", raw)
        assert call.arguments == {} and call.arguments_error, raw


def test_unpaired_surrogates_from_the_model_are_mended_to_replacement_characters() -> None:
    call = tool_call("c", "squad_decide", '{"title": "half \\ud800 pair"}')
    assert call.arguments_error is None and call.arguments == {"title": "half \ufffd pair"}
    parsed = tool_call("c", "squad_decide", {"\udcffkey": ["\ud800"]})
    assert parsed.arguments == {"\ufffdkey": ["\ufffd"]}
    assert arguments_json(parsed).encode("utf-8")  # writable, e.g. to a transcript
