"""Budgets and spending around each model call (the sessions' `CallGuard`).

Before a call: what is spent (the ledger) plus the call's worst case (its prompt's estimated
tokens and `max_tokens` of output, at the model's price) against each limit of `[budget]`,
plus what `squadd inbox approve ID --budget +N` granted. A breach parks the session in the
inbox (reason `budget`) until a person raises the limit or grants more; nothing is cut off
mid-call. After a call: its cost in the ledger (durable) and a `model.called` event.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from squadd.config import BudgetSettings, PriceSettings, Settings
from squadd.contracts.events import ModelCalled
from squadd.contracts.messages import AssistantMessage, Completion, Usage
from squadd.providers.base import CompletionRequest
from squadd.runtime.events import EventBus
from squadd.runtime.inbox import Inbox
from squadd.runtime.session_info import SessionInfo
from squadd.state.spending import Spend, SpendingLedger, cost_of, price_for, shown_cost

CHARS_PER_TOKEN = 4
"""A prompt's size estimate: about four characters a token (English text and JSON)."""


@dataclass(frozen=True)
class Breach:
    scope: str
    """`day`, `agent`, `route` or `session`."""
    key: str
    limit: float
    spent: float
    worst: float
    unit: str
    setting: str

    def reason(self) -> str:
        if self.unit == "tokens":
            return (f"per_session_tokens: {self.spent:.0f} tokens used + up to {self.worst:.0f} "
                    f"for the next call would pass the limit of {self.limit:.0f}")
        return (f"{self.setting}: {shown_cost(self.spent)} spent + up to {shown_cost(self.worst)} "
                f"for the next call would pass the limit of {shown_cost(self.limit)}")


def prompt_estimate(request: CompletionRequest) -> int:
    """Tokens the request's prompt may take: its text and tool schemas, by size."""
    size = 0
    for message in request.messages:
        size += len(message.content)
        if isinstance(message, AssistantMessage):
            size += sum(len(c.name) + len(json.dumps(c.arguments)) for c in message.tool_calls)
    size += sum(len(json.dumps(spec.parameters)) + len(spec.description) + len(spec.name)
                for spec in request.tools)
    return size // CHARS_PER_TOKEN + 1


MAX_PRICED = 256
"""Model names whose price `Spending` remembers (a model name comes from outside)."""


class Spending:
    """The `CallGuard` of the daemon's sessions."""

    def __init__(self, settings: Settings, ledger: SpendingLedger, inbox: Inbox, bus: EventBus,
                 *, provider: str, default_model: str = ""):
        self.settings = settings
        self.budget: BudgetSettings = settings.budget
        self.pricing: dict[str, PriceSettings] = dict(settings.pricing)
        self._prices: dict[str, PriceSettings | None] = {}
        """Each model's price as `price_for` finds it in `pricing` (which is replaced whole)."""
        self.ledger = ledger
        self.inbox = inbox
        self.bus = bus
        self.provider = provider
        self.default_model = default_model

    def reload(self, settings: Settings) -> None:
        """Take new limits and prices (a person raised a limit in the settings)."""
        self.budget, self.pricing = settings.budget, dict(settings.pricing)
        self._prices = {}

    def price(self, model: str) -> PriceSettings | None:
        name = model or self.default_model
        try:
            return self._prices[name]
        except KeyError:
            pass
        price = price_for(self.pricing, self.provider, name)
        if len(self._prices) >= MAX_PRICED:
            self._prices.clear()
        self._prices[name] = price
        return price

    def root_of(self, info: SessionInfo) -> str:
        return self.root_for(info)

    # CallGuard.
    async def before_call(self, info: SessionInfo, request: CompletionRequest) -> str | None:
        while True:
            breach = self.breach(info, request)
            if breach is None:
                return None
            item = await self.inbox.add(
                "parked", f"budget: {breach.reason()}", agent=info.agent,
                session_id=info.session_id, route=self.root_of(info),
                key=f"budget:{info.session_id}",
                details={"scope": breach.scope, "key": breach.key, "limit": breach.limit,
                         "spent": breach.spent, "worst": breach.worst, "unit": breach.unit,
                         "setting": f"budget.{breach.setting}"})
            if item.open:
                item = await self.inbox.wait_parked(
                    item, "budget", cleared=lambda: self.breach(info, request) is None)
            if (item.resolution or {}).get("action") == "dismiss":
                # A person chose to stop it here: the session ends, its work kept.
                return (f"stopped at its budget by a person ({breach.reason()}); the "
                        "transcript has the work so far")

    def breach(self, info: SessionInfo, request: CompletionRequest) -> Breach | None:
        """The first limit the call could pass, or None."""
        budget = self.budget
        if not (budget.per_session_tokens or budget.per_route_usd or budget.per_agent_usd
                or budget.per_day_usd):
            return None  # no limit: nothing to estimate
        prompt = prompt_estimate(request)
        if budget.per_session_tokens:
            used = self.ledger.session(info.session_id).tokens
            worst = prompt + request.max_tokens
            limit = budget.per_session_tokens + self.inbox.granted("session", info.session_id)
            if used + worst > limit:
                return Breach("session", info.session_id, limit, used, worst, "tokens",
                              "per_session_tokens")
        money = [(budget.per_route_usd, "route", self.root_of(info), "per_route_usd"),
                 (budget.per_agent_usd, "agent", f"{info.agent}@{self.ledger.day}",
                  "per_agent_usd"),
                 (budget.per_day_usd, "day", self.ledger.day, "per_day_usd")]
        if not any(limit for limit, *_ in money):
            return None
        price = self.price(request.model or info.model)
        worst_cost = cost_of(Usage(input_tokens=prompt, output_tokens=request.max_tokens), price)
        for limit, scope, key, setting in money:
            if not limit:
                continue
            if scope == "route":
                spent = self.ledger.route(key).usd
            elif scope == "agent":
                spent = self.ledger.agent_today(info.agent).usd
            else:
                spent = self.ledger.today().usd
            allowed = limit + self.inbox.granted(scope, key)
            if worst_cost is None:  # a price nobody knows cannot be kept under a limit
                return Breach(scope, key, allowed, spent, float("inf"), "usd", setting)
            if spent + worst_cost > allowed:
                return Breach(scope, key, allowed, spent, worst_cost, "usd", setting)
        return None

    async def after_call(self, info: SessionInfo, request: CompletionRequest,
                         completion: Completion, message_id: str) -> float | None:
        model = request.model or info.model or completion.model or self.default_model
        return self.charge(info, self.root_of(info), model, completion.usage,
                           message_id, reported_model=completion.model)

    def cost(self, model: str, usage: Usage) -> float | None:
        """What `usage` of `model` costs at the configured prices (None: it has no price),
        rounded as a message record and the events give it."""
        cost = cost_of(usage, self.price(model))
        return None if cost is None else round(cost, 8)

    def charge(self, info: SessionInfo, root: str, model: str, usage: Usage, message_id: str,
               *, reported_model: str = "") -> float | None:
        """Count one model call of `info`'s session in the ledger and the events; its cost
        (None: the model has no price). A cluster worker's calls come here through the
        coordinator, which keeps the ledger."""
        price = self.price(model) or (self.price(reported_model) if reported_model else None)
        cost = cost_of(usage, price)
        spend = Spend(ts=time.time(), session_id=info.session_id, agent=info.agent, root=root,
                      provider=self.provider, model=model, input_tokens=usage.input_tokens,
                      output_tokens=usage.output_tokens,
                      cache_read_tokens=usage.cache_read_tokens,
                      cache_write_tokens=usage.cache_write_tokens, cost_usd=cost,
                      message_id=message_id)
        if not usage.input_tokens and not usage.output_tokens:
            self.ledger.count(spend)  # nothing used (a model that reports no usage)
        else:
            self.ledger.record_soon(spend)
        self.bus.publish(ModelCalled(
            session_id=info.session_id, agent=info.agent, provider=self.provider, model=model,
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens,
            cost_usd=None if cost is None else round(cost, 8), route=root))
        return None if cost is None else round(cost, 8)

    def root_for(self, info: SessionInfo) -> str:
        """The route tree `info`'s session belongs to (known, or its parent's, or its own)."""
        known = self.ledger.root_of(info.session_id)
        if known is not None:
            return known
        parent = info.parent_session_id
        root = (self.ledger.root_of(parent) or parent) if parent else info.session_id
        self.ledger.note_root(info.session_id, root)
        return root

    def answered_later(self, session_id: str, call_id: str) -> bool:
        return self.inbox.answer_for(session_id, call_id) is not None

