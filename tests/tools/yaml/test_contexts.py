"""The shell template engine refuses every evaluation context of bash's grammar
(`contexts.CONTEXTS`), at load time, with the context named; a generated template that
loads never executes any part of a value, checked with the real bash.

The property test builds templates from the grammar's productions (declarations and their
options, names and values; file-descriptor redirections; variable-naming builtins; arithmetic,
tests, indirection, subscripts), behind `builtin`/`command` prefixes and inside functions, and
fills them with values that would create a marker file if any part of them ran.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squadd.errors import TemplateError
from squadd.state.layout import SquadLayout
from squadd.tools.yaml.contexts import CONTEXTS
from squadd.tools.yaml.template import check_shell_template, substitute_shell
from tests.tools.custom_tools import call, shell_tool

DECLARERS = ["declare", "typeset", "local", "export", "readonly"]
PREFIXES = ["", "builtin ", "command ", "command -- "]
FORMS = [
    "{P}{D} {X}=1", "{P}{D} {X}", "{P}{D} v={X}", "{P}{D} -- {X}=", "{P}{D} -a v={X}",
    "{P}{D} {X} w=1", "{P}{D} v{X}=1", "v={X}; {P}{D} \"$v\"=1", "v={X}; {P}{D} w=\"$v\"",
    "v={X}; {P}{D} w=$v; echo \"${{w[0]}}\"",
    "echo x >&{X}", "echo x >&\"{X}\"", "echo x 2>&{X}", "cat <&{X}", "echo x {X}>/dev/null",
    "v={X}; echo x >&$v", "v={X}; echo x 1>&\"$v\"", "exec {X}>/dev/null",
    "{P}printf -v {X} %s 1", "{P}read {X} <<< 1", "{P}read -a {X} <<< 1",
    "{P}read -p {X} w <<< 1", "{P}mapfile -t {X} < /dev/null", "{P}readarray {X} </dev/null",
    "{P}getopts ab {X}", "{P}unset {X}", "{P}unset -v {X}", "{P}wait -p {X}",
    "v={X}; {P}read \"$v\" <<< 1", "v={X}; {P}printf -v \"$v\" x", "v={X}; {P}unset \"$v\"",
    "{P}test -v {X}", "[ -v {X} ]", "[[ -v {X} ]]", "{P}let {X}", "{P}let v={X}",
    "{P}eval {X}", "echo $(( {X} ))", "(( {X} ))", "[[ {X} -eq 1 ]]", "[[ 1 -lt {X} ]]",
    "echo $[{X}]", "v={X}; echo ${{!v}}", "v={X}; echo ${{v@P}}", "v={X}; echo \"${{!v}}\"",
    "v={X}; echo ${{!v:-d}}", "v={X}; (( v ))", "v={X}; echo ${{a[v]}}", "v={X}; echo ${{s:v}}",
    "v={X}; [[ $v -gt 0 ]]", "v={X}; printf 'a\\n' | {P}mapfile -C \"$v\" -c 1 q",
    "a[{X}]=1", "a=([{X}]=1)", "echo {X}", "echo \"{X}\"",
    "printf '%s\\n' {X}", "v={X}; echo \"$v\"", "{P}{D} w; w={X}; echo \"$w\"",
    "echo x > {X}.out", "[ {X} = y ]", "case {X} in y) echo y;; esac",
]
"""Productions of the grammar, with {P} a builtin prefix, {D} a declaring builtin and {X} the
parameter."""


def _hostile(marker: Path) -> list[str]:
    m = shlex.quote(str(marker))
    return [f"a[$(touch {m})]", f"('[$(touch {m})]=1')", f"([$(touch {m})]=1)",
            f"x[`touch {m}`]", f"$(touch {m})", "-n", "-i", f"1+a[$(touch {m})]",
            f"v[$(touch {m})]=1", f"\\u$(touch {m})", f"$(touch {m})>&2", "0", "1",
            f"a[$(touch {m})]=1 b", "PATH", f"b=([0]=$(touch {m}))"]


def _template(form: str, prefix: str, declarer: str, in_function: bool) -> str:
    body = form.replace("{P}", prefix).replace("{D}", declarer).replace("{{", "{").replace(
        "}}", "}")
    if declarer == "local" or in_function:
        return "f() {\n" + body + "\n}\nf"
    return body


@pytest.mark.slow
@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(form=st.sampled_from(FORMS), prefix=st.sampled_from(PREFIXES),
       declarer=st.sampled_from(DECLARERS), in_function=st.booleans(), data=st.data())
def test_no_generated_template_that_loads_executes_a_value(
        tmp_path: Path, form: str, prefix: str, declarer: str, in_function: bool,
        data: st.DataObject) -> None:
    marker = tmp_path / "MARKER"
    marker.unlink(missing_ok=True)  # tmp_path is shared by all examples
    template = _template(form, prefix, declarer, in_function)
    try:
        check_shell_template(template, ["X"])
    except TemplateError:
        return  # refused at load: nothing runs
    value = data.draw(st.sampled_from(_hostile(marker)))
    command = substitute_shell(template, {"X": value})
    subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, timeout=30,
                   check=False, stdin=subprocess.DEVNULL)
    assert not marker.exists(), f"{template!r} with {value!r} executed part of the value"


VARIANTS: dict[str, list[str]] = {
    "arithmetic": ["echo $(( {X} ))", "(( {X} > 1 ))", "echo $[{X}]",
                   "for ((i=0; i<{X}; i++)); do :; done", "v={X}; echo ${s:v}"],
    "arithmetic-test": ["[[ {X} -eq 1 ]]", "[[ 1 -ge {X} ]]", "[[ -v {X} ]]",
                        "v={X}; [[ $v -lt 2 ]]"],
    "code": ["eval {X}", "let {X}", "builtin eval {X}", "trap {X} EXIT", "source {X}",
             "mapfile -C {X} -c 1 a < f", "v={X}; mapfile -c 1 -C \"$v\" a < f"],
    "declaration": ["declare -i n={X}", "local -n r={X}", "typeset -a a={X}",
                    "v={X}; declare -i n=$v"],
    "variable-name": ["declare {X}=", "local {X}=", "typeset {X}=", "export {X}=",
                      "readonly {X}=", "builtin declare {X}=1", "command typeset {X}",
                      "printf -v {X} x", "read {X}", "read -a {X}", "mapfile {X}",
                      "readarray -t {X}", "getopts ab {X}", "unset {X}", "wait -p {X}",
                      "test -v {X}", "[ -v {X} ]", "v={X}; declare \"$v\"=1",
                      "v={X}; read \"$v\"", "v={X}; unset \"$v\""],
    "array-subscript": ["a[{X}]=1", "a=([{X}]=1)", "v={X}; echo ${a[v]}", "declare v={X}",
                        "local v={X}", "v={X}; typeset w=\"$v\""],
    "indirection": ["v={X}; echo ${!v}", "v={X}; echo ${v@P}", "v={X}; echo \"${!v:-x}\"",
                    "v={X}; echo ${a[@]@P}"],
    "file-descriptor": ["echo >&{X}", "echo >&\"{X}\"", "cat <&{X}", "echo 2>&{X}",
                        "echo {X}>f", "exec {X}>f", "v={X}; echo >&$v",
                        "v={X}; cat <&\"$v\""],
    "evaluated-variable": ["PATH={X}", "export PS4={X}", "IFS={X} read a b",
                           "v={X}; PROMPT_COMMAND=$v"],
    "command-name": ["{X}", "{X} --help", "env {X}", "builtin {X}", "command {X}",
                     "V={X}; $V"],
    "nested-code": ["sh -c {X}", "bash -c \"echo {X}\"", "python3 -c {X}",
                    "ssh host ls {X}", "echo {X} | sh"],
    "quoting": ["echo '{X}'", "echo $'{X}'", "echo `echo {X}`", "echo ${U:-{X}}",
                "cat <<EOF\n{X}\nEOF"],
}
"""Several templates per context of the grammar: each must be refused at load."""


def test_every_context_of_the_grammar_has_variants_here() -> None:
    assert set(VARIANTS) == set(CONTEXTS)


@pytest.mark.parametrize(("context", "template"),
                         [(c, t) for c, ts in VARIANTS.items() for t in ts])
def test_every_variant_of_every_context_is_refused_at_load(context: str,
                                                           template: str) -> None:
    with pytest.raises(TemplateError) as caught:
        check_shell_template(template, ["X"])
    assert "{X}" in str(caught.value)


@pytest.mark.parametrize("template", [
    "echo {X}", "printf '%s\\n' {X}", "echo \"a {X} b\"", "f() { local v; v={X}; echo "
    "\"$v\"; }; f", "export V={X}; printenv V", "echo x > {X}", "echo x 2>&1 {X}",
    "v={X}; echo \"$v\"", "[ {X} = y ] || echo no", "readonly R={X}; echo \"$R\""])
def test_data_contexts_still_load_and_pass_the_value_literally(template: str,
                                                               tmp_path: Path) -> None:
    check_shell_template(template, ["X"])
    value = "a[$(touch M)] ('[$(touch M)]=1') -n"
    done = subprocess.run(["bash", "-c", substitute_shell(template, {"X": value})],
                          cwd=tmp_path, capture_output=True, text=True, timeout=30,
                          check=False)
    assert not (tmp_path / "M").exists()
    assert value in done.stdout or (tmp_path / value).exists() or "no" in done.stdout


def _env_spec(variables: dict[str, str], **command: Any) -> dict[str, Any]:
    return {"description": "d", "tags": ["read"], "timeout": 30000,
            "parameters": {"X": {"type": "string", "description": "x"},
                           "N": {"type": "number", "description": "n"}},
            "environment": {"variables": variables}, **command}


@pytest.mark.parametrize(("variables", "command", "what"), [
    ({"N": "{X}"}, {"bash": "(( N > 1 )) && echo big"}, "((...))"),
    ({"N": "{X}"}, {"bash": "[[ $N -gt 1 ]]"}, "arithmetic test"),
    ({"V": "{X}"}, {"bash": "echo ${!V}"}, "indirection"),
    ({"V": "{X}"}, {"bash": "declare \"$V\"=1"}, "variable named or declared"),
    ({"V": "{X}"}, {"bash": "echo x >&$V"}, "file descriptor"),
    ({"V": "pre-{X}"}, {"steps": [{"name": "a", "bash": "echo a"},
                                  {"name": "b", "bash": "let V+1"}]}, "'let'"),
    ({"BASH_ENV": "{X}"}, {"bash": "echo hi"}, "BASH_ENV"),
    ({"LD_PRELOAD": "{X}"}, {"run": "true"}, "LD_PRELOAD"),
    ({"PS4": "{X}"}, {"bash": "set -x; true"}, "PS4"),
    ({"BASH_FUNC_f%%": "{X}"}, {"bash": "f"}, "BASH_FUNC_f%%"),
])
def test_a_value_reaching_a_command_through_the_environment_is_checked_as_an_assignment(
        variables: dict[str, str], command: dict[str, Any], what: str) -> None:
    with pytest.raises(ValueError) as caught:
        shell_tool(_env_spec(variables, **command))
    message = str(caught.value)
    assert "environment.variables." in message and what in message, message


@pytest.mark.parametrize("value", ["a[$(touch M)]", "('[$(touch M)]=1')", "$(touch M)"])
def test_an_environment_value_used_as_data_loads_and_never_runs(
        layout: SquadLayout, value: str) -> None:
    tool = shell_tool(_env_spec({"V": "{X}", "K": "{N}"},
                                bash="printf '%s\\n' \"$V\" \"$K\""))
    result = anyio.run(lambda: call(layout, tool, tool.name, {"X": value, "N": 5}))
    assert result.ok, result.text
    assert result.text.splitlines()[:2] == [value, "5"]
    assert not (layout.repo / "M").exists()
