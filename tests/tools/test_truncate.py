"""Output limits: line and byte caps, UTF-8 safety, and the spill file."""

from __future__ import annotations

from squadd.state.layout import SquadLayout
from squadd.tools.truncate import cut, spill, truncation_note


def test_short_text_is_untouched() -> None:
    piece = cut("a\nb\n", max_lines=10, max_bytes=100)
    assert not piece.truncated and piece.text == "a\nb\n"


def test_line_limit_wins_when_lines_are_short() -> None:
    piece = cut("x\n" * 3000, max_lines=2000, max_bytes=51200)
    assert piece.truncated and piece.kept_lines == 2000 and piece.total_lines == 3000


def test_byte_limit_wins_when_lines_are_long() -> None:
    piece = cut(("y" * 1000 + "\n") * 100, max_lines=2000, max_bytes=51200)
    assert piece.truncated and piece.kept_bytes <= 51200 and piece.total_bytes == 100100


def test_cut_never_splits_a_utf8_character() -> None:
    piece = cut("é" * 100, max_lines=10, max_bytes=51)
    assert piece.truncated and piece.text == "é" * 25


def test_spill_writes_the_whole_text_and_the_note_names_it(layout: SquadLayout) -> None:
    text = "z" * 5000
    piece = cut(text, max_lines=10, max_bytes=1000)
    path = spill(layout, "s-9", "c-1", text)
    assert path.read_text(encoding="utf-8") == text
    view = piece.text + truncation_note(piece, path, layout)
    assert view.startswith("z" * 1000) and "1000 of 5000 bytes" in view
    assert ".squad/tool-output/s-9/c-1.txt" in view
