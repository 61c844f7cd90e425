"""`squadd doctor --security`: the guards in force, one entry each, checked where they can be.

A guard is a function from `GuardContext` to `GuardReport` (guard, status, detail), listed in
`GUARDS` by the `@guard` decorator; a new guard is one more decorated function here. A status
is `on` (in force, checked), `warn` (in force with a weakness here, said in the detail) or
`off` (not in force: `doctor --security` then exits 1).
"""

from __future__ import annotations

import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from squadd.config import MAX_SETTING_NUMBER, MAX_SETTING_SECONDS, Settings
from squadd.state.layout import SquadLayout

GuardStatus = Literal["on", "warn", "off"]


@dataclass
class GuardContext:
    """What the guards may look at: the squad (None outside one) and its settings."""

    layout: SquadLayout | None
    settings: Settings | None


@dataclass(frozen=True)
class GuardReport:
    guard: str
    status: GuardStatus
    detail: str


Guard = Callable[[GuardContext], GuardReport]
GUARDS: list[Guard] = []
"""Every guard, in the order shown."""


def guard(check: Guard) -> Guard:
    """Register `check` in `GUARDS`."""
    GUARDS.append(check)
    return check


def run_guards(ctx: GuardContext, guards: list[Guard] | None = None) -> list[GuardReport]:
    """Each guard's report; one that raises is reported `off`, with what it raised."""
    reports = []
    for check in GUARDS if guards is None else guards:
        name = check.__name__.removeprefix("guard_").replace("_", " ")
        try:
            reports.append(check(ctx))
        except Exception as exc:  # a broken guard is a finding, not a crash of doctor
            reports.append(GuardReport(name, "off", f"its check failed: "
                                                    f"{type(exc).__name__}: {exc}"))
    return reports


@guard
def guard_untrusted_regex(ctx: GuardContext) -> GuardReport:
    """Patterns from models and files run in linear time; backtracking ones are refused."""
    from squadd.errors import UntrustedInputError
    from squadd.untrusted import linear_pattern

    try:
        linear_pattern("(?=(a+)+b)")
    except UntrustedInputError:
        pass
    else:
        return GuardReport("regex engine", "off", "a look-around pattern was accepted")
    if not linear_pattern("(a+)+b").search("a" * 64 + "b"):
        return GuardReport("regex engine", "off", "the linear-time engine does not match")
    choice = ctx.settings.workspace_tools.grep if ctx.settings else "auto"
    rg = shutil.which("rg")
    engine = ("rg " + rg if rg else "Python linear engine (rg not found)") \
        if choice == "auto" else choice
    return GuardReport("regex engine", "on", f"linear time only (grep: {engine}; find and "
                       "tool conditions: linear engine); look-around, backreferences, atomic "
                       "groups, possessive quantifiers and conditionals are refused")


@guard
def guard_shell_template_grammar(ctx: GuardContext) -> GuardReport:
    """One probe per evaluation context of the grammar must be refused at load."""
    from squadd.errors import TemplateError
    from squadd.tools.yaml import CONTEXTS, check_shell_template

    probes = {"arithmetic": "echo $(( {X} ))", "arithmetic-test": "[[ {X} -eq 1 ]]",
              "code": "eval {X}", "declaration": "declare -i n={X}",
              "variable-name": "declare {X}=1", "array-subscript": "local v={X}",
              "indirection": "v={X}; echo ${!v}", "file-descriptor": "echo x >&{X}",
              "evaluated-variable": "PATH={X}", "command-name": "{X} --help",
              "nested-code": "sh -c {X}", "quoting": "echo '{X}'"}
    loaded = []
    for key in CONTEXTS:
        try:
            check_shell_template(probes[key], ["X"])
        except TemplateError:
            continue
        loaded.append(key)
    if loaded:
        return GuardReport("shell template grammar", "off",
                           f"a value is accepted in: {', '.join(loaded)}")
    return GuardReport("shell template grammar", "on",
                       f"{len(CONTEXTS)} evaluation contexts refused at load "
                       f"({', '.join(CONTEXTS)})")


def _loose(path: Path) -> bool:
    return bool(path.lstat().st_mode & 0o077)


@guard
def guard_file_modes(ctx: GuardContext) -> GuardReport:
    """squadd's own folders are 0700 and its files 0600."""
    if ctx.layout is None:
        return GuardReport("file modes", "on", "new files 0600, folders 0700 (no squad here "
                           "to inspect)")
    loose_dirs = [p for p in ctx.layout.private_dirs() if p.is_dir() and _loose(p)]
    loose_files = 0
    for folder in ctx.layout.private_dirs():
        if folder.is_dir():
            loose_files += sum(1 for p in folder.iterdir()
                               if p.is_file() and not p.is_symlink() and _loose(p))
    if loose_dirs:
        shown = ", ".join(f"{p.relative_to(ctx.layout.root)} "
                          f"({oct(stat.S_IMODE(p.stat().st_mode))})" for p in loose_dirs)
        return GuardReport("file modes", "warn", f"open to others: {shown} (the daemon makes "
                           "them 0700 when it starts; or chmod 700 them)")
    more = f"; {loose_files} older files are 0644 inside them" if loose_files else ""
    return GuardReport("file modes", "on", "squadd's own files 0600 in 0700 folders "
                       f"(run/, tool-output/); team files 0644{more}")


@guard
def guard_dashboard_streams(ctx: GuardContext) -> GuardReport:
    from squadd.daemon.streams import (
        MAX_DASHBOARD_STREAMS,
        MAX_EVENT_STREAMS,
        ROUTE_STREAM_RESERVE,
    )

    return GuardReport("dashboard stream budget", "on",
                       f"{MAX_DASHBOARD_STREAMS} dashboard streams, apart from the API's "
                       f"{MAX_EVENT_STREAMS} (+{ROUTE_STREAM_RESERVE} kept for routes)")


@guard
def guard_approval_display(ctx: GuardContext) -> GuardReport:
    from squadd.tools.approvals import arguments_bytes, arguments_text

    probe = {"command": "echo ok" + " " * 5000 + "; rm -rf ~", "note": "\u202e"}
    text = arguments_text(probe)
    if "rm -rf ~" not in text or "\u202e" in text or arguments_bytes(probe) < 5000:
        return GuardReport("approval display", "off", "arguments are cut or hide characters")
    return GuardReport("approval display", "on", "the dashboard and 'squadd approvals' show "
                       "the whole arguments (non-ASCII escaped) with their size in bytes")


@guard
def guard_ui_token(ctx: GuardContext) -> GuardReport:
    detail = "'squadd ui --open' hands the token over in a 0600 page in run/, never in argv"
    if ctx.layout is not None and ctx.layout.ui_handoff.exists() \
            and _loose(ctx.layout.ui_handoff):
        return GuardReport("ui token handoff", "warn",
                           f"{ctx.layout.ui_handoff} is readable by others: delete it")
    return GuardReport("ui token handoff", "on", detail)


@guard
def guard_config_numbers(ctx: GuardContext) -> GuardReport:
    return GuardReport("config numbers", "on", f"finite, at most {MAX_SETTING_NUMBER:.0e} "
                       f"(durations {MAX_SETTING_SECONDS:.0e} s); errors name the key and file")


@guard
def guard_git_hardening(ctx: GuardContext) -> GuardReport:
    """squadd's own git runs no hook, filter, fsmonitor or driver the repository chose."""
    import os
    import subprocess
    import tempfile

    from squadd import gitsafe

    if shutil.which("git") is None:
        return GuardReport("git hardening", "on", "git is not installed: squadd runs no git "
                           "here (where it does, no repository hook, filter or driver runs)")
    with tempfile.TemporaryDirectory(prefix="squadd-doctor-") as folder:
        repo, marker = Path(folder) / "repo", Path(folder) / "ran"
        plain = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
        subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30, env=plain,
                       capture_output=True)
        hook = repo / ".githooks" / "pre-commit"
        hook.parent.mkdir()
        hook.write_text(f"#!/bin/sh\ntouch '{marker}'\n")
        hook.chmod(0o755)
        (repo / ".gitattributes").write_text("* filter=probe\n")
        for key, value in (("core.hooksPath", ".githooks"),
                           ("filter.probe.clean", f"touch '{marker}'; cat")):
            subprocess.run(["git", "config", key, value], cwd=repo, check=True, timeout=30,
                           env=plain)
        env = gitsafe.hardened_env(plain, ["core.hooksPath", "filter.probe.clean"])
        for args in (("add", "-A"), ("-c", "user.name=d", "-c", "user.email=d@d", "commit",
                                     "-q", "-m", "probe")):
            subprocess.run(gitsafe.hardened_argv(["git", *args]), cwd=repo, timeout=30,
                           env=env, capture_output=True, check=False)
        if marker.exists():
            return GuardReport("git hardening", "off",
                               "a repository's hook or filter ran under squadd's git")
    return GuardReport("git hardening", "on",
                       "hooks, filters, fsmonitor, diff/merge drivers, pager, editor, signing "
                       "and ssh command from the repository's config are off in every git "
                       "command squadd runs (checked: a hook and a filter did not run)")


@guard
def guard_executable_files(ctx: GuardContext) -> GuardReport:
    """write and edit ask before changing a file that squadd, git or a later session runs."""
    from squadd.tools.builtin.protected import protected_places

    if ctx.layout is None or ctx.settings is None:
        return GuardReport("write-protected executable files", "on",
                           "tool folders, hook folders, .gitattributes and hook settings need "
                           "an approval to change (no squad here to list them for)")
    places = protected_places(ctx.layout.repo, ctx.layout.root, ctx.settings)
    probes = (".cycod/tools/x.yaml", ".squad/tools/x.py", ".husky/pre-commit",
              "src/.gitattributes", ".claude/settings.json")
    missed = [p for p in probes
              if places.reason(ctx.layout.repo, tuple(p.split("/"))) is None]
    if missed:
        return GuardReport("write-protected executable files", "off",
                           f"not protected: {', '.join(missed)}")
    return GuardReport("write-protected executable files", "on",
                       f"{len(places.prefixes) + len(places.outside)} folders and files (every "
                       "tool folder discovery reads, hook folders, any .gitattributes, hook "
                       "settings) need an approval to change through write and edit")


@guard
def guard_redaction(ctx: GuardContext) -> GuardReport:
    """Secrets are redacted from every tool's output, in the common encodings too."""
    import base64

    from squadd.tools.redaction import redact

    secret = "doctor-probe-Secret/42+x"
    data = secret.encode()
    shown = [secret, base64.b64encode(b"a" + data).decode(), data.hex().upper(),
             secret[:7] + "\n" + secret[7:], "%" + "%".join(f"{b:02x}" for b in data)]
    left = [s for s in shown if "[secret:PROBE" not in redact(s, {"PROBE": secret})]
    if left:
        return GuardReport("secret redaction", "off", f"{len(left)} form(s) not redacted")
    return GuardReport("secret redaction", "on",
                       "every tool's output: the value, base64 (3 alignments), hex, "
                       "URL-encoding, split across lines; not other encodings "
                       "(docs/security.md)")


@guard
def guard_sandbox(ctx: GuardContext) -> GuardReport:
    """Every process a session causes runs confined (docs/sandbox.md)."""
    from squadd.sandbox.report import enforcement

    box = (ctx.settings or Settings()).sandbox
    found = enforcement(box.mode, network=box.network, max_processes=box.max_processes,
                        max_file_bytes=box.max_file_mb << 20)
    if found.mechanism is None:
        return GuardReport("sandbox", "off", found.summary)
    if found.mechanism == "off":
        return GuardReport("sandbox", "off", "sandbox.mode = \"off\": bash, shell tools, Python "
                                             "tool workers, hooks and the land check run "
                                             "unconfined (logged at each call)")
    return GuardReport("sandbox", "on",
                       f"{found.mechanism}: bash, shell tools, Python tool workers, hooks and "
                       f"the land check run confined; network {box.network}; "
                       + "; ".join(line for line in found.lines[:3]))
