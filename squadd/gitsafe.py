"""The settings every git command squadd runs carries, so git never runs a program the
repository (or an agent writing in it) chose: no hooks, filters, fsmonitor, external diff,
textconv or merge drivers, pager, editor, signing program or ssh command from its config.

The overrides travel as `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n` (the
command-line scope, above every config file, passed on to the git processes git starts), so a
driver whose name holds a `=` or a `.` is overridden as exactly as any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

FIXED: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),        # .git/hooks, .githooks, .husky: none is looked in
    ("core.fsmonitor", "false"),            # a hook program, or the daemon git would start
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    ("core.sshCommand", "ssh"),             # the system's ssh, never a repository's command
    ("core.askPass", ""),
    ("credential.helper", ""),              # an empty value clears the list of helpers
    ("diff.external", ""),
    ("commit.gpgSign", "false"),            # signing runs gpg.program (or gpg.ssh.program)
    ("tag.gpgSign", "false"),
    ("merge.verifySignatures", "false"),    # verifying runs it too
    ("log.showSignature", "false"),
    ("submodule.recurse", "false"),         # `submodule.*.update = !cmd` runs a command
    ("maintenance.auto", "false"),
    ("gc.auto", "0"),
    ("protocol.ext.allow", "never"),        # `ext::` remotes run a command
    ("core.alternateRefsCommand", ""),      # run for an alternate's refs in fetch and push
)
"""Settings that hold whatever the repository's config says."""

DRIVER_KEYS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "filter": (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")),
    "diff": (("command", ""), ("textconv", "")),
    # An empty merge driver would "succeed" with our side's text; `false` makes it a conflict.
    "merge": (("driver", "false"),),
}
"""For each section whose `<section>.<name>.*` settings name a program: what every one of
them becomes, for every driver name the config defines."""


def driver_overrides(names: Iterable[str]) -> list[tuple[str, str]]:
    """The overrides for the drivers defined among `names` (keys as `git config --list` shows
    them: the section and key lower-cased, the driver's name as written)."""
    found: list[tuple[str, str]] = []
    for name in names:
        section, dot, rest = name.partition(".")
        section = section.lower()
        if section == "pager" and dot:
            found.append((name, "false"))   # `pager.<cmd> = prog`: never a pager
            continue
        driver, dot2, _ = rest.rpartition(".")
        if dot2 and section in DRIVER_KEYS:
            found.extend((f"{section}.{driver}.{key}", value)
                         for key, value in DRIVER_KEYS[section])
    return found


SCRUBBED_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                "GIT_COMMON_DIR", "GIT_PREFIX", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
                "GIT_EXTERNAL_DIFF", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_ASKPASS",
                "GIT_EXEC_PATH", "GIT_ATTR_SOURCE", "GIT_SEQUENCE_EDITOR")
"""Variables removed from git's environment: they redirect git or name programs for it."""

LIST_CONFIG = ("config", "--null", "--list", "--name-only")
"""The git arguments that list every key the config (with its includes) defines."""


def parse_listed(output: bytes | str) -> list[str]:
    """The key names in `git config --null --list --name-only` output."""
    text = output.decode("utf-8", errors="surrogateescape") if isinstance(output, bytes) \
        else output
    return [name.strip() for name in text.split("\0") if name.strip()]


def overrides(defined: Iterable[str] = ()) -> list[tuple[str, str]]:
    """Every override for a repository whose config defines the keys `defined`."""
    seen: dict[str, str] = {}
    for key, value in (*FIXED, *driver_overrides(defined)):
        seen[key] = value
    return list(seen.items())


def hardened_env(base: Mapping[str, str], defined: Iterable[str] = ()) -> dict[str, str]:
    """`base` without the variables that redirect git, plus every override for `defined`."""
    env = {k: v for k, v in base.items()
           if k not in SCRUBBED_ENV and not k.startswith(("GIT_CONFIG_KEY_",
                                                           "GIT_CONFIG_VALUE_"))}
    pairs = overrides(defined)
    env["GIT_CONFIG_COUNT"] = str(len(pairs))
    for index, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


_DIFFING = frozenset({"diff", "log", "show", "diff-tree", "diff-index", "diff-files"})
"""Subcommands that could run an external diff or a textconv program (given the flags)."""
RECEIVE_PACK = ("git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c receive.autogc=false "
                "-c core.alternateRefsCommand= receive-pack")
"""What a push runs on the receiving side (the coordinator's repository, reached as a path or
over ssh): git clears the pushing side's config overrides for it, so they are named here, and
the receiving repository's hooks (`pre-receive`, `update`, `post-receive`,
`reference-transaction`, ...) never run."""
UPLOAD_PACK = "git upload-pack"
_FETCHING = frozenset({"fetch", "pull", "clone", "ls-remote"})
_TAKES_VALUE = frozenset({"-c", "-C", "--git-dir", "--work-tree", "--namespace"})


_NO_CONTENT = frozenset({"rev-parse", "rev-list", "for-each-ref", "update-ref", "symbolic-ref",
                         "merge-base", "show-ref", "config", "log"})
"""Subcommands that never read a file's content through a filter or a driver (`log` runs with
`--no-ext-diff --no-textconv`): their driver overrides would change nothing."""
_NO_CONTENT_WORKTREE = frozenset({"list", "prune", "lock", "unlock", "move"})


def needs_drivers(args: Iterable[str]) -> bool:
    """Whether `git ARGS` could run a filter or a diff or merge driver, so the config's
    drivers must be listed and switched off first (a listing costs a git process)."""
    parts = list(args)
    index = 0
    while index < len(parts) and parts[index].startswith("-"):
        index += 2 if parts[index] in _TAKES_VALUE else 1
    command = parts[index] if index < len(parts) else ""
    if command == "worktree":
        return (parts[index + 1] if index + 1 < len(parts) else "") not in _NO_CONTENT_WORKTREE
    return command not in _NO_CONTENT


def hardened_argv(argv: Iterable[str]) -> list[str]:
    """`git ARGS` as squadd runs it: never through a pager, (for the commands that can show
    a patch) never with an external diff or textconv program, and (for a push) with the
    receiving side's hooks off too. The config overrides travel in the environment:
    `hardened_env`."""
    parts = list(argv)
    if not parts or parts[0] != "git":
        raise ValueError(f"not a git command: {parts[:1]}")
    index = 1
    while index < len(parts) and parts[index].startswith("-"):
        index += 2 if parts[index] in _TAKES_VALUE else 1
    head, rest = parts[1:index + 1], parts[index + 1:]
    command = parts[index] if index < len(parts) else ""
    extra = ["--no-ext-diff", "--no-textconv"] if command in _DIFFING else []
    if command == "push":
        extra = [f"--receive-pack={RECEIVE_PACK}"]
    elif command in _FETCHING:  # never a `remote.<name>.uploadpack` the config names
        extra = [f"--upload-pack={UPLOAD_PACK}"]
    return ["git", "--no-pager", *head, *extra, *rest]
