"""The event sink a running session publishes through.

It forwards every event to the bus and keeps the pool's record of the session current: the
session turns `active` with its first message, and each message updates its last activity and
its token counts, so `squad_status` shows live numbers. A publish from a worker thread reaches
the loop (which owns the pool's records) the bus's one way, `EventBus.on_loop`.
"""

from __future__ import annotations

from squadd.contracts.events import BaseEvent, SessionMessage
from squadd.runtime.events import EventBus
from squadd.runtime.pool import SessionPool, SessionRecord
from squadd.runtime.session import AgentSession


class SessionSink:
    def __init__(self, bus: EventBus, pool: SessionPool, record: SessionRecord):
        self.bus = bus
        self.pool = pool
        self.record = record
        self.session: AgentSession | None = None
        self._base = (record.input_tokens, record.output_tokens)

    def publish(self, event: BaseEvent) -> None:
        # a session publishes from a worker thread while it re-reads its transcript: the
        # pool's record is only touched on the event loop
        self.bus.on_loop(self._publish, event)

    def _publish(self, event: BaseEvent) -> None:
        if isinstance(event, SessionMessage):
            record = self.record
            if record.state == "creating":
                self.pool.activate(record)
            else:
                self.pool.touch(record)
            if event.role == "assistant" and self.session is not None:
                usage = self.session.usage
                record.input_tokens = self._base[0] + usage.input_tokens
                record.output_tokens = self._base[1] + usage.output_tokens
        self.bus.publish(event)
