"""The serving process's garbage-collector settings: passes spaced out, cycles still freed."""

from __future__ import annotations

import json
import subprocess
import sys

from squadd import gc_tuning
from tests._helpers import REPO_ROOT

PROBE = """
import gc, json, weakref
from squadd.gc_tuning import tune_for_serving

class Node:
    pass

tune_for_serving()
frozen = gc.get_freeze_count()
node = Node()
node.me = node  # a cycle: reference counting alone never frees it
freed = weakref.ref(node)
del node
before = freed() is None
junk = [[] for _ in range(3 * gc.get_threshold()[0])]  # enough allocations for a young pass
print(json.dumps({"threshold": gc.get_threshold(), "frozen": frozen,
                  "freed_at_once": before, "freed_by_a_pass": freed() is None}))
"""


def test_a_serving_process_spaces_its_passes_out_and_still_frees_cycles() -> None:
    # In a child process: the settings are process-wide.
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=60, check=True)
    seen = json.loads(done.stdout)
    assert seen["threshold"] == [gc_tuning.YOUNG_THRESHOLD, gc_tuning.MIDDLE_THRESHOLD,
                                 gc_tuning.OLD_THRESHOLD]
    assert seen["frozen"] > 0  # what existed at the call is out of every pass
    assert not seen["freed_at_once"] and seen["freed_by_a_pass"]
