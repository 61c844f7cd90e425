"""The wheel, as a new user gets it: built, installed into a fresh venv, `squadd init` run."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests._helpers import REPO_ROOT, snapshot

pytestmark = pytest.mark.slow


def _run(args: list[str | Path], *, cwd: Path, timeout: float = 300,
         extra_env: dict[str, str] | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(extra_env or {})
    result = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                            timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_wheel_installs_in_a_fresh_venv_and_init_is_idempotent(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", dist, REPO_ROOT],
         cwd=tmp_path)
    [wheel] = dist.glob("squadd-*.whl")
    with zipfile.ZipFile(wheel) as archive:  # the dashboard ships as it is: no build step
        shipped = set(archive.namelist())
    for name in ("index.html", "app.js", "app.css"):
        assert f"squadd/daemon/static/{name}" in shipped, name

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    _run([venv / "bin" / "python", "-m", "pip", "install", "--quiet",
          "--disable-pip-version-check", wheel], cwd=tmp_path)
    squadd = venv / "bin" / "squadd"

    repo = tmp_path / "repo"
    repo.mkdir()
    _run(["git", "init", "-q", "."], cwd=repo)
    # The installed copy, not this checkout, must be the one that runs.
    location = _run([venv / "bin" / "python", "-c",
                     "import squadd.config as c; print(c.data_path('agents_template'))"],
                    cwd=repo).strip()
    assert "site-packages" in location and str(REPO_ROOT) not in location

    created = _run([squadd, "init"], cwd=repo)
    squad = repo / ".squad"
    for relative in ("team.md", "routing.md", "decisions.md", "decisions/inbox/.gitkeep",
                     "agents/scribe/charter.md", "agents/scribe/history.md", ".gitignore"):
        assert (squad / relative).is_file(), relative
        assert relative in created
    assert not (squad / "templates").exists()

    before = snapshot(repo)
    again = _run([squadd, "init"], cwd=repo)
    assert again.startswith("nothing to do")
    assert snapshot(repo) == before

    _run([squadd, "agent", "add", "lead", "--role", "Lead"], cwd=repo)
    listing = _run([squadd, "agent", "list"], cwd=repo)
    assert "Lead    ✅ Active  Lead" in listing  # team.md's display name, status and role
    # A model provider that needs no network or key, so doctor can pass every check.
    recording = tmp_path / "recording.yaml"
    recording.write_text("default:\n  - text: done\n", encoding="utf-8")
    report = _run([squadd, "doctor"], cwd=repo, extra_env={
        "SQUADD_PROVIDER_KIND": "replay", "SQUADD_PROVIDER_REPLAY_FILE": str(recording)})
    assert "Error" not in report and "FAIL" not in report
