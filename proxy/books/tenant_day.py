"""The tenant's rolling day for pass-through calls: refused once spent, booked with what replies report.

The guarded routes admit and settle the tenant's day in the ledger, with the session's books.
A pass-through call (``/v1/completions``, ``/v1/embeddings``, ``/v1/batches``...) has no
session, but spends from the same day: one admission before it is forwarded (reserving one
token and one micro-dollar, see :func:`proxy.books.budgets.day_limits`: what it will spend is
unknown until its reply), one settlement after, booking the usage its reply reports. Tenants
without daily caps pay no round trip at all. A store failure follows the fail mode of the
tenant's default policy: ``open`` forwards unbooked, ``closed`` answers 503.
"""

from __future__ import annotations

import asyncio
import logging

from proxy.books.budgets import TENANT_DAY_TTL_SECS, day_limits, tenant_day_key, tenant_day_settlement
from proxy.books.pricing import MICROS, PriceTable
from proxy.errors import RateLimited, ServiceUnavailable
from proxy.exchange import Usage
from proxy.observe.logs import log_event
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy
from proxy.session.base import FIELDS, Admission, SessionDelta, SessionStore, StoreUnavailable, WindowLimit

__all__ = ["PASSTHROUGH_KIND", "TenantDay", "day_refusal"]

PASSTHROUGH_KIND = "passthrough"
"""The ``kind`` label of the tokens a pass-through call used (``loopwarden_tokens``)."""


def day_refusal(metrics: Metrics, tenant: str, policy: str, admission: Admission) -> RateLimited:
    """The 429 for a call that does not fit the tenant's day, counted and logged: the same on
    every route, guarded or passed through."""
    refused = admission.refused or "daily"
    retry_after = str(int(admission.retry_after or 60))
    log_event("tenant_budget_refused", {"tenant": tenant, "limit": refused})
    metrics.terminations.labels(tenant, policy, "tenant_" + refused).inc()
    return RateLimited(
        f"This API key's {refused.replace('_', ' ')} budget is used up for now; "
        f"capacity frees up in {retry_after} seconds.",
        headers={"Retry-After": retry_after, "x-should-retry": "false"},
    )


class TenantDay:
    """Admits pass-through calls to the tenant's day and books what they used."""

    def __init__(self, store: SessionStore, metrics: Metrics, prices: PriceTable) -> None:
        self._store = store
        self._metrics = metrics
        self._prices = prices

    async def admit(
        self, tenant: str, daily_tokens: int | None, daily_cost_usd: float | None, policy: Policy, now: float
    ) -> list[WindowLimit]:
        """Reserve a spending call's place in the tenant's day (429 once it is spent); the
        limits to settle, empty when there is nothing to settle."""
        limits = day_limits(daily_tokens, daily_cost_usd, 1, 1)
        if not limits:
            return []
        try:
            admission = await self._store.admit_window(tenant_day_key(tenant), limits, now)
        except StoreUnavailable as exc:
            self._failed(tenant, policy, "admit_tenant", exc)
            if policy.state_fail_mode == "closed":
                raise ServiceUnavailable("Tenant budget state is unavailable; try again shortly.") from None
            return []
        if admission.refused is not None:
            raise day_refusal(self._metrics, tenant, policy.name, admission)
        return limits

    async def book(
        self,
        tenant: str,
        policy: Policy,
        limits: list[WindowLimit],
        usage: Usage,
        model: str | None,
        started: float,
    ) -> None:
        """Give the reservation back and book ``usage`` (priced for ``model``) in the hour the
        call started. Shielded: a client that leaves does not unbook what was spent."""
        if not limits:
            return
        used = SessionDelta()
        labels = (tenant, policy.name, PASSTHROUGH_KIND)
        for field, direction, count in (
            (FIELDS.TOKENS_IN, "prompt", usage.prompt_tokens),
            (FIELDS.TOKENS_OUT, "completion", usage.completion_tokens),
        ):
            if count:
                used.incr(field, count)
                self._metrics.of(self._metrics.tokens, *labels, direction).inc(count)
        cost = self._prices.cost_micros(model, usage) if usage.total else None
        if cost:
            used.incr(FIELDS.COST_MICROS, cost)
            self._metrics.of(self._metrics.cost, tenant, policy.name).inc(cost / MICROS)
        elif usage.total and cost is None:
            self._metrics.of(self._metrics.unpriced_calls, tenant, policy.name).inc()
        settlement = tenant_day_settlement(used, started, limits)
        try:
            await asyncio.shield(self._store.commit(tenant_day_key(tenant), settlement, TENANT_DAY_TTL_SECS))
        except StoreUnavailable as exc:
            self._failed(tenant, policy, "commit", exc)

    def _failed(self, tenant: str, policy: Policy, operation: str, exc: StoreUnavailable) -> None:
        self._metrics.state_errors.labels(operation, policy.state_fail_mode).inc()
        log_event(
            "state_store_error",
            {"tenant": tenant, "policy": policy.name, "operation": operation, "error": str(exc)},
            logging.WARNING,
        )
