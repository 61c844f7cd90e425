"""Benchmark: two small parts every served route pays, each timed alone.

- `parse_json` of a model's answer (an OpenAI chat completion of about 600 bytes, as the HTTP
  providers parse it: surrogates mended), against `json.loads` of the same bytes;
- the custom tools' discovery a session start makes on the event loop (`known_tools`), in a
  squad with no tool folder (most squads) and in one with a folder of `--tools` YAML tools.

Prints `session_parts parse_json_us=… json_loads_us=… known_tools_none_us=…
known_tools_yaml_us=…` as its last line (best of 5 rounds, microseconds a call).

    .venv/bin/python scripts/bench/session_parts.py [--tools 8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_folder

from squadd.config import Settings
from squadd.state.layout import SquadLayout
from squadd.tools.discovery import ToolDiscoverer, discover_tools, known_tools
from squadd.tools.python.calls import SpareWorkers
from squadd.untrusted import parse_json

ROUNDS = 5
CALLS = 2000
ANSWER = json.dumps({
    "id": "chatcmpl-abc123", "object": "chat.completion", "created": 1700000000,
    "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done", "refusal": None,
                                         "annotations": []},
                 "logprobs": None, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 812, "completion_tokens": 1, "total_tokens": 813,
              "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
              "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                            "accepted_prediction_tokens": 0,
                                            "rejected_prediction_tokens": 0}},
    "service_tier": "default", "system_fingerprint": "fp_abc"}).encode()


def best_us(call: Callable[[], object]) -> float:
    return min(timeit.repeat(call, number=CALLS, repeat=ROUNDS)) / CALLS * 1e6


def squad(repo: Path, tools: int) -> SquadLayout:
    layout = SquadLayout.at(repo / ".squad")
    layout.root.mkdir(parents=True)
    if tools:
        layout.tools_dir.mkdir()
        for n in range(tools):
            (layout.tools_dir / f"tool{n}.yaml").write_text(
                f"description: Tool {n}\nbash: echo {n}\n", encoding="utf-8")
        then = layout.tools_dir.stat().st_mtime - 60
        os.utime(layout.tools_dir, (then, then))  # settled, as a squad's folder mostly is
    return layout


def discovery_us(layout: SquadLayout, settings: Settings) -> float:
    discoverer = ToolDiscoverer(SpareWorkers(keep=0))
    try:
        discover_tools(layout, settings, discoverer=discoverer)  # loaded once, as at start
        return best_us(lambda: known_tools(layout, settings, discoverer,
                                           builtin_names=("squad_route", "read")))
    finally:
        discoverer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tools", type=int, default=8)
    count = parser.parse_args().tools
    parse_us = best_us(lambda: parse_json(ANSWER, mend_surrogates=True))
    loads_us = best_us(lambda: json.loads(ANSWER))
    settings = Settings()
    with bench_folder() as tmp:
        # The folders outside the repository (the user's, CYCOD's) point inside the bench
        # folder, so that what this machine's home holds does not count.
        os.environ["XDG_CONFIG_HOME"] = str(Path(tmp) / "config")
        os.environ["HOME"] = str(Path(tmp) / "home")
        none_us = discovery_us(squad(Path(tmp) / "bare", 0), settings)
        yaml_us = discovery_us(squad(Path(tmp) / "tools", count), settings)
    print(f"session_parts parse_json_us={parse_us:.2f} json_loads_us={loads_us:.2f} "
          f"known_tools_none_us={none_us:.2f} known_tools_yaml_us={yaml_us:.2f} tools={count}")


if __name__ == "__main__":
    main()
