"""The policy as each mechanism reads it: bwrap's command line and Landlock's allow-lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from squadd.config import Settings, load_settings
from squadd.sandbox import SandboxPolicy, build_policy, bwrap
from squadd.sandbox.bwrap import bwrap_argv
from squadd.sandbox.landlock import cover, landlock_spec
from squadd.tools.sandboxing import policy_for


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("k")
    (home / ".netrc").write_text("machine x")
    (home / "code").mkdir()
    repo = tmp_path / "repo"
    (repo / ".git" / "hooks").mkdir(parents=True)
    (repo / ".squad" / "run").mkdir(parents=True)
    (repo / "src").mkdir()
    return home, repo


def test_bwrap_binds_the_worktree_writable_and_hides_what_is_denied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The test's folders live under /tmp, which the private /tmp would hide whole.
    monkeypatch.setattr(bwrap, "PRIVATE_TMP", tmp_path / "elsewhere")
    home, repo = _tree(tmp_path)
    policy = build_policy(mode="bwrap", network=False, workspace=repo, repo=repo,
                          squad_dir=repo / ".squad", home=home, writable=["~/code"])
    argv = bwrap_argv(policy, ["bash", "-c", "true"])
    pairs = [tuple(argv[i:i + 3]) for i in range(len(argv) - 2)]
    assert ("--bind", str(repo), str(repo)) in pairs
    assert ("--bind", str(home / "code"), str(home / "code")) in pairs
    assert ("--ro-bind", str(repo / ".git"), str(repo / ".git")) in pairs
    assert ("--ro-bind", str(repo / ".squad"), str(repo / ".squad")) in pairs
    assert ("--tmpfs", str(home / ".ssh"), "--remount-ro") in pairs
    assert ("--tmpfs", str(repo / ".squad" / "run"), "--remount-ro") in pairs
    assert ("--ro-bind", "/dev/null", str(home / ".netrc")) in pairs
    # Later mounts win: the worktree is bound before its .git is made read-only again, and
    # the denied paths go last.
    assert argv.index(str(repo / ".git")) > argv.index("--bind")
    for flag in ("--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[-4:] == ["--", "bash", "-c", "true"]
    allowed = build_policy(mode="bwrap", network=True, workspace=repo, repo=repo,
                           squad_dir=repo / ".squad", home=home)
    assert "--unshare-net" not in bwrap_argv(allowed, ["true"])


def test_landlock_allows_everything_but_the_denied_paths(tmp_path: Path) -> None:
    home, repo = _tree(tmp_path)
    (home / "link-to-ssh").symlink_to(home / ".ssh")
    rules = dict(cover(tmp_path, [home / ".ssh", repo / ".squad" / "run"]))
    assert str(home / ".ssh") not in rules and str(home / "link-to-ssh") not in rules
    assert str(home) not in rules and str(home / "code") in rules
    assert rules[str(home / ".netrc")] is True  # a file
    assert str(repo / "src") in rules and str(repo / ".squad" / "run") not in rules


def test_landlock_write_rules_leave_out_git_and_the_squad_with_isolation_none(
        tmp_path: Path) -> None:
    home, repo = _tree(tmp_path)
    policy = build_policy(mode="landlock", network=False, workspace=repo, repo=repo,
                          squad_dir=repo / ".squad", home=home)
    spec = landlock_spec(policy, tmp_path / "private-tmp")
    written = [path for path, _ in spec["write"]]
    assert str(repo / "src") in written and str(tmp_path / "private-tmp") in written
    assert not any(p.startswith(str(repo / ".git")) or p.startswith(str(repo / ".squad"))
                   for p in written)
    assert not any(p.startswith(str(home / ".ssh")) for p, _ in spec["read"])
    assert spec["network"] is False


def test_an_agents_network_setting_overrides_the_squads(tmp_path: Path) -> None:
    _, repo = _tree(tmp_path)
    settings = load_settings(None, overrides={"agents": {"ops": {"network": "on"}}},
                             environ={}, user_file=tmp_path / "none.toml")
    assert settings.sandbox.network == "off" and settings.sandbox.mode == "auto"
    ops = policy_for(settings, agent="ops", workspace=repo, repo=repo, squad_dir=repo / ".squad")
    dev = policy_for(settings, agent="dev", workspace=repo, repo=repo, squad_dir=repo / ".squad")
    assert ops.network and not dev.network
    assert ops.describe("bwrap")["network_from"] == "agents.ops.network"


def test_the_launchers_options_carry_the_whole_spec() -> None:
    from squadd.sandbox import launcher

    spec = {"cgroup": "/sys/fs/cgroup/pids/x/cgroup.procs", "fsize": 1 << 20, "nproc": 70,
            "landlock": {"read": [("/usr", False), ("/etc/hosts", True)],
                         "write": [("/work tree", False)], "devices": [("/dev", False)],
                         "network": True}}
    options = launcher.encode(spec)
    assert launcher.decode([*options, "bash", "-c", "echo --read"]) == (
        spec, ["bash", "-c", "echo --read"])


def test_the_seatbelt_profile_says_the_same_policy(tmp_path: Path) -> None:
    """Only as text: Seatbelt is macOS's, and these tests run on Linux."""
    from squadd.sandbox.seatbelt import profile

    home, repo = _tree(tmp_path)
    policy = build_policy(mode="auto", network=False, workspace=repo, repo=repo,
                          squad_dir=repo / ".squad", home=home)
    text = profile(policy, tmp_path / "tmp")
    lines = text.splitlines()
    assert lines[:2] == ["(version 1)", "(deny default)"]
    denied_read = next(line for line in lines if line.startswith("(deny file-read*"))
    assert f'(subpath "{home / ".ssh"}")' in denied_read
    assert f'(literal "{home / ".netrc"}")' in denied_read
    writes = next(line for line in lines if line.startswith("(allow file-write*"))
    assert f'(subpath "{repo}")' in writes
    protected = next(line for line in lines if line.startswith("(deny file-write*"))
    assert f'(subpath "{repo / ".git"}")' in protected
    assert "(allow network* (local unix-socket))" in lines and "(allow network*)" not in lines


def test_a_charters_sandbox_section_sets_its_agents_network(tmp_path: Path) -> None:
    from tests.tools.conftest import make_squad

    layout = make_squad(tmp_path / "repo", agents=("ops", "dev"))
    charter = layout.charter("ops")
    charter.write_text(charter.read_text() + "\n## Sandbox\n- network: on (it deploys)\n")
    settings = load_settings(None, environ={}, user_file=tmp_path / "none.toml")
    repo = layout.repo

    def policy(agent: str, chosen: Settings) -> SandboxPolicy:
        return policy_for(chosen, agent=agent, workspace=repo, repo=repo, squad_dir=layout.root)

    assert policy("ops", settings).network and not policy("dev", settings).network
    assert policy("ops", settings).describe("bwrap")["network_from"] == \
        "charter of ops (## Sandbox)"
    # [agents.NAME] network wins over the charter.
    off = load_settings(None, overrides={"agents": {"ops": {"network": "off"}}}, environ={},
                        user_file=tmp_path / "none.toml")
    assert not policy("ops", off).network
