"""What the console's pages show, read from the session store (on the proxy's event loop) and
from the proxy's own Prometheus registry (in-process: no Prometheus server needed).

Every value here is data for a template; nothing is pre-formatted as HTML, so the templates'
autoescaping covers everything an agent or a model wrote (tool names, reasons, summaries, ids).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from prometheus_client import CollectorRegistry

from proxy.books.budgets import active_ms, tokens_used
from proxy.books.pricing import MICROS
from proxy.edge.console.auth import Viewer
from proxy.edge.namespaces import is_caller_namespace
from proxy.edge.sessions_api import listed, scan
from proxy.edge.tenants import Tenant, TenantDirectory
from proxy.errors import ProxyError
from proxy.policy.models import Policy
from proxy.session.base import FIELDS, SessionState, SessionStore, TimelineEvent
from proxy.session.identity import session_key

__all__ = ["ConsoleSources", "Fleet", "SessionView", "fleet", "list_sessions", "session_view"]

LISTED = 50
"""Sessions on the list page (newest first, across the viewer's namespaces)."""
SHOWN_EVENTS = 500
"""Timeline events on a session page (the store keeps at most as many by default)."""
FILTERS = ("state", "reason", "policy", "client")


@dataclass(frozen=True, slots=True)
class ConsoleSources:
    """What the console reads, handed over by ``create_app``: the app's own collaborators."""

    directory: TenantDirectory
    store: SessionStore
    policy_for: Callable[[Tenant, str | None], Policy]
    registry: Callable[[], CollectorRegistry]


ADMIN_NAMESPACES = 200
"""Without a tenants file, the admin reads the callers' namespaces most recently active, this many."""


async def namespaces_of(viewer: Viewer, sources: ConsoleSources) -> tuple[str, ...]:
    """The namespaces a viewer reads: its own, or for the admin every tenant's (without a
    tenants file, every caller's the store has seen lately: each has a namespace of its own)."""
    if viewer.namespaces is not None:
        return viewer.namespaces
    if sources.directory.is_open:
        return tuple(await sources.store.namespaces(ADMIN_NAMESPACES))
    return tuple(sorted(tenant.name for tenant in sources.directory.tenants))


async def list_sessions(
    sources: ConsoleSources, viewer: Viewer, filters: Mapping[str, str | None]
) -> list[dict[str, Any]]:
    """The newest sessions of every namespace the viewer reads, through the sessions API's
    filters, merged newest first."""
    wanted = {
        "state": filters.get("state"),
        "termination": filters.get("reason"),
        "policy": filters.get("policy"),
        "client": filters.get("client"),
    }
    rows: list[dict[str, Any]] = []
    now = time.time()
    for namespace in await namespaces_of(viewer, sources):
        page, _ = await scan(sources.store, namespace, None, LISTED, wanted, None, now)
        link = {"ns": namespace} if viewer.admin else {}
        rows.extend(
            {
                **listed(item),
                "tenant": namespace.partition("~")[0],
                "runs": _runs(item.summary.get(FIELDS.RUN)),
                "href": _href({**link, "id": item.session_id}),
            }
            for item in page
        )
    rows.sort(key=lambda row: (row["last_seen"], row["id"]), reverse=True)
    return rows[:LISTED]


@dataclass(slots=True)
class Budget:
    name: str
    used: float
    limit: float | None
    unit: str

    @property
    def percent(self) -> int | None:
        return None if not self.limit else min(100, round(100 * self.used / self.limit))


@dataclass(slots=True)
class SessionView:
    """One session: its counters, its ending card and its timeline."""

    session_id: str
    namespace: str
    tenant: str
    policy: str
    state: SessionState
    events: list[tuple[int, TimelineEvent]]
    dropped: int
    budgets: list[Budget]
    card: dict[str, str] | None
    runs: int = 1
    counters: dict[str, Any] = field(default_factory=dict)


async def session_view(
    sources: ConsoleSources, viewer: Viewer, namespace: str | None, session_id: str
) -> SessionView | None:
    """A session the viewer may read, or None (not its namespace, or no such session).
    ``namespace`` is only asked of the admin: anyone else reads one namespace, which is then
    never put in a URL (an open tenant's caller namespace is derived from the caller's key)."""
    if viewer.admin and sources.directory.is_open:  # any caller's, not only those listed lately
        open_tenant = sources.directory.tenants[0].name
        if namespace is None or not is_caller_namespace(open_tenant, namespace):
            return None
    else:
        readable = await namespaces_of(viewer, sources)
        if namespace is None and viewer.namespaces is not None and len(readable) == 1:
            namespace = readable[0]
        if namespace is None or namespace not in readable:
            return None
    key = session_key(namespace, session_id)
    state = await sources.store.load(key)
    if state.is_new:
        return None
    page = await sources.store.timeline(key, 0, SHOWN_EVENTS)
    tenant = _tenant(sources.directory, namespace)
    policy = _policy(sources, tenant, state.values.get(FIELDS.POLICY) or None) if tenant else None
    events = page.events
    spent = budgets(state, policy, time.time()) if policy else []
    return SessionView(
        session_id=session_id,
        namespace=namespace,
        tenant=namespace.partition("~")[0],
        policy=policy.name if policy else str(state.values.get(FIELDS.POLICY) or ""),
        state=state,
        events=events,
        dropped=page.dropped,
        budgets=spent,
        card=ending_card(session_id, state, [event for _, event in events], spent),
        runs=_runs(state.values.get(FIELDS.RUN)),
        counters={
            "steps": state.steps,
            "turns": state.turns,
            "tokens": tokens_used(state),
            "cost_usd": state.counter(FIELDS.COST_MICROS) / MICROS,
            "client": state.values.get(FIELDS.CLIENT) or "",
        },
    )


def _policy(sources: ConsoleSources, tenant: Tenant, name: str | None) -> Policy | None:
    """The session's policy as it is now; None where it no longer exists or is no longer the
    tenant's (the page then shows no limits rather than another policy's)."""
    try:
        return sources.policy_for(tenant, name)
    except ProxyError:
        return None


def _runs(number: object) -> int:
    """How many runs a session has had: its run number (absent or unreadable: the first)."""
    text = str(number or "")
    return int(text) if text.isdigit() and int(text) > 0 else 1


def _href(query: Mapping[str, str]) -> str:
    return "/console/session?" + urlencode(query)


def _tenant(directory: TenantDirectory, namespace: str) -> Tenant | None:
    name = namespace.partition("~")[0]
    return next((tenant for tenant in directory.tenants if tenant.name == name), None)


def budgets(state: SessionState, policy: Policy, now: float) -> list[Budget]:
    """Each budget's use against its limit (None: unlimited)."""
    limits = policy.budgets
    return [
        Budget("steps", state.steps, policy.max_steps, "steps"),
        Budget("tokens", tokens_used(state), limits.max_tokens, "tokens"),
        Budget("cost", state.counter(FIELDS.COST_MICROS) / MICROS, limits.max_cost_usd, "USD"),
        Budget("active time", active_ms(state, now, limits.idle_gap_secs) / 1000, limits.max_active_secs, "s"),
    ]


_HOW_TO_CONTINUE = (
    "Send the agent a new instruction to start a new run, or reset the session with "
    "DELETE /v1/loopwarden/sessions/{id} using the key that owns it."
)


_BUDGET_REASONS = {
    "budget_steps": "steps",
    "budget_tokens": "tokens",
    "budget_cost": "cost",
    "budget_time": "active time",
}


def ending_card(
    session_id: str, state: SessionState, events: Iterable[TimelineEvent], spent: Iterable[Budget] = ()
) -> dict[str, str] | None:
    """Why the run was stopped: from the session's ending fields, completed by its latest
    ``ending`` event (guard, evidence, notice, how to continue); without one, a budget ending
    names the budget and its use, any other the intervention that led to it. None while the
    session runs and no ending was recorded."""
    history = list(events)
    ending = next((event for event in reversed(history) if event.kind == "ending"), None)
    reason = state.termination or (str(ending.fields.get("reason") or "") if ending else "")
    if not reason:
        return None
    fields: Mapping[str, Any] = ending.fields if ending else {}
    budget = next((b for b in spent if b.name == _BUDGET_REASONS.get(reason)), None)
    if budget is not None and not fields.get("guard"):
        used = f"{_short(budget.used)} of {_short(budget.limit)} {budget.unit}" if budget.limit else ""
        fields = {"guard": "budget", "evidence": f"the {budget.name} budget is spent ({used})", **fields}
    cause = next((e for e in reversed(history) if e.kind == "intervention" and not e.fields.get("shadow")), None)
    guard = fields.get("guard") or (cause.fields.get("guard") if cause else None) or reason
    evidence = fields.get("evidence") or (cause.fields.get("reason") if cause else None) or ""
    return {
        "reason": reason,
        "guard": str(guard),
        "evidence": str(evidence),
        "notice": str(fields.get("notice") or ""),
        "summary_via": str(fields.get("summary_via") or fields.get("via") or ""),
        "continue": str(fields.get("continue") or _HOW_TO_CONTINUE.replace("{id}", session_id)),
    }


def _short(value: float | None) -> str:
    return f"{value:.4g}" if value is not None else ""


@dataclass(slots=True)
class Fleet:
    """Counts from the proxy's registry since it started, for the tenants a viewer may read."""

    endings: list[tuple[str, str, str, float]] = field(default_factory=list)
    """(tenant, policy, reason, count)"""
    interventions: list[tuple[str, str, str, float]] = field(default_factory=list)
    """(tenant, policy, guard, count)"""
    overhead: list[tuple[str, float, float, float | None]] = field(default_factory=list)
    """(route, requests, mean seconds, p95 upper bound seconds)"""


_COUNTED = {"loopwarden_terminations_total": "reason", "loopwarden_interventions_total": "guard"}
"""The counters the fleet page shows, and the label it groups each by (besides tenant and policy)."""


def fleet(registry: CollectorRegistry, tenants: tuple[str, ...] | None) -> Fleet:
    """Read the collectors' samples in-process: endings and interventions per tenant and
    policy (only ``tenants``; None: all), overhead per request (per route, every tenant's)."""
    seen = Fleet()
    counted: dict[tuple[str, str, str, str], float] = {}
    buckets: dict[str, list[tuple[float, float]]] = {}
    sums: dict[str, float] = {}
    for family in registry.collect():
        for sample in family.samples:
            labels = sample.labels
            if sample.name in _COUNTED:
                if tenants is not None and labels.get("tenant") not in tenants:
                    continue
                label = _COUNTED[sample.name]  # an ending's reason; an intervention's guard (its kinds summed)
                row = (sample.name, labels.get("tenant", ""), labels.get("policy", ""), labels.get(label, ""))
                counted[row] = counted.get(row, 0.0) + sample.value
            elif sample.name == "loopwarden_overhead_seconds_bucket":
                upper = float(labels["le"])
                buckets.setdefault(labels.get("route", ""), []).append((upper, sample.value))
            elif sample.name == "loopwarden_overhead_seconds_sum":
                sums[labels.get("route", "")] = sample.value
    for (name, tenant, policy, what), count in counted.items():
        target = seen.endings if name == "loopwarden_terminations_total" else seen.interventions
        target.append((tenant, policy, what, count))
    if tenants is None or tenants:
        for route, counts in sorted(buckets.items()):
            counts.sort()
            total = counts[-1][1] if counts else 0.0
            if total:
                p95 = next((upper for upper, count in counts if count >= 0.95 * total), None)
                seen.overhead.append((route, total, sums.get(route, 0.0) / total, p95))
    seen.endings.sort(key=lambda row: (row[0], row[1], -row[3]))
    seen.interventions.sort(key=lambda row: (row[0], row[1], -row[3]))
    return seen
