"""Logging setup: structlog over the standard library, readable lines for people on stderr and
JSON lines to a rotating file (the daemon's `.squad/run/squadd.log`).

Call `configure_logging` once at process start; library code only calls `structlog.get_logger`.
The caller passes the processor that redacts secrets (`SecretRegistry.redact_log_event` of the
registry its runtime's resolvers fill): it is required, so no process can log without it.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path
from typing import Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR, "critical": logging.CRITICAL}

_SHARED: list[structlog.types.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def configure_logging(
    *,
    redact: structlog.types.Processor,
    console_level: str = "warning",
    json_file: Path | None = None,
    file_level: str = "info",
    max_bytes: int = 10_485_760,
    backups: int = 3,
    console: bool = True,
) -> None:
    """Route every structlog and stdlib log line to stderr and, optionally, a JSON-lines file,
    each line passed through `redact` before it is rendered."""
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Loggers follow a later reconfiguration (a command that reconfigures, a test that
        # captures them): resolving the configuration per call costs microseconds.
        cache_logger_on_first_use=False,
    )
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    levels = []
    if console:
        stream = logging.StreamHandler(sys.stderr)
        stream.setLevel(_LEVELS[console_level])
        stream.setFormatter(_formatter(
            structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()), redact))
        root.addHandler(stream)
        levels.append(_LEVELS[console_level])
    if json_file is not None:
        json_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        rotating = _PrivateRotatingHandler(
            json_file, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        rotating.setLevel(_LEVELS[file_level])
        rotating.setFormatter(_formatter(structlog.processors.JSONRenderer(), redact))
        root.addHandler(rotating)
        levels.append(_LEVELS[file_level])
    root.setLevel(min(levels) if levels else logging.CRITICAL)
    # Libraries we use are chatty at INFO; their warnings still come through.
    for noisy in ("httpx", "httpcore", "uvicorn.access", "watchfiles"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class _PrivateRotatingHandler(logging.handlers.RotatingFileHandler):
    """The JSON log, each of its files created 0600 (what agents and tools did is private; the
    folder is run/, which the daemon keeps 0700). Here, not in `fsio`: logs sit below it."""

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                     0o600)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


def _formatter(renderer: structlog.types.Processor,
               redact: structlog.types.Processor) -> structlog.stdlib.ProcessorFormatter:
    """Render one handler's lines with `renderer`, secrets redacted first."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_SHARED,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, redact, renderer],
    )
