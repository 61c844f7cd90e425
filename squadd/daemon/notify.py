"""Notifications of new inbox items: `notify.command` (the item as JSON on stdin, through the
one process runner) and `notify.webhook` (a POST of the item, signed with HMAC-SHA256 of the
raw body in `X-Squadd-Signature: sha256=<hex>`, keyed by `SQUADD_WEBHOOK_SECRET` or that line
of the secrets file, never by anything under `.squad/`).

The inbox hook only queues the item (bounded); one worker sends, each channel with a timeout
and retries with backoff (tenacity). A channel that told someone is recorded in the inbox log,
so an item notifies once: a restart sends what was pending and never sends anything twice.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable, Mapping

import anyio
import httpx
import structlog
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from squadd.config import NotifySettings, Settings
from squadd.errors import ChannelFailed
from squadd.procs import Command, run_group
from squadd.runtime.inbox import Inbox
from squadd.state.inbox_items import InboxItem
from squadd.tools.variables import SecretsFile, secrets_file_path

log = structlog.get_logger("squadd.notify")

SECRET_VAR = "SQUADD_WEBHOOK_SECRET"
SIGNATURE_HEADER = "X-Squadd-Signature"
QUEUE_SIZE = 1024
"""Items waiting to be sent at most; past it an item is left for the next start to send."""
MAX_OUTPUT = 65536


def signature(secret: str, body: bytes) -> str:
    """The `X-Squadd-Signature` value of `body`: `sha256=<hex HMAC>`."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def webhook_secret(settings: Settings, environ: Mapping[str, str] | None = None) -> str | None:
    """The webhook key: `SQUADD_WEBHOOK_SECRET`, else that line of the secrets file."""
    env = os.environ if environ is None else environ
    if env.get(SECRET_VAR):
        return env[SECRET_VAR]
    return SecretsFile(secrets_file_path(settings, env)).read().values.get(SECRET_VAR) or None




def item_body(item: InboxItem) -> bytes:
    return json.dumps({"event": "inbox.added", "item": item.model_dump(mode="json")},
                      separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class Notifier:
    """Sends each new inbox item to the configured channels, once."""

    def __init__(self, settings: Settings, inbox: Inbox, *,
                 transport: httpx.AsyncBaseTransport | None = None,
                 secret: Callable[[], str | None] | None = None):
        self.settings: NotifySettings = settings.notify
        self.inbox = inbox
        self.channels = [name for name, on in (("command", bool(self.settings.command)),
                                               ("webhook", bool(self.settings.webhook))) if on]
        self._secret = secret if secret is not None else (lambda: webhook_secret(settings))
        self._transport = transport
        self._send, self._receive = anyio.create_memory_object_stream[str](QUEUE_SIZE)

    def hook(self, item: InboxItem) -> None:
        """The inbox hook: queue the item (never blocks; a full queue leaves it for later)."""
        if not self.channels:
            return
        try:
            self._send.send_nowait(item.id + ("!" if item.escalated else ""))
        except anyio.WouldBlock:
            log.warning("notification queue full; sent at the next start", item=item.id)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                  ) -> None:
        """Send what an earlier run left pending, then each new item, until cancelled."""
        task_status.started()
        if not self.channels:
            return
        for pending in self.inbox.items():
            if any(c not in pending.notified for c in self.channels):
                self.hook(pending)
        async with self._client() as client, self._receive:
            async for queued in self._receive:
                await self.deliver(queued.rstrip("!"), escalated=queued.endswith("!"),
                                   client=client)

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=self._transport, timeout=self.settings.timeout_s)

    async def deliver(self, item_id: str, *, escalated: bool = False,
                      client: httpx.AsyncClient | None = None) -> list[str]:
        """Send one item to each channel that has not told anyone of it yet; the channels
        that got it through now."""
        item = self.inbox.get(item_id)
        if item is None or not item.open:  # answered before anyone was told
            return []
        if client is None:
            async with self._client() as own:
                return await self.deliver(item_id, escalated=escalated, client=own)
        return [channel for channel in self.channels
                if await self._deliver(client, item, channel, escalated)]

    async def _deliver(self, client: httpx.AsyncClient, item: InboxItem, channel: str,
                       escalated: bool) -> bool:
        mark = f"{channel}:escalated" if escalated else channel
        if mark in item.notified:
            return False
        body = item_body(item)
        try:
            async for attempt in AsyncRetrying(
                    stop=stop_after_attempt(self.settings.attempts),
                    wait=wait_random_exponential(multiplier=self.settings.backoff_s,
                                                 max=max(self.settings.backoff_s * 32, 1.0)),
                    retry=retry_if_exception_type(ChannelFailed), reraise=True):
                with attempt:
                    if channel == "command":
                        await self._run_command(body)
                    else:
                        await self._post(client, body)
        except ChannelFailed as exc:
            log.warning("notification not delivered", item=item.id, channel=channel,
                        attempts=self.settings.attempts, error=str(exc))
            return False
        await anyio.to_thread.run_sync(self.inbox.store.notified, item.id, mark)
        return True

    async def _run_command(self, body: bytes) -> None:
        output = _Capped()
        try:
            outcome = await run_group(
                Command(argv=self.settings.command, cwd=self.inbox.layout.repo, env=None,
                        stdin=body),
                output, deadline=anyio.current_time() + self.settings.timeout_s)
        except OSError as exc:
            raise ChannelFailed(f"notify.command cannot start: {exc}") from None
        if outcome.timed_out:
            raise ChannelFailed(f"notify.command ran past {self.settings.timeout_s:g} s")
        if outcome.exit_code != 0:
            raise ChannelFailed(f"notify.command exited {outcome.exit_code}: "
                                f"{output.text()[-500:]}")

    async def _post(self, client: httpx.AsyncClient, body: bytes) -> None:
        headers = {"content-type": "application/json"}
        secret = await anyio.to_thread.run_sync(self._secret)
        if secret:
            headers[SIGNATURE_HEADER] = signature(secret, body)
        try:
            response = await client.post(self.settings.webhook, content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise ChannelFailed(f"notify.webhook: {type(exc).__name__}: {exc}") from None
        if response.status_code >= 300:
            raise ChannelFailed(f"notify.webhook answered {response.status_code}")

    def close(self) -> None:
        self._send.close()


class _Capped:
    def __init__(self) -> None:
        self._data = bytearray()

    async def write(self, data: bytes) -> None:
        room = MAX_OUTPUT - len(self._data)
        if room > 0:
            self._data += data[:room]

    def text(self) -> str:
        return self._data.decode("utf-8", "replace")



class HookRelay:
    """Each new inbox item to the `Notification` hooks (`SquadRuntime.notify`), in the
    background: the inbox's hook only queues it (bounded; a full queue drops it, logged)."""

    def __init__(self, notify: Callable[..., Awaitable[None]]):
        self._notify = notify
        self._send, self._receive = anyio.create_memory_object_stream[InboxItem](QUEUE_SIZE)

    def hook(self, item: InboxItem) -> None:
        try:
            self._send.send_nowait(item)
        except anyio.WouldBlock:
            log.warning("Notification hooks busy; item not told to them", item=item.id)

    async def run(self) -> None:
        async with self._receive:
            async for item in self._receive:
                try:
                    await self._notify(item.reason, notification_type=item.kind,
                                       session_id=item.session_id or "", agent=item.agent,
                                       title=f"squadd inbox: {item.kind}")
                except Exception:  # a hook's trouble is logged; the daemon goes on
                    log.exception("Notification hooks failed", item=item.id)
