"""Budgets: what a session has used and has left, and what a call may reserve.

Steps, tokens (prompt + completion), cost (micro-dollars, priced per model) and active time
(wall time since the first call, minus pauses longer than ``idle_gap_secs`` so a human
approving a step is not billed as agent time). The pipeline accounts; the budget guard
decides; both read the same numbers from here. The last of every budget belongs to the
ending: the call that would use it is the ending (see :func:`session_limits`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from proxy.books.pricing import MICROS, Price, PriceTable
from proxy.errors import InvalidRequest
from proxy.exchange import Conversation
from proxy.policy.models import Policy
from proxy.request import AgentRequest
from proxy.session.base import FIELDS, Limit, SessionDelta, SessionState, WindowLimit

__all__ = [
    "TENANT_DAY_TTL_SECS",
    "Remaining",
    "active_ms",
    "active_pause_ms",
    "check_output_cap",
    "check_request_cap",
    "day_limits",
    "ending_tokens",
    "estimate_tokens",
    "remaining",
    "session_limits",
    "step_seconds",
    "tenant_day_key",
    "tenant_day_limits",
    "tenant_day_settlement",
    "worst_cost_micros",
    "worst_tokens",
]


@dataclass(frozen=True, slots=True)
class Remaining:
    """What is left of each configured budget (None: that budget is not set)."""

    steps: int
    tokens: int | None
    cost_usd: float | None
    seconds: float | None

    def header(self) -> str:
        """Compact form for ``X-LoopWarden-Budget-Remaining``."""
        parts = [f"steps={self.steps}"]
        if self.tokens is not None:
            parts.append(f"tokens={self.tokens}")
        if self.cost_usd is not None:
            parts.append(f"cost={self.cost_usd:.4f}")
        if self.seconds is not None:
            parts.append(f"seconds={self.seconds:.0f}")
        return ";".join(parts)


def tokens_used(state: SessionState) -> int:
    return state.counter(FIELDS.TOKENS_IN) + state.counter(FIELDS.TOKENS_OUT)


def active_ms(state: SessionState, now: float, idle_gap_secs: float) -> int:
    """Active time so far, counting the pause since the last call only if it was short."""
    return state.counter(FIELDS.ACTIVE_MS) + active_pause_ms(state, now, idle_gap_secs)


def active_pause_ms(state: SessionState, now: float, idle_gap_secs: float) -> int:
    """The pause since the session's last call, if short enough to count as active (else 0)."""
    last = state.counter(FIELDS.LAST_SEEN_MS)
    gap = int(now * 1000) - last if last else 0
    return gap if 0 < gap <= idle_gap_secs * 1000 else 0


def remaining(state: SessionState, policy: Policy, now: float) -> Remaining:
    """What is left, the policy's budgets raised by what the sessions API granted the session."""
    budgets = policy.budgets
    return Remaining(
        steps=policy.max_steps + state.counter(FIELDS.GRANTED_STEPS) - state.steps,
        tokens=None
        if budgets.max_tokens is None
        else budgets.max_tokens + state.counter(FIELDS.GRANTED_TOKENS) - tokens_used(state),
        cost_usd=None
        if budgets.max_cost_usd is None
        else budgets.max_cost_usd + (state.counter(FIELDS.GRANTED_COST) - state.counter(FIELDS.COST_MICROS)) / MICROS,
        seconds=None
        if budgets.max_active_secs is None
        else budgets.max_active_secs
        + (state.counter(FIELDS.GRANTED_ACTIVE_MS) - active_ms(state, now, budgets.idle_gap_secs)) / 1000,
    )


def check_request_cap(request: AgentRequest, enforce: bool, prices: PriceTable) -> None:
    """A 400 for a request that no budget could ever admit (its output limit alone is over):
    the session's budgets (enforced only) and the API key's daily caps."""
    budgets = request.policy.budgets
    session_tokens, session_cost = (budgets.max_tokens, budgets.max_cost_usd) if enforce else (None, None)
    caps = (session_tokens, session_cost, request.daily_tokens, request.daily_cost_usd)
    if caps == (None, None, None, None):
        return  # no cap at all: the common case
    costs = {"API key's daily cost cap": request.daily_cost_usd, "session's cost budget": session_cost}
    check_output_cap(
        request.conversation,
        {"API key's daily token cap": request.daily_tokens, "session's token budget": session_tokens},
        costs,
        prices.price(request.conversation.model) if any(v is not None for v in costs.values()) else None,
    )
    if request.daily_tokens is not None or request.daily_cost_usd is not None:
        _check_day_caps(request, prices)


def _check_day_caps(request: AgentRequest, prices: PriceTable) -> None:
    """A 400 for a request whose worst case (what the day's admission reserves: its prompt
    plus its output limit, or the policy's ``reserve_tokens`` without one) is over a daily cap
    on its own: a 429 saying the day frees up later would never come true."""
    worst = worst_tokens(request)
    asked = request.conversation.output_cap
    output = asked[1] if asked is not None else request.policy.budgets.reserve_tokens
    prompt = worst - output
    source = (
        f"its {asked[0]} {output}"
        if asked is not None
        else f"{output} the policy reserves (budgets.reserve_tokens) for a request that sets no output limit"
    )
    param = asked[0] if asked is not None else "max_tokens"
    if request.daily_tokens is not None and worst > request.daily_tokens:
        room = request.daily_tokens - prompt
        fix = f"Set {param} to at most {room}, or raise" if room > 0 else "Its prompt alone is over it: raise"
        fix += " the cap (daily_tokens in the tenants file)."
        raise InvalidRequest(
            f"This request may use up to {worst} tokens (about {prompt} of prompt plus {source}), more than the "
            f"API key's daily token cap of {request.daily_tokens} tokens: it can never fit. {fix}",
            param=param,
        )
    if request.daily_cost_usd is not None and worst_cost_micros(request, prices) > request.daily_cost_usd * MICROS:
        raise InvalidRequest(
            f"This request may use up to {worst} tokens (about {prompt} of prompt plus {source}), which at this "
            f"model's price costs more than the API key's daily cost cap of ${request.daily_cost_usd:.2f}: it can "
            f"never fit. Lower {param}, or raise the cap (daily_cost_usd in the tenants file).",
            param=param,
        )


def check_output_cap(
    conversation: Conversation,
    caps: Mapping[str, int | None],
    cost_caps: Mapping[str, float | None] | None = None,
    price: Price | None = None,
) -> None:
    """Refuse (400) a request whose output limit alone exceeds a token cap, or costs more than
    a cost cap at the model's completion price: waiting cannot make it fit, so neither a 429
    with ``Retry-After`` nor ending the session would help.

    ``caps`` maps a cap's name as the client reads it (e.g. "API key's daily token cap") to
    its size in tokens, ``cost_caps`` to USD (None: not set).
    """
    asked = conversation.output_cap
    if asked is None:
        return
    name, value = asked
    for cap, limit in caps.items():
        if limit is not None and value > limit:
            raise InvalidRequest(
                f"{name} is {value}, more than the {cap} ({limit} tokens): this request can never fit. "
                f"Lower {name} to at most {limit}.",
                param=name,
            )
    if price is None or not price.completion or not cost_caps:
        return
    for cap, usd in cost_caps.items():
        if usd is not None and value * price.completion > usd * MICROS:
            fits = int(usd * MICROS / price.completion)
            raise InvalidRequest(
                f"{name} is {value}: at this model's completion price that alone costs more than the "
                f"{cap} (${usd:.2f}), so this request can never fit. Lower {name} to at most {fits}.",
                param=name,
            )


def estimate_tokens(conversation: Conversation, body_size: int, policy: Policy) -> int:
    """A call's worst case: its prompt (about 4 bytes a token) plus its output cap."""
    asked = conversation.output_cap
    return body_size // 4 + (asked[1] if asked is not None else policy.budgets.reserve_tokens)


def worst_tokens(request: AgentRequest) -> int:
    """The request's worst case in tokens (:func:`estimate_tokens`), worked out once per request
    however many budgets reserve it (the session's, the tenant's day)."""
    if request.worst_tokens is None:
        request.worst_tokens = estimate_tokens(request.conversation, len(request.body), request.policy)
    return request.worst_tokens


def worst_cost_micros(request: AgentRequest, prices: PriceTable) -> int:
    """The request's worst case in micro-dollars: its worst tokens at the dearer of the model's
    prompt and completion prices (0 for a model the table does not price)."""
    price = prices.price(request.conversation.model)
    return 0 if price is None else round(worst_tokens(request) * max(price.prompt, price.completion))


def ending_tokens(body_size: int, policy: Policy, *, local: bool = False) -> int:
    """The worst case of a budget ending after a call of ``body_size`` bytes: the summary call
    resends about that prompt, its output capped at ``finalize.max_tokens``. Nothing when the
    ending is built locally (``local``, or ``finalize.use_upstream: false``)."""
    finalize = policy.finalize
    if local or not finalize.use_upstream:
        return 0
    return body_size // 4 + (finalize.max_tokens or policy.budgets.reserve_tokens)


def session_limits(request: AgentRequest, prices: PriceTable, *, fresh: bool = False) -> list[Limit]:
    """The reservations one call makes: its step, and its worst case against the session's
    token and cost budgets. A ``fresh`` session (its state starts empty, nothing to exceed)
    reserves nothing unless it has token or cost budgets to check: no round trip for it.

    The last of a budget is the ending's: a call is admitted only if its worst case leaves
    room for an ending after it (one step; the summary call's tokens and cost). The call that
    does not is refused, and so becomes the ending, within the budget: a client whose own
    cap equals ``max_steps`` never receives a tool call it cannot answer. Each limit is raised
    by what the session was granted, read in the admission's own atomic step."""
    policy = request.policy
    budgets = policy.budgets
    limits = [_steps_limit(policy.max_steps)]
    if budgets.max_tokens is not None:
        limits.append(
            Limit(
                "budget_tokens",
                (FIELDS.TOKENS_IN, FIELDS.TOKENS_OUT),
                FIELDS.RESERVED_TOKENS,
                worst_tokens(request),
                budgets.max_tokens - ending_tokens(len(request.body), policy),
                FIELDS.GRANTED_TOKENS,
            )
        )
    if budgets.max_cost_usd is not None:
        price = prices.price(request.conversation.model)
        rate = 0 if price is None else max(price.prompt, price.completion)
        ending = ending_tokens(len(request.body), policy, local=budgets.hard_cost_cap)
        limits.append(
            Limit(
                "budget_cost",
                (FIELDS.COST_MICROS,),
                FIELDS.RESERVED_COST,
                worst_cost_micros(request, prices),
                round(budgets.max_cost_usd * MICROS) - round(ending * rate),
                FIELDS.GRANTED_COST,
            )
        )
    return [] if fresh and len(limits) == 1 else limits


@functools.lru_cache(maxsize=64)
def _steps_limit(max_steps: int) -> Limit:
    """Every call's step reservation: the same (immutable) limit for every call of a policy,
    made once, not on every call."""
    return Limit("budget_steps", (FIELDS.STEPS,), FIELDS.RESERVED_STEPS, 1, max_steps - 1, FIELDS.GRANTED_STEPS)


def step_seconds(state: SessionState, now: float, idle_gap_secs: float) -> float:
    """The active time one step of this session takes on average (its tools' time included):
    what a further step is expected to use of a time budget. 0 before the first step."""
    steps = state.steps
    return active_ms(state, now, idle_gap_secs) / 1000 / steps if steps else 0.0


# -- the tenant's rolling day -----------------------------------------------------------

TENANT_DAY_TTL_SECS = 86_400 + 3_600
"""A tenant's day hash outlives the window it covers by its last hourly bucket."""
_DAILY_TOKENS = "t:"
_DAILY_COST = "c:"


def tenant_day_key(tenant: str) -> str:
    """The tenant's rolling-day budget hash (its own hash tag; never a session's key)."""
    return f"lw:{{{tenant}}}:daily"


def tenant_day_limits(request: AgentRequest, prices: PriceTable) -> list[WindowLimit]:
    """The tenant's daily caps this call must fit in, each reserving the call's worst case."""
    if request.daily_tokens is None and request.daily_cost_usd is None:
        return []
    worst_cost = worst_cost_micros(request, prices) if request.daily_cost_usd is not None else 0
    return day_limits(request.daily_tokens, request.daily_cost_usd, worst_tokens(request), worst_cost)


def day_limits(
    daily_tokens: int | None, daily_cost_usd: float | None, tokens: int, cost_micros: int
) -> list[WindowLimit]:
    """The tenant's daily caps (None: not set), reserving ``tokens`` and ``cost_micros``. A
    pass-through call reserves 1 of each: what it will spend is unknown before its reply (an
    audio upload's size says nothing of its tokens), so it is refused once the day is spent
    and books what its reply reports."""
    limits = []
    if daily_tokens is not None:
        limits.append(WindowLimit("daily_tokens", _DAILY_TOKENS, "reserved_tokens", tokens, daily_tokens))
    if daily_cost_usd is not None:
        limits.append(
            WindowLimit("daily_cost", _DAILY_COST, "reserved_cost", cost_micros, round(daily_cost_usd * MICROS))
        )
    return limits


def tenant_day_settlement(delta: SessionDelta, started: float, limits: Sequence[WindowLimit]) -> SessionDelta:
    """Give back the tenant reservations and book what the request really used, in the hour it started."""
    settle = SessionDelta()
    hour = int(started // 3600)
    for limit in limits:
        settle.incr(limit.reserved, -limit.amount)
        if limit.prefix == _DAILY_TOKENS:
            used = delta.increments.get(FIELDS.TOKENS_IN, 0) + delta.increments.get(FIELDS.TOKENS_OUT, 0)
        else:
            used = delta.increments.get(FIELDS.COST_MICROS, 0)
        if used:
            settle.incr(f"{limit.prefix}{hour}", used)
    return settle
