"""Streamed output: secrets redacted across chunk boundaries, heads kept, parts assembled."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from squadd.tools.commands.output import Block, OutputSink, StreamRedactor, assemble, render
from squadd.tools.redaction import redact


@settings(max_examples=300, deadline=None)
@given(
    before=st.binary(max_size=50), after=st.binary(max_size=50),
    secret=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=6),
)
def test_redaction_is_the_same_however_the_stream_is_cut(
        before: bytes, after: bytes, secret: str, cuts: list[int]) -> None:
    data = before + secret.encode() + after + secret.encode()
    expected = data.replace(secret.encode(), b"[secret:S]")
    redactor = StreamRedactor({"S": secret})
    out = b""
    position = 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        out += redactor.feed(data[position:cut])
        position = cut
    out += redactor.feed(data[position:]) + redactor.flush()
    if secret.encode() not in b"[secret:S]":
        assert secret.encode() not in out
    assert out == expected


def test_longest_secret_wins_like_the_pipeline() -> None:
    secrets = {"A": "abc", "B": "abcdef"}
    redactor = StreamRedactor(secrets)
    out = redactor.feed(b"abc abcd") + redactor.feed(b"ef!") + redactor.flush()
    assert out.decode() == redact("abc abcdef!", secrets) == "[secret:A] [secret:B]!"


async def test_sink_keeps_only_the_head_and_counts_everything(tmp_path: Path) -> None:
    sink = OutputSink(tmp_path / "part", {"T": "tok"}, head_bytes=10)
    await sink.open()
    await sink.write(b"line tok 1\nline 2\nlast")
    await sink.close()
    assert (tmp_path / "part").read_bytes() == b"line [secret:T] 1\nline 2\nlast"
    assert sink.head_text() == "line [secr" and not sink.complete
    assert sink.total_lines == 2 and sink.lines == 3


async def test_assemble_joins_parts_with_headers(tmp_path: Path) -> None:
    sinks = []
    for index, text in enumerate([b"one\n", b"two"]):
        sink = OutputSink(tmp_path / f"p{index}", {}, head_bytes=100)
        await sink.open()
        await sink.write(text)
        await sink.close()
        sinks.append(sink)
    blocks = [Block("[step a] exit 0", sinks[0]), Block("[step b] exit 0", sinks[1]),
              Block("[step c] skipped")]
    text, complete, total_bytes, total_lines = render(blocks)
    target = tmp_path / "all.txt"
    assemble(blocks, target, tmp_path / "scratch")
    assert complete and text == target.read_text()
    assert text == "[step a] exit 0\none\n[step b] exit 0\ntwo\n[step c] skipped\n"
    assert total_bytes == len(text.encode()) and total_lines == 5
