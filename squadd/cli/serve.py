"""`squadd serve`: run the repo's daemon, in the foreground or (`--detach`) in the background."""

from __future__ import annotations

from pathlib import Path

import click

from squadd.cli._provider import provider_options, provider_overrides
from squadd.cli._squad import TEXT, dir_option, find_layout, show_path

LOG_LEVELS = ("debug", "info", "warning", "error")


@click.command("serve")
@click.option("--tcp", type=TEXT, metavar="HOST:PORT", default=None,
              help="Also serve on TCP (loopback only, bearer token in .squad/run/token).")
@click.option("--allow-remote", is_flag=True,
              help="Allow --tcp on a non-loopback address (the token still guards it).")
@click.option("--ui", "ui", is_flag=True, default=None,
              help="Also serve the live dashboard on 127.0.0.1 ('squadd ui' opens it).")
@click.option("--ui-port", type=click.IntRange(0, 65535), default=None, metavar="N",
              help="The dashboard's port (implies --ui; default daemon.ui_port, 0 = any free).")
@click.option("--detach", is_flag=True,
              help="Run in the background; return once the daemon answers.")
@click.option("--cluster", "cluster_url", type=TEXT, default=None, metavar="URL",
              help="Coordinate 'squadd worker's through Redis at URL (redis://HOST:PORT/DB; "
                   "password: SQUADD_REDIS_PASSWORD or the secrets file).")
@click.option("--local-slots", type=click.IntRange(0, 4096), default=None, metavar="N",
              help="In cluster mode, sessions this daemon runs itself (default "
                   "cluster.local_slots, 0).")
@click.option("--log-level", type=click.Choice(LOG_LEVELS), default=None,
              help="Console log level (default: info; warning when detached). The JSON log "
                   "file uses daemon.log_level.")
@provider_options
@dir_option
def serve(tcp: str | None, allow_remote: bool, ui: bool | None, ui_port: int | None,
          detach: bool, cluster_url: str | None, local_slots: int | None,
          log_level: str | None,
          provider_kind: str | None, model: str | None, base_url: str | None,
          replay_file: Path | None, directory: Path | None) -> None:
    """Serve this repo's squad: the HTTP API on .squad/run/squadd.sock, the Scribe, the pool.

    One daemon per repo. Stop it with Ctrl-C, SIGTERM or 'squadd stop': running sessions get
    daemon.grace_s to finish, the rest are marked interrupted ('squadd sessions resume ID').

    \b
    Examples:
      squadd serve
      squadd serve --detach --provider openai --base-url http://127.0.0.1:11434/v1 \\
          --model llama3.1
      squadd serve --tcp 127.0.0.1:8765
      squadd serve --ui --ui-port 8766 && squadd ui --open
      squadd serve --cluster redis://redis.internal:6379/0 --local-slots 2
    """
    from squadd.config import load_settings

    layout = find_layout(directory)
    overrides = provider_overrides(provider_kind, base_url, replay_file, model)
    layers: dict[str, dict[str, object]] = {"provider": dict(overrides)} if overrides else {}
    if ui or ui_port is not None:
        layers["daemon"] = {"ui": True, **({"ui_port": ui_port} if ui_port is not None else {})}
    cluster: dict[str, object] = {}
    if cluster_url:
        cluster["url"] = cluster_url
    if local_slots is not None:
        cluster["local_slots"] = local_slots
    if cluster:
        layers["cluster"] = cluster
    settings = load_settings(layout.root, overrides=layers or None)
    if detach:
        from squadd.daemon.startup import parse_tcp, start_detached

        if tcp:
            parse_tcp(tcp, allow_remote=allow_remote)
        args = ["--dir", str(layout.repo), "--log-level", log_level or "warning"]
        for flag, value in (("--provider", provider_kind), ("--model", model),
                            ("--base-url", base_url), ("--tcp", tcp),
                            ("--cluster", cluster_url),
                            ("--local-slots", None if local_slots is None else str(local_slots)),
                            ("--replay-file", str(replay_file.resolve()) if replay_file else None)):
            if value:
                args += [flag, value]
        if allow_remote:
            args.append("--allow-remote")
        if ui:
            args.append("--ui")
        if ui_port is not None:
            args += ["--ui-port", str(ui_port)]
        pid = start_detached(layout, args)
        click.echo(f"squadd is serving {layout.repo} (PID {pid}); "
                   f"log: {show_path(layout.log_file)}")
        return
    from squadd.daemon.server import Daemon

    Daemon(layout, settings, tcp=tcp, allow_remote=allow_remote,
           console_level=log_level or "info", overrides=layers or None).run(until_exit=True)
