"""A model over real HTTP issues the attacks as `bash` calls in a routed session: nothing it
reads of the secrets reaches the model, the transcript records the policy each call ran under,
and the legitimate call of the same session still works."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from squadd.contracts.routes import RouteRequest
from squadd.runtime.runtime import SquadRuntime
from tests.runtime.scripted import settings as scripted_settings
from tests.sandbox.conftest import needs, running
from tests.support.fixing_agent import tool_results
from tests.support.model_servers import OpenAIServer, Reply
from tests.tools.conftest import make_squad


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
async def test_a_model_issued_attack_fails_and_the_transcript_names_the_policy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mechanism: str) -> None:
    needs(mechanism)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    secret = "e2e-ssh-secret-0b1c"
    (home / ".ssh" / "id_rsa").write_text(secret)
    monkeypatch.setenv("HOME", str(home))
    layout = make_squad(tmp_path / "repo")
    (layout.repo / "build").mkdir()
    token = f"e2e-left-{mechanism}"
    steps: list[tuple[str, dict[str, Any]]] = [
        ("bash", {"command": f"cat {home}/.ssh/id_rsa; echo x > {tmp_path}/outside.txt; "
                             f"setsid -f env -i /bin/bash -c 'exec -a {token} sleep 300'"}),
        # Into a folder of the repository: under Landlock with isolation shared, no new entry
        # can be made at the repository's top level (docs/sandbox.md).
        ("bash", {"command": "echo built > build/out.txt && cat build/out.txt"}),
    ]

    def respond(body: dict[str, Any]) -> Reply:
        done = len(tool_results(body))
        if done < len(steps):
            return OpenAIServer.tool_call_turn(steps[done])
        return OpenAIServer.text_turn("tried")

    config = scripted_settings(session_max_turns=10)
    config = config.model_copy(update={
        "provider": config.provider.model_copy(update={"kind": "openai", "model": "m"}),
        "tools": config.tools.model_copy(update={"approvals": {"bash": "allow"}}),
        "sandbox": config.sandbox.model_copy(update={"mode": mechanism})})
    with OpenAIServer(responder=respond) as server:
        config = config.model_copy(update={"provider": config.provider.model_copy(
            update={"base_url": server.url})})
        async with SquadRuntime.from_settings(layout, config) as runtime:
            with anyio.fail_after(120):
                result = await runtime.route(RouteRequest(
                    target_agent="fenster", task="try", requested_by="cli"))
        bodies = server.bodies
    assert result.ok, result.message
    seen = tool_results(bodies[-1])
    assert secret not in "".join(json.dumps(b) for b in bodies)
    assert not (tmp_path / "outside.txt").exists() and not running(token)
    assert seen[1].startswith("built")
    assert (layout.repo / "build" / "out.txt").read_text() == "built\n"
    [transcript] = list(layout.transcripts_dir.glob("*.jsonl"))
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    ran_under = [r["details"]["sandbox"] for r in records
                 if r.get("message", {}).get("role") == "tool"]
    assert [r["mechanism"] for r in ran_under] == [mechanism, mechanism]
    assert all(r["network"] == "off" for r in ran_under)
