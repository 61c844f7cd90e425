"""Discovery: where tools are found, which wins, what failed and why, and freshness."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from squadd.config import Settings, ToolsSettings
from squadd.contracts.events import ToolsLoadFailed
from squadd.statcache import NotCached
from squadd.state.layout import SquadLayout
from squadd.tools.discovery import ToolDiscoverer, tool_dirs, user_tools_dir
from squadd.tools.python.calls import SpareWorkers, kill_group
from tests.tools.custom_tools import Recorder, call, discover, write

GREET = '''
from squadd import tool

@tool
def greet(name: str) -> str:
    """Say hello."""
    return "{where} hello " + name
'''


def _user_dir() -> Path:
    return Path(os.environ["XDG_CONFIG_HOME"]) / "squadd" / "tools"


def test_user_dir_honours_xdg_config_home() -> None:
    assert user_tools_dir() == _user_dir()
    assert user_tools_dir({"XDG_CONFIG_HOME": "/x"}) == Path("/x/squadd/tools")


async def test_project_tool_shadows_user_tool_of_the_same_name(layout: SquadLayout) -> None:
    project = write(layout.tools_dir, "greet.py", GREET.replace("{where}", "project"))
    user = write(_user_dir(), "greet.py", GREET.replace("{where}", "user"))
    found = discover(layout)
    assert [t.name for t in found.tools] == ["greet"]
    assert found.tools[0].source == "project" and found.tools[0].file == project
    [lost] = found.shadowed
    assert lost.tool.source == "user" and lost.tool.file == user
    assert lost.by is found.tools[0] and str(project) in lost.reason
    result = await call(layout, found.toolset(), "greet", {"name": "ada"})
    assert result.text == "project hello ada"


async def test_two_files_with_the_same_stem_do_not_share_a_module(layout: SquadLayout) -> None:
    write(layout.tools_dir, "helpers.py", '''
        from squadd import tool
        STATE = "project"

        @tool(name="project_state")
        def state() -> str:
            return STATE
        ''')
    write(_user_dir(), "helpers.py", '''
        from squadd import tool
        STATE = "user"

        @tool(name="user_state")
        def state() -> str:
            return STATE
        ''')
    found = discover(layout)
    assert sorted(t.name for t in found.tools) == ["project_state", "user_state"]
    assert (await call(layout, found.toolset(), "project_state")).text == "project"
    assert (await call(layout, found.toolset(), "user_state")).text == "user"


def test_load_failures_are_reported_and_the_rest_load(layout: SquadLayout) -> None:
    write(layout.tools_dir, "good.py", GREET.replace("{where}", "p"))
    broken = write(layout.tools_dir, "broken.py", "def oops(:\n    pass\n")
    bad_key = write(layout.tools_dir, "bad.yaml", """
        description: Has a key nobody knows
        bash: echo hi
        colour: blue
        """)
    raising = write(layout.tools_dir, "raises.py", "import sys\nsys.exit('no thanks')\n")
    write(layout.tools_dir, "fine.yaml", "description: Fine\nbash: echo fine\n")
    sink = Recorder()
    found = discover(layout, sink=sink)
    assert sorted(t.name for t in found.tools) == ["fine", "good"]
    reasons = {f.file: f.reason for f in found.failures}
    assert reasons[broken].startswith("syntax error at line 1")
    assert reasons[bad_key] == "unknown key 'colour'"
    assert "SystemExit: no thanks" in reasons[raising]
    events = {e.file: e.reason for e in sink.of(ToolsLoadFailed)}
    assert events == {str(path): reason for path, reason in reasons.items()}


def test_a_failure_is_published_once_until_it_changes(layout: SquadLayout) -> None:
    path = write(layout.tools_dir, "bad.yaml", "bash: echo hi\n")
    discoverer = ToolDiscoverer()
    first, second = Recorder(), Recorder()
    discoverer.discover(layout, Settings(), first)
    discoverer.discover(layout, Settings(), second)
    assert len(first.of(ToolsLoadFailed)) == 1 and second.of(ToolsLoadFailed) == []
    path.write_text("description: now fine\nbash: echo hi\nnope: 1\n", encoding="utf-8")
    third = Recorder()
    discoverer.discover(layout, Settings(), third)
    assert [e.reason for e in third.of(ToolsLoadFailed)] == ["unknown key 'nope'"]


def test_a_file_with_no_tool_is_a_failure_that_says_how_to_declare_one(
        layout: SquadLayout) -> None:
    path = write(layout.tools_dir, "plain.py", "X = 1\n")
    write(layout.tools_dir, "_helper.py", "X = 2\n")  # leading underscore: not a tool file
    found = discover(layout)
    assert [(f.file, f.reason) for f in found.failures] == [
        (path, "no tools in this file: decorate a function with @tool "
               "(from squadd import tool)")]


def test_naming_one_tool_takes_the_stem_several_take_stem_underscore_name(
        layout: SquadLayout) -> None:
    write(layout.tools_dir, "solo.py", "from squadd import tool\n\n@tool\n"
                                       "def anything() -> str:\n    return 'x'\n")
    write(layout.tools_dir, "git.py", '''
        from squadd import tool

        @tool
        def status() -> str:
            return "s"

        @tool
        def log() -> str:
            return "l"

        @tool(name="blame_it")
        def blame() -> str:
            return "b"
        ''')
    names = sorted(t.name for t in discover(layout).tools)
    assert names == ["blame_it", "git_log", "git_status", "solo"]


async def test_new_and_changed_files_are_seen_by_the_next_discovery(layout: SquadLayout) -> None:
    discoverer = ToolDiscoverer()
    assert discoverer.discover(layout, Settings()).tools == ()
    path = write(layout.tools_dir, "greet.py", GREET.replace("{where}", "v1"))
    found = discoverer.discover(layout, Settings())
    assert (await call(layout, found.toolset(), "greet", {"name": "a"})).text == "v1 hello a"
    first_tool = found.tools[0]
    again = discoverer.discover(layout, Settings())
    assert again.tools[0] is first_tool  # unchanged file: not loaded again
    path.write_text(GREET.replace("{where}", "v2").lstrip(), encoding="utf-8")
    changed = discoverer.discover(layout, Settings())
    assert (await call(layout, changed.toolset(), "greet", {"name": "a"})).text == "v2 hello a"
    path.unlink()
    assert discoverer.discover(layout, Settings()).tools == ()


def test_a_known_discovery_loads_nothing_and_says_when_it_would_have_to(
        layout: SquadLayout) -> None:
    discoverer = ToolDiscoverer(SpareWorkers(keep=0))
    path = write(layout.tools_dir, "greet.py", GREET.replace("{where}", "v1"))
    with pytest.raises(NotCached):  # never loaded
        discoverer.known(layout, Settings())
    [loaded] = discoverer.discover(layout, Settings()).tools
    [cached] = discoverer.known(layout, Settings()).tools
    assert cached is loaded
    write(layout.tools_dir, "wave.py", GREET.replace("greet", "wave"))
    with pytest.raises(NotCached):  # a new file
        discoverer.known(layout, Settings())
    assert {t.name for t in discoverer.discover(layout, Settings()).tools} == {"greet", "wave"}
    path.write_text(GREET.replace("{where}", "v2").lstrip(), encoding="utf-8")
    with pytest.raises(NotCached):  # a changed file
        discoverer.known(layout, Settings())


class _Listings:
    """Counts the listings of one folder (`os.scandir` of it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
        self.count = 0
        real = os.scandir

        def counting(path: Any = ".") -> Any:
            if Path(path) == folder:
                self.count += 1
            return real(path)

        monkeypatch.setattr(os, "scandir", counting)


def _settled(folder: Path) -> None:
    """Give `folder` a modification time a minute ago (its ctime stays now)."""
    then = time.time() - 60
    os.utime(folder, (then, then))


def test_an_unchanged_folder_is_not_listed_again_and_a_new_file_in_it_is_found(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    discoverer = ToolDiscoverer(SpareWorkers(keep=0))
    write(layout.tools_dir, "greet.yaml", "description: Greet\nbash: echo hi\n")
    _settled(layout.tools_dir)
    listings = _Listings(monkeypatch, layout.tools_dir)
    assert [t.name for t in discoverer.discover(layout, Settings()).tools] == ["greet"]
    assert [t.name for t in discoverer.known(layout, Settings()).tools] == ["greet"]
    assert listings.count == 1  # the second start took the listing it kept
    write(layout.tools_dir, "wave.yaml", "description: Wave\nbash: echo hi\n")
    with pytest.raises(NotCached):  # the folder changed: listed again, a new file found
        discoverer.known(layout, Settings())
    assert {t.name for t in discoverer.discover(layout, Settings()).tools} == {"greet", "wave"}
    assert listings.count == 3
    # Changed just now: a file added in the same tick of the file system's clock would leave
    # its modification time as it is, so the listing is not kept until the change settles.
    discoverer.known(layout, Settings())
    assert listings.count == 4
    (layout.tools_dir / "wave.yaml").unlink()
    _settled(layout.tools_dir)
    assert [t.name for t in discoverer.discover(layout, Settings()).tools] == ["greet"]


def test_a_folder_recently_changed_or_holding_a_link_is_listed_at_every_start(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [time.time_ns()]
    discoverer = ToolDiscoverer(SpareWorkers(keep=0), now_ns=lambda: clock[0])
    target = write(layout.repo / "elsewhere", "greet.yaml", "description: Greet\nbash: echo hi\n")
    layout.tools_dir.mkdir(parents=True, exist_ok=True)
    listings = _Listings(monkeypatch, layout.tools_dir)
    discoverer.discover(layout, Settings())
    discoverer.known(layout, Settings())
    assert listings.count == 2  # modified 0 s before the listing: not kept
    clock[0] += 10 * 10**9
    discoverer.known(layout, Settings())
    discoverer.known(layout, Settings())
    assert listings.count == 3  # settled by then: kept
    (layout.tools_dir / "greet.yaml").symlink_to(target)
    _settled(layout.tools_dir)
    clock[0] += 10 * 10**9
    assert [t.name for t in discoverer.discover(layout, Settings()).tools] == ["greet"]
    discoverer.known(layout, Settings())
    assert listings.count == 5  # a link's target may change kind unseen: never kept


def test_a_missing_folder_is_stated_not_listed(layout: SquadLayout,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    discoverer = ToolDiscoverer(SpareWorkers(keep=0))
    shutil.rmtree(layout.tools_dir, ignore_errors=True)
    listings = _Listings(monkeypatch, layout.tools_dir)
    assert discoverer.discover(layout, Settings()).tools == ()
    assert listings.count == 0
    write(layout.tools_dir, "greet.yaml", "description: Greet\nbash: echo hi\n")
    assert [t.name for t in discoverer.discover(layout, Settings()).tools] == ["greet"]
    assert listings.count == 1


def test_a_known_discovery_never_waits_for_one_in_a_thread(layout: SquadLayout) -> None:
    discoverer = ToolDiscoverer(SpareWorkers(keep=0))
    write(layout.tools_dir, "greet.py", GREET.replace("{where}", "v1"))
    discoverer.discover(layout, Settings())
    with discoverer._lock, pytest.raises(NotCached):  # another thread is discovering
        discoverer.known(layout, Settings())


def test_a_known_discovery_leaves_starting_a_spare_worker_to_a_thread(
        layout: SquadLayout) -> None:
    workers = SpareWorkers(keep=1)
    discoverer = ToolDiscoverer(workers)
    try:
        write(layout.tools_dir, "greet.py", GREET.replace("{where}", "v1"))
        discoverer.discover(layout, Settings())
        assert workers.ready()
        worker = workers.take()  # a call took the spare
        assert worker is not None and not workers.ready()
        with pytest.raises(NotCached):
            discoverer.known(layout, Settings())
        kill_group(worker)
    finally:
        discoverer.close()


def test_extra_dirs_come_last_and_may_be_relative_to_the_repo(layout: SquadLayout,
                                                               tmp_path: Path) -> None:
    write(layout.repo / "more-tools", "extra.yaml", "description: Extra\nbash: echo x\n")
    write(tmp_path / "abs", "greet.py", GREET.replace("{where}", "abs"))
    write(layout.tools_dir, "greet.py", GREET.replace("{where}", "project"))
    settings = Settings(tools=ToolsSettings(extra_dirs=["more-tools", str(tmp_path / "abs")]))
    found = discover(layout, settings)
    assert [d.source for d in tool_dirs(layout, settings)] == [
        "project", "user", "extra", "extra", "cycod-project", "cycod-user", "cycod-global"]
    assert {t.name: t.source for t in found.tools} == {"greet": "project", "extra": "extra"}
    assert [s.tool.source for s in found.shadowed] == ["extra"]


def test_a_folder_named_twice_is_searched_once_and_the_environment_is_read_each_time(
        layout: SquadLayout, tmp_path: Path) -> None:
    write(layout.tools_dir, "greet.py", GREET.replace("{where}", "project"))
    (tmp_path / "link").symlink_to(layout.tools_dir)
    settings = Settings(tools=ToolsSettings(extra_dirs=[
        str(tmp_path / "link"), str(layout.tools_dir), str(tmp_path / "missing"),
        str(tmp_path / "missing")]))
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "one"), "HOME": str(tmp_path)}
    assert [(d.source, d.path) for d in tool_dirs(layout, settings, environ)][:3] == [
        ("project", layout.tools_dir), ("user", tmp_path / "one" / "squadd" / "tools"),
        ("extra", tmp_path / "missing")]
    environ["XDG_CONFIG_HOME"] = str(tmp_path / "two")
    assert tool_dirs(layout, settings, environ)[1].path == tmp_path / "two" / "squadd" / "tools"


def test_a_builtin_name_cannot_be_taken_and_is_listed_as_shadowed(layout: SquadLayout) -> None:
    write(layout.tools_dir, "squad_decide.yaml", "description: Mine\nbash: echo x\n")
    found = discover(layout, builtin_names=["squad_decide"])
    assert found.tools == ()
    assert [(s.tool.name, s.by, s.reason) for s in found.shadowed] == [
        ("squad_decide", None, "a builtin tool has this name")]


def test_a_tool_for_another_platform_is_skipped_not_failed(layout: SquadLayout) -> None:
    write(layout.tools_dir, "win.yaml", "description: W\nbash: dir\nplatforms: [windows]\n")
    found = discover(layout)
    assert found.tools == () and found.failures == ()
    assert [s.name for s in found.skipped] == ["win"] and "windows" in found.skipped[0].reason


def test_loading_python_tools_writes_no_bytecode_into_the_squad(layout: SquadLayout) -> None:
    write(layout.tools_dir, "greet.py", GREET.replace("{where}", "p"))
    discover(layout)
    assert not (layout.tools_dir / "__pycache__").exists()


def test_a_use_tool_to_a_missing_tool_fails_that_tool_only(layout: SquadLayout) -> None:
    path = write(layout.tools_dir, "outer.yaml", """
        description: Uses a tool that is not there
        steps:
          - name: a
            use-tool: ghost
        """)
    write(layout.tools_dir, "ok.yaml", "description: Ok\nbash: echo ok\n")
    found = discover(layout)
    assert [t.name for t in found.tools] == ["ok"]
    assert [(f.file, f.reason) for f in found.failures] == [
        (path, "tool outer uses 'ghost', which is no tool")]


def test_a_cycle_of_use_tool_steps_is_a_load_failure(layout: SquadLayout) -> None:
    write(layout.tools_dir, "a.yaml", "description: A\nsteps:\n  - name: s\n    use-tool: b\n")
    write(layout.tools_dir, "b.yaml", "description: B\nsteps:\n  - name: s\n    use-tool: a\n")
    found = discover(layout)
    assert found.tools == ()
    assert all("cycle" in f.reason or "failed to load" in f.reason for f in found.failures)
    assert len(found.failures) == 2


async def test_tool_files_may_use_postponed_annotations_and_their_own_models(
        layout: SquadLayout) -> None:
    write(layout.tools_dir, "weather.py", '''
        from __future__ import annotations

        from pydantic import BaseModel, Field

        from squadd import ToolContext, tool


        class Where(BaseModel):
            city: str = Field(description="City name")
            days: int = Field(1, ge=1, le=7)


        def forecast(args: Where, ctx: ToolContext) -> str:
            return f"{args.city}: sunny for {args.days} day(s)"


        weather = tool(name="weather", label="Weather", description="Forecast",
                       args=Where, execute=forecast)


        @tool
        def wind(speed: int, ctx: ToolContext | None = None) -> str:
            """Describe a wind speed."""
            return "calm" if speed < 5 else "windy"
        ''')
    found = discover(layout)
    assert found.failures == ()
    assert sorted(t.name for t in found.tools) == ["weather", "weather_wind"]
    tools = found.toolset()
    assert (await call(layout, tools, "weather", {"city": "Oslo", "days": 2})).text == \
        "Oslo: sunny for 2 day(s)"
    assert (await call(layout, tools, "weather_wind", {"speed": 9})).text == "windy"
    bad = await call(layout, tools, "weather", {"city": "Oslo", "days": 9})
    assert not bad.ok and "- days:" in bad.text


def test_a_yaml_tool_with_a_bad_name_says_so_once(layout: SquadLayout) -> None:
    path = write(layout.tools_dir, "x.yaml", "name: 'two words'\ndescription: d\nbash: echo\n")
    [failure] = discover(layout).failures
    assert failure.file == path
    assert failure.reason.startswith("tool name 'two words' is not allowed")


def test_a_file_name_that_is_not_utf8_is_a_failure_that_says_so(layout: SquadLayout) -> None:
    write(layout.tools_dir, "fine.py", GREET.format(where="project"))
    (layout.tools_dir / os.fsdecode(b"caf\xe9.py")).write_text(
        GREET.format(where="project"), encoding="utf-8")
    found = discover(layout)
    assert [t.name for t in found.tools] == ["fine"]
    (failure,) = found.failures
    assert "file name is not valid UTF-8" in failure.reason


def test_a_python_tool_whose_schema_is_not_plain_json_is_a_load_failure(
        layout: SquadLayout) -> None:
    write(layout.tools_dir, "fine.py", GREET.format(where="project"))
    write(layout.tools_dir, "nan_default.py", '''
        from squadd import tool

        @tool
        def nan_default(ratio: float = float("nan")) -> str:
            """Take a ratio."""
            return str(ratio)
    ''')
    found = discover(layout)
    assert [t.name for t in found.tools] == ["fine"]
    (failure,) = found.failures
    assert failure.file.name == "nan_default.py" and "not plain JSON" in failure.reason
