"""The YAML tool engine: tool files of shell commands (CYCOD's schema) and the `type: agent`
and `type: prompt` tools written in YAML. Imports run one way, from the shell grammar up:

    contexts, scan -> words -> template -> dialects       the shell grammar and quoting
    durations, keys, conditions -> schema -> checks        the file format, read strictly
    files                                                  YAML 1.2 reading, then the checks
    prepare -> run -> tool -> show, self_tests             running a plan; the tool class
    agent                                                  agent and prompt tools

Other packages import what they use from here; the modules are this package's own.
"""

from squadd.tools.yaml.agent import bind_agent_tools
from squadd.tools.yaml.contexts import CONTEXTS
from squadd.tools.yaml.self_tests import ToolTestOutcome, run_tool_tests
from squadd.tools.yaml.show import yaml_details
from squadd.tools.yaml.template import check_shell_template
from squadd.tools.yaml.tool import ShellTool

__all__ = ["CONTEXTS", "ShellTool", "ToolTestOutcome", "bind_agent_tools",
           "check_shell_template", "run_tool_tests", "yaml_details"]
