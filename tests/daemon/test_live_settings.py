"""Settings that change while the daemon runs, through a real daemon: a change on disk, SIGHUP
and `squadd reload` apply `[workspace]` (the next landing runs the new land_check) and the
pool limits at once; a change that needs a restart is logged and shown by `squadd status`; a
file that does not load is refused with its key, and the running settings stay."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from squadd.config import Settings, load_settings
from squadd.contracts.events import SettingsReloaded
from squadd.daemon.live_settings import LiveSettings
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import init_squad
from tests.runtime.scripted import Recorder
from tests.support.daemon_process import DaemonProcess
from tests.support.landing import set_config, wait_for_event, worktree_daemon, writer
from tests.support.model_servers import OpenAIServer

FAILING_CHECK = 'land_check = "echo no-landing-today; exit 7"\n'


pytestmark = pytest.mark.daemon(build=worktree_daemon, responder=writer)


def landing_code(daemon: DaemonProcess, name: str) -> int:
    done = daemon.squadd("route", "lead", f"write {name} x", "--land", "--json", timeout=120)
    assert json.loads(done.stdout)["ok"], done.stdout
    return done.returncode


def last_seq(daemon: DaemonProcess) -> int:
    recent = list(daemon.client.events(recent=1, follow=False))
    return int(recent[-1]["seq"]) if recent else 0


@pytest.mark.slow
def test_an_edited_config_file_is_applied_without_a_command(daemon: DaemonProcess) -> None:
    since = last_seq(daemon)
    set_config(daemon, FAILING_CHECK)
    reloaded = wait_for_event(daemon, "settings.reloaded", since=since)
    assert reloaded["why"] == "changed on disk" and not reloaded["error"]
    assert "workspace.land_check" in reloaded["applied"]
    assert landing_code(daemon, "a.txt") == 3


@pytest.mark.slow
def test_sighup_rereads_the_user_config_and_the_next_landing_uses_the_new_check(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    """The user config's folder did not exist when the daemon started (so it is not watched):
    only the signal makes the daemon read it."""
    assert landing_code(daemon, "a.txt") == 0
    since = last_seq(daemon)
    user_config = tmp_path / "xdg-config" / "squadd" / "config.toml"
    user_config.parent.mkdir(parents=True)
    user_config.write_text("[workspace]\n" + FAILING_CHECK, encoding="utf-8")
    daemon.signal(signal.SIGHUP)
    reloaded = wait_for_event(daemon, "settings.reloaded", since=since)
    assert reloaded["why"] == "SIGHUP"
    assert "workspace.land_check" in reloaded["applied"]
    assert landing_code(daemon, "b.txt") == 3
    assert daemon.proc is not None and daemon.proc.poll() is None  # SIGHUP did not stop it


@pytest.mark.slow
def test_squadd_reload_applies_pool_limits_and_reports_what_needs_a_restart(
        daemon: DaemonProcess) -> None:
    since = last_seq(daemon)
    set_config(daemon, "\n[pool]\nmax_concurrent = 3\n\n[route]\nmax_depth = 5\n")
    reloaded = daemon.squadd("reload", "--json")
    assert reloaded.returncode == 0, reloaded.stderr
    answer = json.loads(reloaded.stdout)
    # Applied by this reload, or by the file watcher's just before it.
    applied = wait_for_event(daemon, "settings.reloaded", since=since)
    assert "pool.max_concurrent" in applied["applied"]
    assert answer["restart_needed"] == ["route.max_depth changed on disk: restart to apply"]
    status = daemon.squadd("status")
    assert "/3 running" in status.stdout
    assert "settings: route.max_depth changed on disk: restart to apply" in status.stdout
    assert "route.max_depth changed on disk: restart to apply" in daemon.output
    set_config(daemon, "")  # back as it started: nothing waits for a restart any more
    assert daemon.squadd("reload").returncode == 0
    assert "restart to apply" not in daemon.squadd("status").stdout


@pytest.mark.slow
def test_a_bad_file_is_refused_naming_the_key_and_the_running_settings_stay(
        tmp_path: Path) -> None:
    with OpenAIServer(responder=writer) as server, \
            worktree_daemon(tmp_path, server.url) as daemon:
        set_config(daemon, FAILING_CHECK)
        assert daemon.squadd("reload").returncode == 0
        set_config(daemon, 'land_check = ""\nland_chek = "typo"\n')
        refused = daemon.squadd("reload")
        assert refused.returncode == 1
        assert "unknown key 'workspace.land_chek'" in refused.stderr
        assert str(daemon.layout.config_toml) in refused.stderr
        status = daemon.squadd("status")
        assert status.returncode == 0
        assert "unknown key 'workspace.land_chek'" in status.stdout
        assert "the running settings stay" in status.stdout
        assert landing_code(daemon, "a.txt") == 3  # still the check it had
        set_config(daemon, "")
        assert daemon.squadd("reload").returncode == 0
        assert "land_chek" not in daemon.squadd("status").stdout
        assert landing_code(daemon, "b.txt") == 0


class Target:
    """What the settings are applied to, as the runtime takes them (a fixed-size limiter:
    `pool.max_concurrent` is the key it cannot apply)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.applied: list[Settings] = []
        self.changed = anyio.Event()

    def apply_settings(self, settings: Settings) -> list[str]:
        kept = ["pool.max_concurrent"] if \
            settings.pool.max_concurrent != self.settings.pool.max_concurrent else []
        if kept:
            settings = settings.model_copy(update={"pool": settings.pool.model_copy(
                update={"max_concurrent": self.settings.pool.max_concurrent})})
        self.settings = settings
        self.applied.append(settings)
        self.changed.set()
        return kept


def _live(tmp_path: Path) -> tuple[SquadLayout, Target, Recorder, LiveSettings]:
    (tmp_path / "repo").mkdir()
    layout = SquadLayout.at(init_squad(tmp_path / "repo").squad_dir)
    user = tmp_path / "user.toml"
    target = Target(load_settings(layout.root, user_file=user))
    events = Recorder()
    return layout, target, events, LiveSettings(layout, target, events, user_file=user)


async def test_a_reload_applies_live_keys_and_keeps_the_rest_for_a_restart(
        tmp_path: Path) -> None:
    layout, target, events, live = _live(tmp_path)
    layout.config_toml.write_text('[workspace]\nland_check = "make test"\n[pool]\n'
                                  'max_concurrent = 3\nmax_queued = 7\n[provider]\n'
                                  'kind = "anthropic"\n', encoding="utf-8")
    reloaded = await live.reload("squadd reload")
    assert reloaded.ok and reloaded.applied == ["pool.max_queued", "workspace.land_check"]
    assert reloaded.restart_needed == ["pool.max_concurrent", "provider.kind"]
    assert target.settings.workspace.land_check == "make test"
    assert target.settings.pool.max_queued == 7 and target.settings.pool.max_concurrent == 8
    assert target.settings.provider.kind == "openai"
    assert live.report()["restart_needed"] == [
        "pool.max_concurrent changed on disk: restart to apply",
        "provider.kind changed on disk: restart to apply"]
    [event] = events.of("settings.reloaded")
    assert isinstance(event, SettingsReloaded) and event.why == "squadd reload"
    again = await live.reload("changed on disk")  # nothing new: applied nothing, said nothing
    assert again.ok and again.applied == [] and len(events.of("settings.reloaded")) == 1
    assert len(target.applied) == 1


async def test_a_file_that_does_not_load_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    layout, target, events, live = _live(tmp_path)
    before = target.settings
    layout.config_toml.write_text("[workspace]\nland_check = 'x'\nland_chek = 'y'\n",
                                  encoding="utf-8")
    refused = await live.reload("SIGHUP")
    assert not refused.ok and "unknown key 'workspace.land_chek'" in refused.error
    assert str(layout.config_toml) in refused.error
    assert target.settings is before and target.applied == []
    [event] = events.of("settings.reloaded")
    assert event.why == "SIGHUP" and "land_chek" in event.error and event.applied == []
    assert "the running settings stay" in live.report()["error"]
    layout.config_toml.write_text("[workspace]\nland_check = 'x'\n", encoding="utf-8")
    assert (await live.reload("SIGHUP")).ok and live.report()["error"] == ""
    assert target.settings.workspace.land_check == "x"


async def test_watch_reloads_on_a_change_and_ends_when_closed(tmp_path: Path) -> None:
    layout, target, events, live = _live(tmp_path)
    async with anyio.create_task_group() as group:
        await group.start(live.watch)
        layout.config_toml.write_text("[tools]\ntimeout_s = 9.0\n", encoding="utf-8")
        with anyio.fail_after(30):
            await target.changed.wait()
        assert target.settings.tools.timeout_s == 9.0
        live.close()  # the watcher returns by itself: the group ends without a cancel
    [event] = events.of("settings.reloaded")
    assert event.why == "changed on disk" and event.applied == ["tools.timeout_s"]


async def test_a_file_written_in_place_is_read_once_it_has_stopped_changing(
        tmp_path: Path) -> None:
    layout, target, events, _ = _live(tmp_path)
    layout.config_toml.write_text("[tools]\ntimeout_s = 9.0\n", encoding="utf-8")
    target.settings = load_settings(layout.root, user_file=tmp_path / "user.toml")
    pauses: list[float] = []

    async def writer_finishes_during_the_pause(seconds: float) -> None:
        # A tool writing the file in place: emptied (below), its text written only now, while
        # the watcher waits for the file to settle.
        pauses.append(seconds)
        if len(pauses) == 1:
            layout.config_toml.write_text("[tools]\ntimeout_s = 7.0\n", encoding="utf-8")
        await anyio.lowlevel.checkpoint()

    live = LiveSettings(layout, target, events, user_file=tmp_path / "user.toml",
                        settle_sleep=writer_finishes_during_the_pause)
    async with anyio.create_task_group() as group:
        await group.start(live.watch)
        layout.config_toml.write_text("", encoding="utf-8")  # truncated: valid, all defaults
        with anyio.fail_after(30):
            await target.changed.wait()
        live.close()
    # The empty file was never applied: the first settings applied are the finished file's,
    # read after its stats stayed the same over a pause.
    assert target.applied[0].tools.timeout_s == 7.0
    assert len(pauses) >= 2 and all(pause == pauses[0] for pause in pauses)
    assert events.of("settings.reloaded")[0].applied == ["tools.timeout_s"]


async def test_a_close_while_a_file_settles_ends_the_watch_without_reading_it(
        tmp_path: Path) -> None:
    layout, target, events, _ = _live(tmp_path)
    pauses: list[float] = []

    async def still_being_written(seconds: float) -> None:
        pauses.append(seconds)
        layout.config_toml.write_text(f"[tools]\ntimeout_s = {len(pauses)}.0\n",
                                      encoding="utf-8")
        if len(pauses) == 2:
            live.close()
        await anyio.lowlevel.checkpoint()

    live = LiveSettings(layout, target, events, user_file=tmp_path / "user.toml",
                        settle_sleep=still_being_written)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            await group.start(live.watch)
            layout.config_toml.write_text("[tools]\ntimeout_s = 9.0\n", encoding="utf-8")
    # The file never settled: closed on the second pause, the watch ended without a reload.
    assert len(pauses) == 2 and target.applied == [] and events.of("settings.reloaded") == []
