"""`squadd run` against the suite's OpenAI-compatible HTTP server: a whole session as a real
process, and the ways a run is refused in this process through click's runner."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import traceback
from pathlib import Path

from click.testing import CliRunner, Result

from squadd.cli.app import main
from squadd.state.transcripts import read_transcript
from tests.support.model_servers import OpenAIServer


def squadd(repo: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "squadd", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _repo(tmp_path: Path) -> Path:
    """A repo after `squadd init` and `squadd agent add fenster` (run in this process)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    runner = CliRunner()
    assert runner.invoke(main, ["init", "--dir", str(repo)]).exit_code == 0
    added = runner.invoke(main, ["agent", "add", "fenster", "--role", "Core developer",
                                 "--dir", str(repo)])
    assert added.exit_code == 0, added.output
    return repo


def test_run_decides_remembers_answers_and_memory_reaches_the_next_session(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path)
    with OpenAIServer() as server:
        server.script(
            OpenAIServer.tool_call_turn(("squad_decide", {
                "title": "Use JWT for auth", "body": "Stateless tokens.",
                "agentName": "fenster", "category": "security"})),
            OpenAIServer.tool_call_turn(("squad_memory", {
                "agentName": "fenster", "learning": "Auth lives in src/auth",
                "category": "technical"})),
            OpenAIServer.text_turn("JWT it is."),
            OpenAIServer.text_turn("Hello again."),
        )
        first = squadd(repo, "run", "fenster", "Pick an auth scheme", "--provider", "openai",
                       "--base-url", server.url, "--model", "test-model")
        assert first.returncode == 0, first.stderr
        assert first.stdout.strip() == "JWT it is."
        assert "squad_decide" in first.stderr and "squad_memory" in first.stderr

        squad = repo / ".squad"
        inbox = squad / "decisions" / "inbox" / "fenster-use-jwt-for-auth.md"
        assert "**Category:** security" in inbox.read_text(encoding="utf-8")
        history = (squad / "agents" / "fenster" / "history.md").read_text(encoding="utf-8")
        # No learning yet: Squad's dated style.
        assert re.search(r"^### \d{4}-\d{2}-\d{2}: Auth lives in src/auth\n\nAuth lives in "
                         r"src/auth$", history, re.MULTILINE)
        transcripts = list((squad / "run" / "transcripts").glob("*.jsonl"))
        assert len(transcripts) == 1
        transcript = read_transcript(transcripts[0])
        roles = [m["role"] for m in transcript.messages]
        assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
        assert transcript.final_answer == "JWT it is."

        # The tool results went back to the model, in order, after each call.
        third = server.requests[2].body["messages"]
        assert [m["role"] for m in third][-4:] == ["assistant", "tool", "assistant", "tool"]

        second = squadd(repo, "run", "fenster", "Say hello", "--provider", "openai",
                        "--base-url", server.url, "--json")
        assert second.returncode == 0, second.stderr
        assert json.loads(second.stdout)["answer"] == "Hello again."
        system_prompt = server.requests[3].body["messages"][0]["content"]
        assert "Auth lives in src/auth" in system_prompt


def run_here(repo: Path, *args: str) -> Result:
    """`squadd run ARGS --dir REPO` in this process."""
    result = CliRunner().invoke(main, ["run", *args, "--dir", str(repo)], env={"NO_COLOR": "1"})
    # A traceback in process is an exception other than the exit click makes.
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        "".join(traceback.format_exception(result.exception))
    return result


def test_run_unknown_agent_fails_cleanly(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    result = run_here(repo, "ghost", "x", "--provider", "openai",
                      "--base-url", "http://127.0.0.1:9/v1")
    assert result.exit_code == 1
    assert 'unknown agent "ghost"' in result.stderr and "fenster" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_refuses_a_route_its_model_refuses_with_an_error_line(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    result = run_here(repo, "x" * 70, "t", "--json", "--provider", "openai",
                      "--base-url", "http://127.0.0.1:9/v1")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["reason"] == "invalid" and outcome["session_id"] is None
    assert outcome["error"].startswith("invalid route: AGENT: ")


def test_run_with_rejected_key_fails_without_retry(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    with OpenAIServer() as server:
        server.script(OpenAIServer.error(401, "Incorrect API key provided"))
        result = run_here(repo, "fenster", "x", "--provider", "openai",
                          "--base-url", server.url)
        assert result.exit_code == 1
        assert "401" in result.stderr and "Incorrect API key provided" in result.stderr
        assert len(server.requests) == 1
        assert "Traceback" not in result.stderr and result.stdout == ""
