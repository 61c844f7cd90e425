"""`squadd worker`: run session jobs for a coordinator (`squadd serve --cluster`) on this host."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import click

from squadd import gitsafe
from squadd.cli._provider import provider_options, provider_overrides
from squadd.cli._squad import TEXT

if TYPE_CHECKING:
    from squadd.cluster.identity import SquadIdentity
    from squadd.config import Settings
    from squadd.state.layout import SquadLayout

CLONE_TIMEOUT_S = 600.0


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`git ARGS` in `cwd` with `squadd.gitsafe`'s overrides: a repository's hooks, filters
    and drivers never run in the worker's clone."""
    listed = subprocess.run(["git", *gitsafe.LIST_CONFIG], cwd=cwd, capture_output=True,
                            timeout=CLONE_TIMEOUT_S, check=False,
                            env=gitsafe.hardened_env(os.environ))
    defined = gitsafe.parse_listed(listed.stdout) if listed.returncode == 0 else []
    return subprocess.run(gitsafe.hardened_argv(["git", *args]), cwd=cwd, capture_output=True,
                          text=True, timeout=CLONE_TIMEOUT_S, check=False,
                          env=gitsafe.hardened_env(os.environ, defined))


def ensure_clone(repo: str, clone: Path, *, remake: bool) -> None:
    """Clone `repo` into `clone` the first time; later, bring it up to date (fast-forward
    only; a clone that cannot be fast-forwarded keeps its commit and says so). A folder there
    that is not a clone of `repo` (another origin, or none) is made again when `remake`
    (squadd's own cache), and refused otherwise (a `--workdir` the user chose); an empty
    folder is cloned into."""
    from squadd.cluster.identity import origin_of, repo_key

    if clone.exists() and not (clone.is_dir() and next(clone.iterdir(), None) is None):
        origin = origin_of(clone)
        if origin is not None and repo_key(origin) == repo_key(repo):
            done = _git(clone, "pull", "--ff-only", "--quiet")
            if done.returncode != 0:
                click.echo(f"warning: {clone} not updated: {done.stderr.strip()[:300]}",
                           err=True)
            return
        what = "is not a git clone" if origin is None else f"is a clone of {origin or '?'}"
        if not remake:
            raise click.ClickException(
                f"--workdir {clone} {what}, not of {repo}: give another folder, or empty "
                "this one")
        click.echo(f"{clone} {what}, not of {repo}: cloning it again", err=True)
        shutil.rmtree(clone)
    clone.parent.mkdir(parents=True, exist_ok=True)
    done = _git(clone.parent, "clone", "--quiet", repo, str(clone))
    if done.returncode != 0:
        raise click.ClickException(f"could not clone {repo} into {clone}: "
                                   f"{done.stderr.strip()[:500]}")


def check_squad(settings: Settings, layout: SquadLayout, password: str | None) -> SquadIdentity:
    """This clone's squad, after a check that the coordinator on this Redis (if one runs yet)
    serves the same squad; a `ClickException` naming both when not."""
    import socket

    import anyio

    from squadd.cluster.connection import RedisGuard, connect
    from squadd.cluster.identity import published_identity, read_identity
    from squadd.cluster.probe import shown

    cluster = settings.cluster
    mine = read_identity(layout.repo, layout.squad_id_file, host=socket.gethostname())

    async def theirs() -> SquadIdentity | None:
        client = connect(cluster.url, password)
        try:
            return await published_identity(RedisGuard(client, url=shown(cluster.url),
                                                       down_s=5.0))
        finally:
            await client.aclose()
    published = anyio.run(theirs)
    why = None if published is None else published.differs(mine)
    if published is not None and why is not None:
        raise click.ClickException(
            f"the coordinator at {shown(cluster.url)} serves another squad ({why}):\n"
            f"  coordinator: {published.named()}\n  this worker: {mine.named()}\n"
            "start the worker with --repo naming the coordinator's repository")
    if published is None:
        click.echo("no coordinator has published its squad on this Redis yet: jobs are "
                   "taken once one does, and only if it serves this repository", err=True)
    return mine


@click.command("worker")
@click.option("--cluster", "cluster_url", type=TEXT, required=True, metavar="URL",
              help="The coordinator's Redis (redis://HOST:PORT/DB; password: "
                   "SQUADD_REDIS_PASSWORD or the secrets file).")
@click.option("--repo", type=TEXT, required=True, metavar="GIT_URL_OR_PATH",
              help="The repository the coordinator serves; this worker keeps its own clone.")
@click.option("--slots", type=click.IntRange(1, 4096), default=8, show_default=True,
              help="Sessions this worker runs at once.")
@click.option("--name", type=TEXT, default=None,
              help="This worker's name in status and events (default: host-pid).")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the clone lives (default: one per repository and worker name, "
                   "under ~/.cache/squadd/workers/).")
@click.option("--log-level", type=click.Choice(("debug", "info", "warning", "error")),
              default="info", help="Console log level.")
@provider_options
def worker(cluster_url: str, repo: str, slots: int, name: str | None, workdir: Path | None,
           log_level: str, provider_kind: str | None, model: str | None,
           base_url: str | None, replay_file: Path | None) -> None:
    """Take session jobs from the coordinator's Redis and run them here, in a clone.

    The agent loop, model calls and custom and workspace tools run on this host; squad tools
    and transcripts go to the coordinator, the one writer of .squad/. Stop with Ctrl-C or
    SIGTERM: sessions running here are picked up by another worker after cluster.lease_s.

    \b
    Examples:
      squadd worker --cluster redis://redis.internal:6379/0 \\
          --repo git@github.com:acme/app.git --slots 8 --name build-1
    """
    import socket

    from squadd.cluster.connection import cluster_password
    from squadd.cluster.probe import probe
    from squadd.config import load_settings
    from squadd.contracts.names import is_safe_name

    name = name or f"{socket.gethostname()}-{os.getpid()}"
    if not is_safe_name(name.lower()):
        raise click.BadParameter(f"{name!r}: use letters, digits, '.', '_' or '-'",
                                 param_hint="--name")
    early = load_settings(None, overrides={"cluster": {"url": cluster_url}})
    probe(cluster_url, cluster_password(early))  # a wrong address fails before any clone

    from squadd.cluster.identity import clone_dir
    from squadd.logs import configure_logging
    from squadd.serving import run_serving
    from squadd.state.layout import SquadLayout
    from squadd.tools.secrets import SecretRegistry

    clone = clone_dir(name, workdir, repo)
    ensure_clone(repo, clone, remake=workdir is None)
    layout = SquadLayout.for_repo(clone)
    layers: dict[str, dict[str, object]] = {"cluster": {"url": cluster_url}}
    overrides = provider_overrides(provider_kind, base_url, replay_file, model)
    if overrides:
        layers["provider"] = dict(overrides)
    settings = load_settings(layout.root if layout.root.is_dir() else None, overrides=layers)
    # The worker's tools read their variables from the environment (no resolver remembers
    # secrets here): the registry stays empty; the processor is required all the same.
    identity = check_squad(settings, layout, cluster_password(settings))
    configure_logging(redact=SecretRegistry().redact_log_event, console_level=log_level)
    from squadd import telemetry
    from squadd.runtime.tracing import start_tracing

    start_tracing(settings.telemetry)  # a job's spans continue its route's trace
    try:
        run_serving(_serve, name, slots, layout, settings, identity)
    finally:
        telemetry.shutdown()


async def _serve(name: str, slots: int, layout: SquadLayout, settings: Settings,
                 identity: SquadIdentity) -> None:
    import anyio
    import structlog

    from squadd.cluster import workers
    from squadd.cluster.connection import RedisGuard, cluster_password, connect
    from squadd.gc_tuning import tune_for_serving
    from squadd.providers.factory import make_provider
    from squadd.worker.process import Worker

    cluster = settings.cluster
    client = connect(cluster.url, cluster_password(settings))
    guard = RedisGuard(client, url=cluster.url, down_s=cluster.redis_down_s)
    provider = make_provider(settings.provider, cwd=layout.repo)
    the_worker = Worker(name=name, slots=slots, layout=layout, settings=settings,
                        provider=provider, guard=guard, identity=identity)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(the_worker.run)
            tune_for_serving()  # as the daemon does once it serves
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    # Its jobs stay pending in Redis: another worker takes each once its lease
                    # has run out.
                    structlog.get_logger("squadd.worker").info(
                        "worker stopping", worker=name, signal=signal.Signals(signum).name,
                        jobs_left=the_worker.jobs_running,
                        back_within_s=cluster.lease_s + cluster.heartbeat_s)
                    the_worker.stopping.set()
                    tg.cancel_scope.cancel()
                    break
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            try:
                await workers.forget(guard, name)
            finally:
                await provider.aclose()
                await client.aclose()
