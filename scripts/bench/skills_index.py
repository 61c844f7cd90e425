"""Benchmark: the skills index every prompt carries, over skills in all three skill folders.

Writes N skills with YAML front matter, split between `.github/skills/`, `.squad/skills/` and
`.copilot/skills/`, then times `skills_index` warm (front matter already parsed: the steady
state, since index lines are cached by file signature) and cold (every file parsed again).
Prints `skills_index skills=… warm_ms=… cold_ms=…` as its last line (best of 5 rounds).

    .venv/bin/python scripts/bench/skills_index.py [--skills 48]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_folder

from squadd.runtime.prompt import skills_index
from squadd.state.layout import SquadLayout
from squadd.state.skills import summary_cache

ROUNDS = 5
CALLS = 20


def make_skills(repo: Path, count: int) -> SquadLayout:
    roots = [repo / ".github" / "skills", repo / ".squad" / "skills", repo / ".copilot" / "skills"]
    for index in range(count):
        folder = roots[index % len(roots)] / f"skill-{index:03d}"
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(
            f'---\nname: "skill-{index:03d}"\ndescription: >\n  What skill {index} teaches,\n'
            f'  over two lines.\nconfidence: "medium"\n---\n\n# Skill {index}\n\n'
            + "A paragraph of guidance.\n" * 30, encoding="utf-8")
    return SquadLayout.at(repo / ".squad")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--skills", type=int, default=48)
    count = parser.parse_args().skills
    with bench_folder() as tmp:
        layout = make_skills(Path(tmp) / "repo", count)
        summaries = summary_cache()  # as a runtime keeps it
        assert skills_index(layout, summaries).count("\n") == count - 1

        def cold() -> None:
            skills_index(layout)  # no cache: every file parsed again

        warm_s = min(timeit.repeat(lambda: skills_index(layout, summaries), number=CALLS,
                                   repeat=ROUNDS)) / CALLS
        cold_s = min(timeit.repeat(cold, number=CALLS, repeat=ROUNDS)) / CALLS
    print(f"skills_index skills={count} warm_ms={warm_s * 1e3:.3f} cold_ms={cold_s * 1e3:.3f}")


if __name__ == "__main__":
    main()
