"""Output limits: line and byte caps, UTF-8 safety, and the spill file."""

from __future__ import annotations

from squadd.state.layout import SquadLayout
from squadd.tools.truncate import cut, limit_output


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


def test_limit_output_spills_the_whole_text(layout: SquadLayout) -> None:
    text = "z" * 5000
    view, path = limit_output(layout, "s-9", "c-1", text, max_lines=10, max_bytes=1000)
    assert path is not None and path.read_text(encoding="utf-8") == text
    assert view.startswith("z" * 1000) and "1000 of 5000 bytes" in view


def test_limit_output_writes_nothing_when_within_limits(layout: SquadLayout) -> None:
    view, path = limit_output(layout, "s-9", "c-1", "ok", max_lines=10, max_bytes=1000)
    assert (view, path) == ("ok", None)
    assert not (layout.root / "tool-output").exists()
