"""Input from outside: JSON with a nesting limit and no NaN, unpaired surrogates refused or
mended, YAML/TOML documents bounded, file names shown as text."""

from __future__ import annotations

import os
import re

import pytest

from squadd.errors import UntrustedInputError
from squadd.untrusted import (
    MAX_JSON_DEPTH,
    check_document,
    has_surrogate,
    mend,
    parse_json,
    replace_spans,
    shown_name,
)


def test_parse_json_reads_ordinary_json() -> None:
    assert parse_json(b'{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}


def test_nesting_far_past_the_recursion_limit_is_an_error_not_a_crash() -> None:
    with pytest.raises(UntrustedInputError, match="nested deeper than"):
        parse_json("[" * 100_000 + "]" * 100_000)


def test_nesting_past_the_limit_is_refused_and_names_where() -> None:
    deep = '{"a": {"b": ' + "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH + "}}"
    with pytest.raises(UntrustedInputError, match=r"nested deeper than 100 levels \(at a\.b"):
        parse_json(deep)
    assert parse_json("[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1))


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", '{"t": NaN}'])
def test_nan_and_infinity_are_not_json_numbers(text: str) -> None:
    with pytest.raises(UntrustedInputError, match="not a JSON number"):
        parse_json(text)


def test_a_float_too_large_to_be_finite_is_refused() -> None:
    with pytest.raises(UntrustedInputError, match="too large"):
        parse_json('{"timeout": 1e400}')
    assert parse_json("1e308") == 1e308


def test_an_integer_too_long_to_convert_is_an_error() -> None:
    with pytest.raises(UntrustedInputError, match="digits"):
        parse_json("7" * 5000)


def test_bytes_that_are_not_utf8_are_refused() -> None:
    with pytest.raises(UntrustedInputError, match="not UTF-8"):
        parse_json(b'"\xff\xfe"')


def test_an_unpaired_surrogate_is_refused_naming_the_field() -> None:
    with pytest.raises(UntrustedInputError, match=r"at arguments\.title holds an unpaired"):
        parse_json('{"arguments": {"title": "\\ud800"}}')
    with pytest.raises(UntrustedInputError, match="the key"):
        parse_json('{"\\udc00": 1}')
    assert parse_json('"\\ud83d\\ude00"') == "\U0001f600"  # a pair is one character


def test_a_surrogate_is_found_however_it_is_written() -> None:
    # Upper-case escapes, raw UTF-8 surrogate bytes (json decodes them with surrogatepass),
    # and a lone surrogate character in str input: none may pass the quick check unseen.
    for text in ('{"k": "\\uD800"}', b'{"k": "\xed\xa0\x80"}', '{"k": "\ud800"}',
                 '{"k": ["\\uDbFf"]}'):
        with pytest.raises(UntrustedInputError, match="at k"):
            parse_json(text)
        assert "\ufffd" in str(parse_json(text, mend_surrogates=True))
    # Text that only looks like one (an escaped backslash) or that holds other characters.
    assert parse_json('{"k": "\\\\ud800"}') == {"k": "\\ud800"}
    assert parse_json('{"k": "caf\u00e9 \u2603 \\ud83d\\ude00 é"}'.encode()) == {
        "k": "café \u2603 \U0001f600 é"}


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = '{"code": "' + "[{" * 200 + '", "n": [[1]]}'
    assert parse_json(text, mend_surrogates=True) == {"code": "[{" * 200, "n": [[1]]}
    deep = '{"code": "' + "[" * 200 + '", "n": ' + "[" * 100 + "]" * 100 + "}"
    with pytest.raises(UntrustedInputError, match="nested deeper than 100 levels"):
        parse_json(deep)


def test_json_in_utf16_bytes_is_read_as_json_loads_reads_it() -> None:
    assert parse_json('{"a": "\u00e9"}'.encode("utf-16")) == {"a": "\u00e9"}
    assert parse_json(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}


def test_mending_replaces_unpaired_surrogates_everywhere() -> None:
    assert parse_json('{"\\ud800k": ["a\\udfffb"]}', mend_surrogates=True) == {
        "\ufffdk": ["a\ufffdb"]}
    assert mend({"x": ("\ud800",)}) == {"x": ("\ud800",)}  # tuples are not JSON: left as given
    assert has_surrogate("a\udcffb") and not has_surrogate("plain")


def test_check_document_refuses_non_finite_numbers_and_alias_bombs() -> None:
    with pytest.raises(UntrustedInputError, match=r"'parameters\.x\.maximum' = nan"):
        check_document({"parameters": {"x": {"maximum": float("nan")}}}, max_values=100)
    shared: list[object] = ["x"] * 9
    for _ in range(8):  # what YAML aliases build: nine references to the level below
        shared = [shared] * 9
    with pytest.raises(UntrustedInputError, match="expands to more than 1000 values"):
        check_document({"version": shared}, max_values=1000)


def test_shown_name_turns_undecodable_bytes_into_replacement_characters() -> None:
    assert shown_name(os.fsdecode(b"lead-\xff.md")) == "lead-\ufffd.md"
    assert shown_name("plain.md") == "plain.md"


@pytest.mark.parametrize(("text", "opening", "closing"), [
    ("a\n<!-- one\ntwo -->\nb", "<!--", "-->"),
    ("<!---->x<!-- -->y", "<!--", "-->"),
    ("<!-->still open\n-->z", "<!--", "-->"),          # `<!-->` does not close itself
    ("x<!-- never closed\n| a | b |", "<!--", "-->"),  # unclosed: left as text
    ("<!-- a --><!-- b\nc\n--> <!-- d", "<!--", "-->"),
    ("", "<!--", "-->"),
    ("Fenster (lead) (x(y) z) ((", "(", ")"),
])
def test_spans_are_replaced_as_the_lazy_pattern_does(text: str, opening: str,
                                                      closing: str) -> None:
    def replace(span: str) -> str:
        return f"[{span.count(chr(10))}]"

    lazy = re.sub(f"{re.escape(opening)}.*?{re.escape(closing)}",
                  lambda m: replace(m.group(0)), text, flags=re.DOTALL)
    assert replace_spans(text, opening, closing, replace) == lazy
