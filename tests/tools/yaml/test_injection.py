"""No YAML shell template that loads can be made to run a command it does not contain.

Templates are drawn from a small grammar of bash constructs (arithmetic, tests, subscripts,
declarations, `eval`, nested shells, wrappers, assignments, arrays, pipes into a shell, ...);
values are hostile (command substitutions, quotes, newlines, subscripts, `-flags`, arrays of a
command). Every template that loads is run through the real invocation pipeline, in the
squad's repository; the marker file that any injected command would create never appears.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squadd.state.layout import SquadLayout
from squadd.tools.yaml.checks import check_spec
from squadd.tools.yaml.schema import ShellToolFile
from tests.tools.custom_tools import call, shell_tool

STATEMENTS = [
    "echo {X}", "printf '%s\\n' {X}", "cat -- {L}", "echo {L}", "(( {X} > 10 )) && echo big",
    "if (( {X} > 1 )); then echo big; fi", "echo $(( {X} + 1 ))", "echo $[{X}+1]",
    "for ((i=0; i<{X}; i++)); do :; done", "let n={X}", "[[ {X} -gt 1 ]]",
    "[[ {X} == a* ]]", "[ {X} -gt 1 ] 2>/dev/null", "[ -v {X} ]", "[[ -v {X} ]]",
    "a[{X}]=1", "declare -i n={X}", "typeset -i n={X}", "f() { local -i n={X}; }; f",
    "eval echo {X}", "source /dev/stdin <<< {X}", ". /dev/stdin <<< {X}", "FILES={L}",
    "V={X}", "export V={X}", "v={X}; (( v > 1 ))", "v={X}; echo ${arr[v]}",
    "v={X}; s=abc; echo ${s:v}", "set -- {X}; (( $1 > 0 ))",
    "for i in {L}; do (( i > 0 )); done", "declare -n r={X}; echo $r", "printf -v {X} x",
    "read {X} <<< x", "trap {X} EXIT", "PS4={X}; set -x; :", "OPTIND={X}", "RANDOM={X}",
    "v={X}; declare -i y; y=$v", "sh -c {X}", "bash -c {X}", "sh -c 'echo \"$1\"' sh {X}",
    "{X}", "{L}", "timeout 5 {L}", "env {L}", "nohup {L}", "echo {X} | sh",
    "bash <(echo {X})", "printf '%s' {X} | bash", "case {X} in a) echo a;; esac",
    "for f in {L}; do echo \"$f\"; done", "echo pre{X}post", "echo {X} > /dev/null",
    "x=( {L} ); echo ${#x[@]}", "x=([{X}]=1)", "echo {N}", "(( {N} > 1 )) && echo big",
    "echo $(( {N} * 2 ))", "python3 -c {X}", "sed {X} /dev/null", "awk {X} /dev/null",
    "test {X} = y", "echo \"$(echo {X})\"", "cat <<< {X}", "{ echo {X}; }", "( echo {X} )",
    "v={X}; [[ $v -eq 1 ]]", "v={X}; [ \"$v\" -eq 1 ] 2>/dev/null", "v={X}; echo $((v))",
    "v={X}; echo $(( $v ))", "x=({X}); echo ${x[0]}", "env V={X} printenv V",
    "xargs -0 echo {X} < /dev/null", "find . -maxdepth 0 -name {X}",
    "find . -maxdepth 0 -exec {X} \\;", "sudo -n {L}", "sh -c '(( $1 > 2 ))' sh {X}",
    "V={X} bash -c 'eval $V'", "echo {X} | xargs -I{} sh -c 'echo {}'",
    "echo {X} | awk '{system($0)}'", "echo {X} | sed 's/.*/&/e'",
    "printf '%s' {X} > f.sh; bash f.sh", "[[ -n {X} ]]\nfor ((i=0; i<{X}; i++)); do :; done",
    "[[ -n {X} ]]; (( {X} > 1 ))", "V={X}; $V", "sh -c \"$1\" sh {X}", "set -- {L}; \"$@\"",
    "$(echo {X})", "timeout 5 $V", "bash -c \"echo {X}\"", "echo \"a-{X}-b\"",
    "x=\"{X}\"; echo \"$x\"", "echo ${U:-\"{X}\"}", "eval \"echo {X}\"",
]


def _hostile(marker: Path) -> tuple[list[str], list[list[str]]]:
    m = shlex.quote(str(marker))
    strings = [f"$(touch {m})", f"`touch {m}`", f"; touch {m}", f"\ntouch {m}\n",
               f"' ; touch {m} ; '", f'"; touch {m}; "', f"a[$(touch {m})]",
               f"x[`touch {m}`]", f"touch {m}", "*", "-n", "--help", f"$((1)) $(touch {m})",
               f"1; touch {m}", f"0 ) ); touch {m}; ( (", f"]]; touch {m}; [[",
               f"a[$(touch {m})]=1", "${IFS}", f"1 $(touch {m})"]
    arrays = [["touch", str(marker)], [f"$(touch {m})"], ["-exec", "touch", str(marker), ";"],
              ["a", f"; touch {m}"], ["x", "touch", str(marker)], []]
    return strings, arrays


def _spec(template: str) -> dict[str, Any]:
    return {"description": "d", "tags": ["read"], "timeout": 20, "parameters": {
        "X": {"type": "string", "description": "x"},
        "L": {"type": "array", "description": "l"},
        "N": {"type": "number", "description": "n"}}, "bash": template}


@pytest.mark.slow
@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_template_that_loads_never_runs_a_command_a_value_carries(
        layout: SquadLayout, data: st.DataObject) -> None:
    marker = layout.repo / "MARKER"
    marker.unlink(missing_ok=True)  # the fixture is shared by all examples
    strings, arrays = _hostile(marker)
    parts = data.draw(st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=3))
    template = data.draw(st.sampled_from(["; ", "\n", " && "])).join(parts)
    try:
        tool = shell_tool(_spec(template))
    except ValueError:
        return  # refused at load: nothing can run
    values = {"X": data.draw(st.sampled_from(strings)),
              "L": data.draw(st.sampled_from(arrays)),
              "N": data.draw(st.one_of(st.integers(-5, 50), st.sampled_from([1.5, -0.0])))}
    anyio.run(lambda: call(layout, tool, tool.name, values))
    assert not marker.exists(), f"{template!r} with {values!r} ran an injected command"


def _refusal(template: str) -> str:
    spec = ShellToolFile.model_validate(_spec(template))
    with pytest.raises(ValueError) as caught:
        check_spec(spec)
    return str(caught.value)


@pytest.mark.parametrize("template, what", [
    ("if (( {X} > 10 )); then echo big; fi", "arithmetic context"),
    ("echo $(( {X} + 1 ))", "arithmetic context"),
    ("echo $[{X}+1]", "arithmetic context"),
    ("for ((i=0; i<{X}; i++)); do :; done", "arithmetic context"),
    ("let n={X}", "'let'"),
    ("[[ {X} -ge 1 ]]", "arithmetic test in [[ ... ]]"),
    ("[[ -v {X} ]]", "arithmetic test in [[ ... ]]"),
    ("[ -v {X} ]", "'[ -v'"),
    ("a[{X}]=1", "array subscript a[...]="),
    ("x=([{X}]=1)", "array subscript"),
    ("declare -i n={X}", "'declare -i'"),
    ("typeset -i n={X}", "'typeset -i'"),
    ("f() { local -i n={X}; }; f", "'local -i'"),
    ("declare -n r={X}", "'declare -n'"),
    ("eval echo {X}", "'eval'"),
    ("source {X}", "'source'"),
    (". {X}", "'.'"),
    ("trap {X} EXIT", "'trap'"),
    ("n={X}; (( n > 10 ))", "((...))"),
    ("n={X}; echo ${a[n]}", "array subscript ${name[...]}"),
    ("FILES={L}; ls $FILES", "cannot be separate words"),
    ("ls --file={L}", "cannot be separate words"),
    ("sh -c {X}", "code that 'sh' runs"),
    ("bash -lc {X}", "code that 'bash' runs"),
    ("python3 -c {X}", "code that 'python' runs"),
    ("echo {X} | sh", "'sh' reading code from its input"),
    ("bash <(echo {X})", "'bash' reading code from its input"),
    ("ssh host ls {X}", "joins its arguments"),
    ("{X} --version", "the command that runs"),
    ("timeout 5 {L}", "before the command that 'timeout' runs"),
    ("printf -v {X} '%s' 1", "names a variable"),
    ("read -r {X} <<< 1", "names a variable"),
    ("PS4={X}; set -x", "assigned to PS4"),
    ("sh -c '(( $1 > 2 ))' sh {X}", "((...)) in the code 'sh' runs"),
    ("V={X} bash -c 'eval $V'", "'eval' in the code 'bash' runs"),
    ("echo {X} | xargs -I{} sh -c 'echo {}'", "'xargs -I'"),
    ("echo {X} | awk '{system($0)}'", "awk program that runs commands"),
    ("echo {X} | sed 's/.*/&/e'", "sed script that runs commands"),
    ("printf '%s' {X} > f.sh; bash f.sh", "'bash' running f.sh, which the template writes"),
    ("[[ -n {X} ]]\nfor ((i=0; i<{X}; i++)); do :; done", "((...))"),
    ("V={X}; $V", "a command named by an expansion ($V)"),
    ("sh -c '$1' sh {X}", "a command named by an expansion ($1) in the code 'sh' runs"),
    ("$(echo {X})", "a command named by an expansion"),
    ('bash -c "echo {X}"', "code that 'bash' runs"),
    ('echo "{L}"', "cannot be separate words"),
])
def test_every_evaluation_context_is_refused_at_load_with_the_construct_named(
        template: str, what: str) -> None:
    message = _refusal(template)
    assert re.search(r"\{[XLN]\}", message) and what in message, message


def test_the_loader_names_the_file_and_the_construct(layout: SquadLayout) -> None:
    from squadd.errors import ShellToolError
    from squadd.tools.yaml.files import load_shell_file
    path = layout.root / "tools" / "count.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("description: d\nparameters:\n  COUNT: {type: string, description: c}\n"
                    "bash: 'if (( {COUNT} > 10 )); then echo big; fi'\n", encoding="utf-8")
    with pytest.raises(ShellToolError) as caught:
        load_shell_file(path)
    assert str(path) in str(caught.value) and "{COUNT}" in str(caught.value)
    assert "arithmetic" in str(caught.value)


@pytest.mark.parametrize("template, values, expected", [
    ("if (( {N} > 10 )); then echo big; else echo small; fi", {"N": 11}, "big\n"),
    ("echo $(( {N} * 2 ))", {"N": 21}, "42\n"),
    ("sh -c 'printf \"%s|\" \"$@\"' sh {L}", {"L": ["a b", "$(x)"]}, "a b|$(x)|"),
    ("for f in {L}; do printf '%s;' \"$f\"; done", {"L": ["*", "; ls"]}, "*;; ls;"),
    ("case {X} in a*) echo starts-with-a;; esac", {"X": "a$(x)"}, "starts-with-a\n"),
    ("[[ {X} == *x* ]] && echo has-x", {"X": "`x`"}, "has-x\n"),
    ("env V={X} printenv V", {"X": "$(id)"}, "$(id)\n"),
    ("timeout 5 printf '%s' {X}", {"X": "-n"}, "-n"),
])
async def test_safe_uses_still_load_and_pass_values_as_data(
        layout: SquadLayout, template: str, values: dict[str, Any], expected: str) -> None:
    params = {name: {"type": {"N": "number", "L": "array"}.get(name, "string"),
                     "description": name} for name in values}
    tool = shell_tool({"description": "d", "tags": ["read"], "parameters": params,
                       "bash": template})
    result = await call(layout, tool, tool.name, values)
    assert result.ok and result.text.rstrip("\n") == expected.rstrip("\n"), result.text
