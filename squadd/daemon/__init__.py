"""The daemon: `squadd serve`'s HTTP API (`app`), its lifecycle (`server`) and the CLI's `client`.

Nothing is imported here, so that `from squadd.daemon.client import DaemonClient` stays cheap.
"""
