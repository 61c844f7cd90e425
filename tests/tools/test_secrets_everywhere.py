"""A secret never leaves any tool, whichever tool printed it and in whichever common encoding;
and a scoped variable reaches no tool but the ones that declare it, whatever kind of tool.
Real tools through the real pipeline: the built-in `read`, `grep` and `bash`, YAML tools,
Python tool files run in their worker process, and the squad tools."""

from __future__ import annotations

import base64
import textwrap
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from squadd.config import Settings
from squadd.contracts.events import ToolCompleted, ToolStarted, ToolUpdated
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.tools.base import Tool, ToolResult, ToolSet
from squadd.tools.builtin import workspace_tools
from squadd.tools.invoke import CallOrigin, ToolInvoker
from squadd.tools.redaction import forms_of, redact
from squadd.tools.secrets import SecretRegistry
from squadd.tools.squad import file_tools
from squadd.tools.variables import SquadVariables
from tests.tools.custom_tools import Recorder, discover, shell_tool

SECRET = "tok-9f8e/7d6c+5b4a 3210=="
NAME = "DEPLOY_TOKEN"
DATA = SECRET.encode()


def _encodings() -> dict[str, str]:
    """The secret as tools commonly print it."""
    shown = {
        "plain": f"token={SECRET};",
        "hex": DATA.hex(), "HEX": DATA.hex().upper(),
        "url": urllib.parse.quote(SECRET, safe=""),
        "url-lower": urllib.parse.quote(SECRET, safe="").replace("%2F", "%2f"),
        "url-plus": urllib.parse.quote_plus(SECRET),
        "split": SECRET[:9] + "\n" + SECRET[9:],
        "split-crlf-indented": SECRET[:5] + "\r\n    " + SECRET[5:],
        "split-continued": SECRET[:12] + "\\\n" + SECRET[12:],
    }
    for shift in range(3):
        blob = b"p" * shift + DATA + b"suffix"
        shown[f"base64-{shift}"] = base64.b64encode(blob).decode()
        shown[f"base64url-{shift}"] = base64.urlsafe_b64encode(blob).decode()
    # As `base64` prints a long blob: wrapped at 76 columns.
    wrapped = base64.b64encode(b"x" * 70 + DATA * 3).decode()
    shown["base64-wrapped"] = "\n".join(wrapped[i:i + 76] for i in range(0, len(wrapped), 76))
    return shown


def _leaks(text: str) -> list[str]:
    """The forms of the secret still in `text` (the split ones with their breaks taken out)."""
    joined = text.replace("\\\n", "").replace("\r\n", "\n")
    joined = "\n".join(line.lstrip(" ") for line in joined.split("\n")).replace("\n", "")
    return [form for form, _, fold in forms_of(SECRET)
            if form in joined or (fold and form.lower() in joined.lower())]


@pytest.mark.parametrize("how", sorted(_encodings()))
def test_each_encoding_is_redacted(how: str) -> None:
    text = f"before {_encodings()[how]} after"
    out = redact(text, {NAME: SECRET})
    assert "[secret:DEPLOY_TOKEN" in out and _leaks(out) == [], out
    assert out.startswith("before ") and out.endswith(" after")


def test_short_values_and_ordinary_text_are_left_alone() -> None:
    text = "abc 616263 YWJj %61%62%63 a\nbc plain words"
    assert redact(text, {"SHORT": "abc"}) == text.replace("abc", "[secret:SHORT]", 1)
    assert redact("nothing to see\nhere", {NAME: SECRET}) == "nothing to see\nhere"


def _python_tool(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "envtool.py").write_text(textwrap.dedent('''
        import os
        import subprocess

        from squadd import tool


        @tool
        def env_of(name: str) -> str:
            """The value of an environment variable, seen in-process and by a child process."""
            child = subprocess.run(["printenv", name], capture_output=True, text=True)
            return f"inside={os.environ.get(name, 'unset')} child={child.stdout.strip() or 'unset'}"
    ''').lstrip(), encoding="utf-8")


class Harness:
    """One invoker with the daemon's resolver and registry, and every kind of tool."""

    def __init__(self, layout: SquadLayout, extra: list[Tool[Any]]):
        self.layout = layout
        self.sink = Recorder()
        settings = Settings().model_copy(update={"tools": Settings().tools.model_copy(
            update={"approvals": {"bash": "allow"}})})
        self.registry = SecretRegistry()
        self.invoker = ToolInvoker(layout, settings, self.sink, variables=SquadVariables(
            layout, settings, registry=self.registry))
        python = discover(layout).tools
        self.tools = ToolSet([*workspace_tools(settings), *file_tools(layout, settings),
                              *python, *extra])
        self.n = 0

    async def __call__(self, tool: str, **arguments: Any) -> ToolResult:
        self.n += 1
        return await self.invoker.invoke(self.tools, ToolCall(
            id=f"call_{self.n}", name=tool, arguments=arguments),
            CallOrigin(session_id="s-1", agent="fenster"))


DECLARING = {"description": "Deploy", "bash": "echo deploying", "tags": ["run"],
             "variables": [{"name": NAME, "type": "secret"}]}
PRINTER = {"description": "Print a file", "bash": "cat {path}", "tags": ["read"],
           "parameters": {"path": {"type": "string", "description": "the file"}}}


async def test_a_secret_printed_by_any_tool_in_any_encoding_never_leaves_it(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    """The declaring tool never runs: its declaration alone makes the secret known."""
    monkeypatch.setenv(NAME, SECRET)
    repo = layout.repo
    _python_tool(layout.tools_dir)
    encodings = _encodings()
    (repo / "leak.txt").write_text("\n".join(f"{k}: {v}" for k, v in encodings.items()) + "\n")
    here = Harness(layout, [shell_tool(DECLARING, name="deploy"),
                            shell_tool(PRINTER, name="printer")])
    results = {
        "read": await here("read", path="leak.txt"),
        "grep": await here("grep", pattern="base64|hex|url|plain|split|tok|HEX|3210"),
        "bash": await here("bash", command=(
            f"cat leak.txt; printf %s \"${NAME}\" | base64; printf %s \"${NAME}\" | xxd -p; "
            f"echo \"${NAME}\"")),
        "printer": await here("printer", path="leak.txt"),
        "python": await here("envtool", name=NAME),
    }
    for tool, result in results.items():
        assert result.ok, (tool, result.text)
        assert "[secret:DEPLOY_TOKEN" in result.text, tool
        assert _leaks(result.text) == [], (tool, result.text)
    # A squad tool records what the model wrote: a secret in it is redacted before it lands.
    decided = await here("squad_decide", title="Deploy notes", agentName="fenster",
                         body=f"use {SECRET} and {base64.b64encode(DATA).decode()}")
    assert decided.ok, decided.text
    inbox = "".join(p.read_text() for p in layout.inbox_dir.iterdir())
    assert _leaks(inbox) == [] and "[secret:DEPLOY_TOKEN]" in inbox
    # Nor do the events, the spill files or the arguments shown.
    for event in here.sink.events:
        shown = event.model_dump_json() if hasattr(event, "model_dump_json") else str(event)
        assert _leaks(shown.encode().decode("unicode_escape")) == [], type(event).__name__
    assert here.sink.of(ToolStarted) and here.sink.of(ToolCompleted)
    assert [e for e in here.sink.of(ToolUpdated) if e.tool == "bash"]
    spilled = list((layout.root / "run").rglob("tool-output/**/*"))
    for path in spilled:
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


@pytest.mark.parametrize("scoped", [True, False])
async def test_a_scoped_variable_reaches_only_the_tools_that_declare_it(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch, scoped: bool) -> None:
    """Every kind of tool that does not declare it: built-in bash, another YAML tool, a Python
    tool (in its process and in a child it starts). Unscoped, each of them sees it."""
    value = "eu-west-prod-7781"
    monkeypatch.setenv("DEPLOY_TARGET", value)
    _python_tool(layout.tools_dir)
    declaring = {"description": "Deploy", "bash": "printenv DEPLOY_TARGET || echo unset",
                 "tags": ["run"],
                 "variables": [{"name": "DEPLOY_TARGET", "scoped": scoped}]}
    peek = {"description": "Peek", "bash": "printenv DEPLOY_TARGET || echo unset",
            "tags": ["read"]}
    here = Harness(layout, [shell_tool(declaring, name="deploy"),
                            shell_tool(peek, name="peek")])
    assert (await here("deploy")).text.strip() == value
    seen = {
        "bash": (await here("bash", command="printenv DEPLOY_TARGET || echo unset")).text,
        "bash-env": (await here("bash", command="env | grep DEPLOY_TARGET= ; true")).text,
        "yaml": (await here("peek")).text,
        "python": (await here("envtool", name="DEPLOY_TARGET")).text,
    }
    for kind, text in seen.items():
        assert (value in text) is not scoped, (kind, text)
    assert ("inside=unset child=unset" in seen["python"]) is scoped
