"""The tool API in process: a project tool file is listed with its file and runs, the workspace
tools run in the repository, a broken tool file is reported while the rest load, and a caller
is held to its charter's `## Tools` and to sessions that exist. Approvals answered with
`squadd approve|deny` and runaway tools at stop are in tests/daemon/test_tools.py (real
processes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from squadd.errors import DaemonRequestError
from squadd.state.layout import SquadLayout
from tests.support.in_process import InProcessDaemon, api_in_process
from tests.support.model_servers import OpenAIServer

SHOUT = '''\
from squadd import tool


@tool
def shout(text: str) -> str:
    """Say TEXT louder."""
    return text.upper() + "!"
'''

TESTER_TOOLS = "\n## Tools\n- squad_status\n- squad_m*\n"
DECIDE = {"title": "Sneak a decision in", "agentName": "tester", "body": "not allowed"}


def _tester_and_shout(layout: SquadLayout) -> None:
    """lead (no `## Tools`), tester (squad_status and squad_m* only), and tools/shout.py."""
    charter = layout.charter("tester")
    charter.write_text(charter.read_text(encoding="utf-8") + TESTER_TOOLS, encoding="utf-8")
    (layout.root / "tools").mkdir(exist_ok=True)
    (layout.root / "tools" / "shout.py").write_text(SHOUT, encoding="utf-8")


pytestmark = pytest.mark.daemon(agents=("lead", "tester"), prepare=_tester_and_shout)


@asynccontextmanager
async def running(layout: SquadLayout, server: OpenAIServer) -> AsyncIterator[InProcessDaemon]:
    async with api_in_process(layout, server.url) as daemon:
        yield daemon


async def test_a_project_tool_is_listed_with_its_file_and_runs(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with running(layout, model_server) as daemon:
        tools = {tool["name"]: tool for tool in await daemon.client.tools()}
        shout = tools["shout"]
        assert shout["source"] == "project" and shout["squad_tool"] is False
        assert shout["file"] == str(layout.root / "tools" / "shout.py")
        assert shout["parameters"]["properties"]["text"]["type"] == "string"
        assert (await daemon.client.call_tool("shout", {"text": "hey"}))["text"] == "HEY!"


async def test_the_workspace_tools_are_offered_and_run_in_the_repository(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with running(layout, model_server) as daemon:
        tools = {tool["name"]: tool for tool in await daemon.client.tools()}
        for name in ("read", "write", "edit", "find", "grep", "bash"):
            assert tools[name]["source"] == "builtin", name
        (layout.repo / "notes.txt").write_text("alpha\nbeta\n", encoding="utf-8")
        found = await daemon.client.call_tool("grep", {"pattern": "bet"})
    assert found["result_type"] == "success" and found["text"] == "notes.txt:2:beta"


async def test_a_broken_tool_file_is_reported_and_the_others_still_load(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with running(layout, model_server) as daemon:
        broken = layout.root / "tools" / "broken.py"
        broken.write_text("def oops(:\n", encoding="utf-8")
        names = [tool["name"] for tool in await daemon.client.tools()]
        assert "shout" in names and "squad_route" in names
        async with daemon.client.subscribe_raw(types=["tools.load_failed"], recent=5,
                                               follow=False) as stream:
            with anyio.fail_after(15):
                failed = [event async for event in stream]
    assert [event["file"] for event in failed] == [str(broken)]


async def test_the_tool_api_refuses_a_call_outside_the_agents_tools(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with running(layout, model_server) as daemon:
        client = daemon.client
        result = await client.call_tool("squad_decide", DECIDE, agent="tester")
        assert result["result_type"] == "failure" and "## Tools" in result["text"]
        assert (await client.call_tool("squad_status", {}, agent="tester"))["result_type"] == \
            "success"
        # A person (no agent) is held to no charter.
        assert (await client.call_tool("squad_status", {}))["result_type"] == "success"
    assert not any(layout.inbox_dir.glob("tester-sneak*"))


async def test_an_unknown_session_is_refused(layout: SquadLayout,
                                             model_server: OpenAIServer) -> None:
    async with running(layout, model_server) as daemon:
        with pytest.raises(DaemonRequestError) as caught:
            await daemon.client.call_tool("squad_status", {},
                                          session_id="20260101-000000-00000000")
    assert caught.value.status == 404 and "no session" in str(caught.value)


async def test_a_secret_read_through_the_tool_api_comes_back_redacted(
        layout: SquadLayout, model_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch,
        ) -> None:
    """The path MCP clients take: a secret one tool declares (never called) is redacted from
    what `read` and `grep` return, in its base64 form too."""
    import base64

    secret = "sk-api-7731-QQx/+zz"
    monkeypatch.setenv("SERVICE_TOKEN", secret)
    (layout.root / "tools" / "svc.yaml").write_text(
        "description: Call the service\nbash: echo calling\ntags: [run]\nvariables:\n"
        "  - name: SERVICE_TOKEN\n    type: secret\n", encoding="utf-8")
    encoded = base64.b64encode(secret.encode()).decode()
    (layout.repo / "dump.txt").write_text(f"raw {secret}\nb64 {encoded}\n", encoding="utf-8")
    async with running(layout, model_server) as daemon:
        client = daemon.client
        answers = [await client.call_tool("read", {"path": "dump.txt"}),
                   await client.call_tool("grep", {"pattern": "raw|b64"})]
    for answer in answers:
        assert answer["result_type"] == "success", answer
        text = answer["text"]
        assert secret not in text and encoded not in text
    assert "[secret:SERVICE_TOKEN]" in answers[0]["text"]
    assert "[secret:SERVICE_TOKEN:base64]" in answers[1]["text"]
