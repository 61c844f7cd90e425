"""A real Arize Phoenix (an OTLP/HTTP receiver that stores spans and answers queries for
them) for the trace tests: started on free ports in a temp dir, waited on through
`/healthz`, always stopped. Installed by `scripts/install-phoenix` into a venv of its own;
`PHOENIX_BIN` names another `phoenix` executable."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Self

import httpx

from tests.support.model_servers import unused_port

DEFAULT_BIN = Path.home() / ".cache" / "squadd" / "phoenix-venv" / "bin" / "phoenix"
START_TIMEOUT_S = 240.0
"""Phoenix builds its database and web app at start: on a busy two-core machine, minutes."""


def phoenix_bin() -> Path | None:
    given = os.environ.get("PHOENIX_BIN")
    path = Path(given) if given else DEFAULT_BIN
    return path if path.is_file() and os.access(path, os.X_OK) else None


class Phoenix:
    def __init__(self, executable: Path, workdir: Path):
        self.executable = executable
        self.workdir = workdir
        self.port = unused_port()
        self.grpc_port = unused_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "phoenix.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        env = {**os.environ, "PHOENIX_WORKING_DIR": str(self.workdir),
               "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(self.port),
               "PHOENIX_GRPC_PORT": str(self.grpc_port), "PHOENIX_TELEMETRY_ENABLED": "false"}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([str(self.executable), "serve"], env=env,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                         start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Phoenix exited ({self.proc.returncode}):\n{self.output}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            time.sleep(0.5)
        raise TimeoutError(f"Phoenix did not answer within {START_TIMEOUT_S:g}s:\n"
                           f"{self.output}")

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def spans(self, project: str = "default") -> list[dict[str, Any]]:
        """Every span Phoenix stored for `project`, through its REST API."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 1000}
            if cursor:
                params["cursor"] = cursor
            answer = httpx.get(f"{self.url}/v1/projects/{project}/spans", params=params,
                               timeout=30)
            answer.raise_for_status()
            body = answer.json()
            found.extend(body["data"])
            cursor = body.get("next_cursor")
            if not cursor:
                return found

    def wait_for_trace(self, trace_id: str, count: int, timeout: float = 60.0
                       ) -> list[dict[str, Any]]:
        """The spans of `trace_id` once at least `count` arrived (bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = [s for s in self.spans() if s["context"]["trace_id"] == trace_id]
            if len(spans) >= count or time.monotonic() > deadline:
                return spans
            time.sleep(0.5)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()
