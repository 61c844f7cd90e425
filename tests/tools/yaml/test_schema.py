"""YAML tool files that are hostile rather than wrong: NaN or infinity anywhere, alias bombs,
nesting deep enough to exhaust the parser. Each is a `ShellToolError` naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from squadd.errors import ShellToolError
from squadd.tools.yaml.files import load_shell_file

BOMB = ("description: d\nbash: echo\ndefault-parameters: {}\nversion: &h [&g [&f [&e [&d [&c "
        "[&b [&a [x,x,x,x,x,x,x,x,x], *a,*a,*a,*a,*a,*a,*a,*a], *b,*b,*b,*b,*b,*b,*b,*b], *c,*c,"
        "*c,*c,*c,*c,*c,*c], *d,*d,*d,*d,*d,*d,*d,*d], *e,*e,*e,*e,*e,*e,*e,*e], *f,*f,*f,*f,*f,"
        "*f,*f,*f], *g,*g,*g,*g,*g,*g,*g,*g]\n")


def _load(tmp_path: Path, text: str) -> ShellToolError:
    path = tmp_path / "tool.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ShellToolError) as caught:
        load_shell_file(path)
    assert str(caught.value).startswith(f"{path}: ")
    return caught.value


@pytest.mark.parametrize(("yaml", "where"), [
    ("timeout: .nan", "'timeout' = nan"),
    ("timeout: .inf", "'timeout' = inf"),
    ("parameters:\n  N:\n    description: n\n    type: number\n    validation: {minimum: -.inf}",
     "'parameters.N.validation.minimum' = -inf"),
    ("parameters:\n  N:\n    description: n\n    type: number\n    default: .nan",
     "'parameters.N.default' = nan"),
])
def test_nan_or_infinity_anywhere_is_refused_naming_the_key(tmp_path: Path, yaml: str,
                                                            where: str) -> None:
    error = _load(tmp_path, f"description: d\nbash: echo {{N}}\n{yaml}\n")
    assert where in str(error) and "not a finite number" in str(error)


def test_an_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    error = _load(tmp_path, BOMB)  # expanded, it would take minutes and gigabytes
    assert "expands to more than" in str(error)


def test_nesting_past_the_parser_is_refused_not_raised(tmp_path: Path) -> None:
    error = _load(tmp_path, "description: " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert "nested too deeply" in str(error)
