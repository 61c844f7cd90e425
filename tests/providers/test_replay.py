"""The replay provider (scripted turns from a file) and the recording wrapper."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from squadd.config import ProviderSettings
from squadd.contracts.messages import AssistantMessage, Completion, ToolMessage
from squadd.errors import ConfigError, ProviderError
from squadd.providers.base import CompletionRequest
from squadd.providers.factory import make_provider
from squadd.providers.replay import RecordingProvider, ReplayProvider, load_script
from tests.providers._shared import ask

LEAD_YAML = """\
default:
  - text: "I am the default."
agents:
  lead:
    - tool_calls:
        - name: squad_decide
          arguments: {title: Use Postgres, category: architecture}
        - name: squad_memory
          arguments: {learning: "Postgres it is"}
      text: Recording.
      usage: {input_tokens: 100, output_tokens: 20}
    - text: All done.
"""


def continued(request: CompletionRequest, completion: Completion) -> CompletionRequest:
    """The request after `completion`'s turn, with a result for each of its tool calls."""
    messages = [*request.messages,
                AssistantMessage(content=completion.text,
                        tool_calls=completion.tool_calls)]
    messages += [ToolMessage(tool_call_id=c.id, content="ok")
                 for c in completion.tool_calls]
    return request.model_copy(update={"messages": messages})


@pytest.fixture
def lead_script(tmp_path: Path) -> Path:
    path = tmp_path / "turns.yaml"
    path.write_text(LEAD_YAML, encoding="utf-8")
    return path


async def test_each_agent_plays_its_own_turns_with_deterministic_call_ids(
        lead_script: Path) -> None:
    provider = ReplayProvider.from_file(lead_script)
    request = ask()
    first = await provider.complete(request)
    assert first.stop_reason == "tool_calls" and first.text == "Recording."
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_0_0", "squad_decide", {"title": "Use Postgres", "category": "architecture"}),
        ("call_0_1", "squad_memory", {"learning": "Postgres it is"}),
    ]
    assert (first.usage.input_tokens, first.usage.output_tokens) == (100, 20)
    assert first.model == "replay"

    second = await provider.complete(continued(request, first))
    assert (second.text, second.stop_reason, second.tool_calls) == ("All done.", "end", [])

    other = await provider.complete(ask().model_copy(update={"agent": "keaton"}))
    assert other.text == "I am the default."


async def test_every_session_replays_from_its_start_and_a_continued_one_carries_on(
        lead_script: Path) -> None:
    provider = ReplayProvider.from_file(lead_script)
    first = await provider.complete(ask())
    again = await provider.complete(ask())  # a new session: no assistant message yet
    assert again.tool_calls == first.tool_calls
    resumed = await provider.complete(continued(ask(), first))
    assert resumed.text == "All done."


async def test_a_handed_out_completion_cannot_change_the_script(lead_script: Path) -> None:
    provider = ReplayProvider.from_file(lead_script)
    first = await provider.complete(ask())
    first.tool_calls[0].arguments["title"] = "changed"
    first.text = "changed"
    again = await provider.complete(ask())
    assert again.text == "Recording." and again.tool_calls[0].arguments["title"] == "Use Postgres"


async def test_an_exhausted_script_names_the_agent_and_the_turns_it_has(
        lead_script: Path) -> None:
    provider = ReplayProvider.from_file(lead_script)
    request = ask()
    first = await provider.complete(request)
    request = continued(request, first)
    request = continued(request, await provider.complete(request))
    with pytest.raises(ProviderError) as caught:
        await provider.complete(request)
    message = str(caught.value)
    assert "agent 'lead'" in message and str(lead_script) in message
    assert "exhausted" in message and "2 turn(s)" in message and "turn 3" in message


async def test_a_bare_json_list_is_the_default_script(tmp_path: Path) -> None:
    path = tmp_path / "turns.json"
    path.write_text(json.dumps([
        {"tool_calls": [{"name": "squad_decide", "arguments": '{"title": "broken'}]},
        {"text": "ok"}]), encoding="utf-8")
    provider = ReplayProvider.from_file(path)
    call = (await provider.complete(ask())).tool_calls[0]
    assert call.arguments_error is not None and call.raw_arguments == '{"title": "broken'


async def test_an_agent_without_turns_and_no_default_lists_the_scripted_agents(
        tmp_path: Path) -> None:
    path = tmp_path / "turns.yaml"
    path.write_text("agents:\n  keaton: [{text: hi}]\n  fenster: [{text: hi}]\n",
                    encoding="utf-8")
    with pytest.raises(ProviderError, match=r"no turns for agent 'lead'.*fenster, keaton"):
        await ReplayProvider.from_file(path).complete(ask())


@pytest.mark.parametrize(("content", "expected"), [
    ("default:\n  - txt: typo\n", "default.0.txt: Extra inputs are not permitted"),
    ("- tool_calls: [{arguments: {}}]\n", "default.0.tool_calls.0.name: Field required"),
    ("default: [text: a\n", "not valid YAML"),
    ("agents: [1]\n", "agents: Input should be a valid dictionary"),
])
def test_a_broken_script_is_a_config_error_naming_the_file_and_the_problem(
        tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_script(path)
    assert str(path) in str(caught.value) and expected in str(caught.value)


def test_a_missing_script_file_is_a_config_error_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml does not exist \(provider.replay_file\)"):
        make_provider(ProviderSettings(kind="replay", replay_file=str(tmp_path / "nope.yaml")))
    with pytest.raises(ConfigError, match=r"needs provider\.replay_file"):
        make_provider(ProviderSettings(kind="replay"))


async def test_replaying_needs_no_file_access_per_turn(lead_script: Path) -> None:
    provider = ReplayProvider.from_file(lead_script)
    lead_script.unlink()  # read once, at load
    request = ask()
    for _ in range(3):  # the script is played from memory: the file is gone
        assert (await provider.complete(request)).text


async def test_recording_writes_each_turn_so_that_replay_plays_it_back(
        lead_script: Path, tmp_path: Path) -> None:
    record = tmp_path / "recorded.json"
    recorder = RecordingProvider(ReplayProvider.from_file(lead_script), record)
    request = ask()
    first = await recorder.complete(request)
    on_disk = json.loads(record.read_text(encoding="utf-8"))
    assert on_disk["agents"]["lead"] == [{
        "text": "Recording.",
        "tool_calls": [
            {"name": "squad_decide",
             "arguments": {"title": "Use Postgres", "category": "architecture"}},
            {"name": "squad_memory", "arguments": {"learning": "Postgres it is"}}],
        "usage": {"input_tokens": 100, "output_tokens": 20}}]
    second = await recorder.complete(continued(request, first))
    await recorder.complete(ask().model_copy(update={"agent": ""}))
    await recorder.aclose()

    replayed = ReplayProvider.from_file(record)
    again = await replayed.complete(ask())
    assert again.tool_calls == first.tool_calls
    assert (await replayed.complete(continued(ask(), again))).text == second.text
    on_disk = json.loads(record.read_text(encoding="utf-8"))
    assert on_disk["default"] == [{"text": "I am the default."}]


async def test_recording_a_new_session_replaces_that_agents_turns(
        lead_script: Path, tmp_path: Path) -> None:
    record = tmp_path / "recorded.yaml"
    settings = ProviderSettings(kind="replay", replay_file=str(lead_script),
                                record_file=str(record))
    recorder = make_provider(settings)
    assert isinstance(recorder, RecordingProvider)
    first = await recorder.complete(ask())
    await recorder.complete(continued(ask(), first))
    await recorder.complete(ask())  # a second session starts over at turn 0
    data = yaml.safe_load(record.read_text(encoding="utf-8"))
    assert len(data["agents"]["lead"]) == 1
    assert not list(tmp_path.glob(".recorded.yaml.*"))  # no temp file left by atomic writes

    # Recording again into the same file keeps what other agents recorded.
    again = RecordingProvider(ReplayProvider.from_file(lead_script), record)
    await again.complete(ask().model_copy(update={"agent": "keaton"}))
    data = yaml.safe_load(record.read_text(encoding="utf-8"))
    assert len(data["agents"]["lead"]) == 1
    assert data["agents"]["keaton"] == [{"text": "I am the default."}]


async def test_each_turn_handed_out_is_the_callers_to_change(lead_script: Path) -> None:
    provider = ReplayProvider.from_file(lead_script)
    request = ask().model_copy(update={"agent": "lead"})
    first = await provider.complete(request)
    first.tool_calls[0].arguments["title"] = "Changed by the caller"
    first.tool_calls.pop()
    first.usage.input_tokens = 0
    again = await provider.complete(request)
    assert [c.arguments for c in again.tool_calls] == [
        {"title": "Use Postgres", "category": "architecture"}, {"learning": "Postgres it is"}]
    assert again.usage.input_tokens == 100
