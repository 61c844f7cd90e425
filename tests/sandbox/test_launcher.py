"""The launcher's sweep: what a command leaves behind is killed and reaped, and a process that
appears after a pass looked (a fork bomb forks while it is swept) is killed on the next pass,
never waited on for as long as it cares to live."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from squadd.sandbox import launcher

# Run in its own process: the sweep reaps every child of the process it runs in.
_SCRIPT = textwrap.dedent("""
    import os, subprocess, sys
    sys.path.insert(0, {path!r})
    import launcher

    late = subprocess.Popen(["sleep", "600"])
    real = launcher._children_of
    passes = []

    def first_pass_misses_it(parent):
        tree = real(parent)
        passes.append(parent)
        if len(passes) == 1:  # as if `late` was forked just after the first scan
            tree[parent] = [pid for pid in tree.get(parent, []) if pid != late.pid]
        return tree

    launcher._children_of = first_pass_misses_it
    launcher.sweep(os.getpid())
    # Reaped by the sweep, so the kernel says nothing of it any more; it was killed, not let be.
    print(len(passes) >= 2, os.path.exists(f"/proc/{{late.pid}}"))
""")


def test_a_process_the_first_pass_missed_is_killed_on_the_next_not_waited_for() -> None:
    path = str(launcher.__file__).rpartition("/")[0]
    # The timeout only catches a hang (the old sweep blocked on the missed `sleep 600`).
    done = subprocess.run([sys.executable, "-c", _SCRIPT.format(path=path)],
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["True", "False"], done.stdout + done.stderr


def test_a_tree_of_descendants_is_killed_and_reaped() -> None:
    script = textwrap.dedent(f"""
        import os, subprocess, sys
        sys.path.insert(0, {str(launcher.__file__).rpartition("/")[0]!r})
        import launcher
        launcher._libc.prctl(launcher.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # A child whose own child was orphaned to us, and a grandchild still under its parent.
        subprocess.run(["sh", "-c", "sleep 600 & exit 0"], check=True)
        nested = subprocess.Popen(["sh", "-c", "sleep 600 & wait"])
        before = launcher._children_of(os.getpid()).get(os.getpid(), [])
        launcher.sweep(os.getpid())
        after = launcher._children_of(os.getpid()).get(os.getpid(), [])
        print(len(before), len(after))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.split() == ["2", "0"], done.stdout + done.stderr
