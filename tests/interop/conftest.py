"""Squad's own code as the test oracle: Node 22, the Squad SDK and the Squad CLI from npm,
installed once into a cache outside the repository and reused between runs.

The cache is `$SQUADD_INTEROP_CACHE`, else `$XDG_CACHE_HOME/squadd/interop`, else
`~/.cache/squadd/interop`; one folder per set of pinned versions, filled under a file lock (two
test runs never install at once) and marked ready only once complete. Where npm is missing or
cannot reach its registry, the tests skip saying so; any other install failure fails them.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from squadd.fsio import file_lock

SDK = "@bradygaster/squad-sdk@0.13.1"
CLI = "@bradygaster/squad-cli@0.10.0"
NODE_MAJOR = "22"
INSTALL_TIMEOUT_S = 600
RUN_TIMEOUT_S = 120
READER = Path(__file__).with_name("squad_read.mjs")
_OFFLINE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENETUNREACH",
            "EHOSTUNREACH", "network request", "getaddrinfo")


def _node_package() -> str | None:
    """npm's package that ships a Node binary for this machine (None: there is none)."""
    if sys.platform != "linux":
        return None
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower())
    return f"node-linux-{arch}@{NODE_MAJOR}" if arch else None


def cache_root() -> Path:
    override = os.environ.get("SQUADD_INTEROP_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "squadd" / "interop"


@dataclass(frozen=True)
class SquadJs:
    """The installed Node, Squad SDK and Squad CLI."""

    folder: Path
    node: Path

    def read(self, repo: Path) -> dict[str, Any]:
        """What Squad's exported parsers read from `repo`'s .squad/ (see squad_read.mjs)."""
        script = self.folder / READER.name
        shutil.copyfile(READER, script)  # bare imports resolve from the cache's node_modules
        done = subprocess.run([str(self.node), str(script), str(repo)], cwd=self.folder,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
        assert done.returncode == 0, f"squad_read.mjs failed:\n{done.stderr}"
        data: dict[str, Any] = json.loads(done.stdout)
        return data

    def squad(self, repo: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
        """The real `squad` CLI, run in `repo` with `home` as its home folder."""
        cli = self.folder / "node_modules" / "@bradygaster" / "squad-cli"
        entry = cli / "dist" / "cli-entry.js"
        env = {**os.environ, "HOME": str(home), "NO_COLOR": "1", "CI": "true",
               "XDG_CONFIG_HOME": str(home / ".config")}
        return subprocess.run([str(self.node), str(entry), *args], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)


def _install(folder: Path, node_package: str) -> None:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not on PATH: the interop tests need it to install Node 22 and Squad")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "package.json").write_text('{"name": "squadd-interop", "private": true}\n')
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--no-save",
         "--loglevel=error", node_package, SDK, CLI],
        cwd=folder, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
        stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if any(code in output for code in _OFFLINE):
            pytest.skip(f"npm cannot reach its registry, so Squad cannot be installed: "
                        f"{output.strip().splitlines()[-1] if output.strip() else 'no output'}")
        pytest.fail(f"npm install of {node_package}, {SDK} and {CLI} failed:\n{output}")


@pytest.fixture(scope="session")
def squad_js() -> Iterator[SquadJs]:
    node_package = _node_package()
    if node_package is None:
        pytest.skip(f"npm ships no Node binary package for {sys.platform}/{platform.machine()}")
    root = cache_root()
    folder = root / "-".join(p.replace("@bradygaster/", "").replace("@", "") for p in
                             (node_package, SDK, CLI))
    ready = folder / "READY"
    with file_lock(root / "install.lock", timeout=INSTALL_TIMEOUT_S + 60):
        if not ready.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a half-done install from a killed run
            _install(folder, node_package)
            ready.write_text(f"{node_package} {SDK} {CLI}\n")
    node = folder / "node_modules" / node_package.rsplit("@", 1)[0] / "bin" / "node"
    yield SquadJs(folder, node)
