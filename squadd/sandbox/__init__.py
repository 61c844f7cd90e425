"""The OS sandbox every process a session causes runs in (docs/sandbox.md).

`SandboxPolicy` says what a command may touch; `confine(policy, argv, env)` wraps the command for
the strongest mechanism the policy's mode allows here (bubblewrap, Landlock, or only the reaper
with `mode = "off"`) and returns a `Confined` to start and then `close()`. Settings come in as
values: `build_policy` (or `squadd.tools.sandboxing.policy_for`) makes the policy.
"""

from squadd.sandbox.core import OFF_HINT, Confined, confine, mechanism_for, unavailable
from squadd.sandbox.policy import Mechanism, Mode, SandboxPolicy, build_policy

__all__ = ["OFF_HINT", "Confined", "Mechanism", "Mode", "SandboxPolicy", "build_policy",
           "confine", "mechanism_for", "unavailable"]
