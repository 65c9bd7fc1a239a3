"""The sessions API: a tenant inspects, grants or resets its own sessions, never another's.

``GET`` shows a session's counters, budgets left and ending (never message contents);
``PATCH`` grants it more of its budgets, within its policy's ceiling, lifting a budget's
ending (see :mod:`proxy.books.grants`); ``DELETE`` forgets it. Each answers 404 for a session
that is not the caller's, so a session id reveals nothing across tenants (or, without a
tenants file, across callers' keys). A tenant's admin key acts on every session of its tenant.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec
from litestar import HttpMethod, MediaType, Request, Response, delete, get, patch, route
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath

from proxy.books.budgets import active_ms, remaining
from proxy.books.grants import grant_delta, granted, lifted_reasons, over_ceiling, parse_grants
from proxy.books.pricing import MICROS
from proxy.edge.http import header_text
from proxy.edge.openapi import AUTHENTICATED, GrantOperation, error_responses
from proxy.edge.tenants import API_KEY_HEADERS, KEY_HEADER, Credentials, Tenant, TenantDirectory
from proxy.errors import MalformedJSON, RouteNotFound, ServiceUnavailable
from proxy.goal.model import GOAL_FIELD, load_goal
from proxy.guards.fingerprint import CALL_COUNT_PREFIX
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy
from proxy.session.base import FIELDS, SessionState, SessionStore, StoreUnavailable
from proxy.session.identity import session_key

__all__ = ["describe", "session_routes"]

SESSION_PATH = "/v1/loopwarden/sessions/{session_id:str}"


def session_routes(
    directory: TenantDirectory,
    store: SessionStore,
    policy_for: Callable[[Tenant, str | None], Policy],
    metrics: Metrics,
) -> list[HTTPRouteHandler]:
    """The sessions API's handlers (OPTIONS first: see there), for ``create_app`` to mount."""

    def acting(request: Request[Any, Any, Any]) -> tuple[Credentials, str]:
        """Who acts, and as what: ``admin`` (the tenant's admin key, on all its sessions) or
        ``owner`` (identified as the session's requests were, see ``ProxyRoutes``). Headers are
        read as :func:`header_text` reads them (litestar reads latin-1), so a key in UTF-8
        names the same caller here as there."""

        def text(name: str) -> str | None:
            value = request.headers.get(name)
            return header_text(value.encode("latin-1")) if value is not None else None

        authorization = text("authorization")
        api_key = None if authorization else next(filter(None, map(text, API_KEY_HEADERS)), None)
        bearer = authorization.partition(" ")[2].strip() if authorization else None
        admin_of = directory.admin(text(KEY_HEADER) or bearer or api_key)
        if admin_of is not None:
            return Credentials(admin_of, None, admin_of.name), "admin"
        return directory.authenticate(authorization, text(KEY_HEADER), identified=True, api_key=api_key), "owner"

    def caller(request: Request[Any, Any, Any]) -> Credentials:
        return acting(request)[0]

    def chosen_policy(request: Request[Any, Any, Any], tenant: Tenant) -> Policy:
        requested = request.headers.get("x-loopwarden-policy")  # litestar reads headers as latin-1
        return policy_for(tenant, header_text(requested.encode("latin-1")) if requested else None)

    @route(SESSION_PATH, http_method=HttpMethod.OPTIONS, status_code=204, include_in_schema=False)
    async def session_options() -> Response[None]:
        """Registered before GET and DELETE: litestar's automatic OPTIONS answer would be
        bound to the route as it was at the first registration and list only GET."""
        return Response(None, status_code=204, headers={"Allow": "DELETE, GET, OPTIONS, PATCH"})

    @get(
        SESSION_PATH,
        media_type=MediaType.JSON,
        security=AUTHENTICATED,
        responses=error_responses(400, 401, 403, 404, 503),
    )
    async def inspect_session(request: Request[Any, Any, Any], session_id: FromPath[str]) -> dict[str, object]:
        """A session's counters, budgets left and ending; only the caller's tenant's own (else 404)."""
        credentials = caller(request)
        policy = chosen_policy(request, credentials.tenant)
        try:
            state = await store.load(session_key(credentials.namespace, session_id))
        except StoreUnavailable:
            raise ServiceUnavailable("Session state is unavailable; try again shortly.") from None
        if state.is_new:
            raise RouteNotFound(f"No session {session_id!r} for this API key.", param="session_id")
        return describe(session_id, state, policy, time.time())

    @delete(
        SESSION_PATH,
        status_code=200,
        media_type=MediaType.JSON,
        security=AUTHENTICATED,
        responses=error_responses(400, 401, 404, 503),
    )
    async def reset_session(request: Request[Any, Any, Any], session_id: FromPath[str]) -> dict[str, object]:
        """Forget a session (its budgets, strikes and ending); only the caller's tenant's own (else 404)."""
        credentials = caller(request)
        try:
            existed = await store.reset(session_key(credentials.namespace, session_id))
        except StoreUnavailable:
            raise ServiceUnavailable("Session state is unavailable; try again shortly.") from None
        if not existed:
            raise RouteNotFound(f"No session {session_id!r} for this API key.", param="session_id")
        return {"id": session_id, "object": "loopwarden.session.deleted", "deleted": existed}

    @patch(
        SESSION_PATH,
        media_type=MediaType.JSON,
        security=AUTHENTICATED,
        responses=error_responses(400, 401, 403, 404, 409, 503),
        operation_class=GrantOperation,
    )
    async def grant_budgets(request: Request[Any, Any, Any], session_id: FromPath[str]) -> dict[str, object]:
        """Grant a session more of its budgets (steps, tokens, cost_usd, active_secs), within
        the policy's ``budgets.grant_ceiling``; a budget's ending is lifted. Only the caller's
        tenant's own (else 404); all of the tenant's with its admin key."""
        credentials, by = acting(request)
        policy = chosen_policy(request, credentials.tenant)
        try:
            body = msgspec.json.decode(await request.body())
        except msgspec.DecodeError:
            raise MalformedJSON("The body is not valid JSON.") from None
        grants = parse_grants(body, policy)
        now = time.time()
        try:
            outcome = await store.grant(
                session_key(credentials.namespace, session_id),
                grants,
                lifted_reasons(grants),
                grant_delta(grants, int(now * 1000), by),
                policy.session_ttl_secs,
            )
        except StoreUnavailable:
            raise ServiceUnavailable("Session state is unavailable; try again shortly.") from None
        if outcome.state.is_new:
            raise RouteNotFound(f"No session {session_id!r} for this API key.", param="session_id")
        if outcome.refused is not None:
            raise over_ceiling(outcome.refused, outcome.state, policy)
        for grant in grants:
            metrics.of(metrics.budget_grants, credentials.tenant.name, policy.name, grant.budget).inc()
        return describe(session_id, outcome.state, policy, now)

    return [session_options, inspect_session, reset_session, grant_budgets]


def describe(session_id: str, state: SessionState, policy: Policy, now: float) -> dict[str, Any]:
    """What the inspect API shows of a session: counters with names and the goal the client set."""
    prompt, completion = state.counter(FIELDS.TOKENS_IN), state.counter(FIELDS.TOKENS_OUT)
    return {
        "id": session_id,
        "object": "loopwarden.session",
        "steps": state.steps,
        "turns": state.turns,
        "tokens": {"prompt": prompt, "completion": completion, "total": prompt + completion},
        "cost_usd": state.counter(FIELDS.COST_MICROS) / MICROS,
        "unpriced_calls": state.counter(FIELDS.UNPRICED),
        "active_seconds": active_ms(state, now, policy.budgets.idle_gap_secs) / 1000,
        "first_seen": state.counter(FIELDS.FIRST_SEEN) or None,
        "last_seen": state.counter(FIELDS.LAST_SEEN) or None,
        "strikes": {
            name.removeprefix(FIELDS.STRIKE_PREFIX): int(value)
            for name, value in sorted(state.values.items())
            if name.startswith(FIELDS.STRIKE_PREFIX) and value.lstrip("-").isdigit() and int(value)
        },
        "tool_call_fingerprints": {
            name.removeprefix(CALL_COUNT_PREFIX): int(value)
            for name, value in sorted(state.values.items())
            if name.startswith(CALL_COUNT_PREFIX) and value.isdigit()
        },
        "termination": state.termination,
        "goal": _goal(state, policy),
        "policy": policy.name,
        "budget_remaining": remaining(state, policy, now).header(),
        "grants": granted(state, policy),
    }


def _goal(state: SessionState, policy: Policy) -> dict[str, Any] | None:
    goal = load_goal(state.values.get(GOAL_FIELD))
    if goal is None:
        return None
    settings = policy.goal
    return goal.describe(state.counter(FIELDS.ACTIVE_MS), settings.max_turns, settings.max_active_minutes)
