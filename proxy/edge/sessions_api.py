"""The sessions API: a tenant lists, inspects, grants or resets its own sessions, never another's.

``GET /v1/loopwarden/sessions`` lists the caller's sessions (its namespace: the tenant's with a
tenants file, whatever key of the tenant asks, its admin key included; without one, the
caller's own key's), newest first, filtered and paged by an opaque cursor. ``GET`` on one shows
its counters, budgets left and ending (never message contents); ``/events`` pages its timeline,
oldest first; ``PATCH`` grants it more of its budgets, within its policy's ceiling, lifting a
budget's ending (see :mod:`proxy.books.grants`); ``DELETE`` forgets it. Each answers 404 for a
session that is not the caller's, so a session id reveals nothing across tenants (or, without a
tenants file, across callers' keys). A tenant's admin key acts on every session of its tenant.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

import msgspec
from litestar import HttpMethod, MediaType, Request, Response, delete, get, patch, route
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath, FromQuery, QueryParameter

from proxy.books.budgets import active_ms, remaining
from proxy.books.grants import grant_delta, granted, lifted_reasons, over_ceiling, parse_grants
from proxy.books.pricing import MICROS
from proxy.edge.http import header_text
from proxy.edge.openapi import AUTHENTICATED, GrantOperation, error_responses
from proxy.edge.tenants import API_KEY_HEADERS, KEY_HEADER, Credentials, Tenant, TenantDirectory
from proxy.errors import InvalidRequest, MalformedJSON, RouteNotFound, ServiceUnavailable
from proxy.goal.model import GOAL_FIELD, load_goal
from proxy.guards.fingerprint import CALL_COUNT_PREFIX
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy
from proxy.session.base import FIELDS, SessionState, SessionStore, StoreUnavailable
from proxy.session.identity import session_key
from proxy.session.timeline import Listed, TimelinePage

__all__ = ["SCAN_LIMIT", "describe", "listed", "scan", "session_routes"]

SESSIONS_PATH = "/v1/loopwarden/sessions"
SESSION_PATH = "/v1/loopwarden/sessions/{session_id:str}"
EVENTS_PATH = "/v1/loopwarden/sessions/{session_id:str}/events"
SCAN_LIMIT = 1_000
"""The most listed sessions one list request reads through its filters: past it, the page
ends early with a cursor to read on (a filter that matches little costs pages, not a scan)."""
_BATCH = 100

Limit = Annotated[int, QueryParameter(ge=1, le=100, description="Items per page.")]
Cursor = Annotated[str | None, QueryParameter(description="The `next_cursor` of the previous page.")]
_EPOCH_END = 1e11
"""Epoch seconds past any real time (year 5138): ``since``/``until`` are clamped to 0 .. this,
so any number is a time (a negative ``until`` matches nothing, a huge ``since`` too)."""
Since = Annotated[float | None, QueryParameter(description="Only sessions last seen at or after (epoch seconds).")]
Until = Annotated[float | None, QueryParameter(description="Only sessions last seen at or before (epoch seconds).")]


def _epoch_ms(seconds: float) -> int:
    """Epoch seconds as milliseconds, clamped to 0 .. :data:`_EPOCH_END` (NaN: 0)."""
    return int(min(max(seconds, 0.0), _EPOCH_END) * 1000) if seconds == seconds else 0


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

    @get(
        SESSIONS_PATH,
        media_type=MediaType.JSON,
        security=AUTHENTICATED,
        responses=error_responses(400, 401, 503),
    )
    async def list_sessions(
        request: Request[Any, Any, Any],
        limit: Limit = 20,
        cursor: Cursor = None,
        running: Annotated[
            Literal["running", "ended"] | None, QueryParameter(name="state", description="Running or ended sessions.")
        ] = None,
        reason: FromQuery[str | None] = None,
        policy: FromQuery[str | None] = None,
        client: FromQuery[str | None] = None,
        since: Since = None,
        until: Until = None,
    ) -> dict[str, object]:
        """The caller's sessions, newest first (a tenant's key, or its admin key: the tenant's),
        filtered by state, ending reason, policy, client and last-seen time, paged by cursor."""
        namespace = caller(request).namespace
        before = _session_cursor(cursor) if cursor else None
        if until is not None:
            last = (_epoch_ms(until), "\U0010ffff")  # every id at that millisecond
            before = last if before is None else min(before, last)
        wanted = {"state": running, "termination": reason, "policy": policy, "client": client}
        since_ms = _epoch_ms(since) if since is not None else None
        try:
            page, after = await scan(store, namespace, before, limit, wanted, since_ms, time.time())
        except StoreUnavailable:
            raise ServiceUnavailable("Session state is unavailable; try again shortly.") from None
        return {
            "object": "list",
            "data": [listed(item) for item in page],
            "next_cursor": _encode_cursor(f"{after[0]}:{after[1]}") if after is not None else None,
        }

    @get(
        EVENTS_PATH,
        media_type=MediaType.JSON,
        security=AUTHENTICATED,
        responses=error_responses(400, 401, 404, 503),
    )
    async def session_events(
        request: Request[Any, Any, Any], session_id: FromPath[str], limit: Limit = 100, cursor: Cursor = None
    ) -> dict[str, object]:
        """A session's timeline, oldest first, paged by cursor; only the caller's tenant's own (else 404)."""
        key = session_key(caller(request).namespace, session_id)
        first = _event_cursor(cursor) if cursor else 0
        try:
            known = not (await store.load(key)).is_new
            page = await store.timeline(key, first, limit) if known else TimelinePage()
        except StoreUnavailable:
            raise ServiceUnavailable("Session state is unavailable; try again shortly.") from None
        if not known:
            raise RouteNotFound(f"No session {session_id!r} for this API key.", param="session_id")
        following = page.events[-1][0] + 1 if page.events else max(first, page.total - len(page.events))
        return {
            "object": "list",
            "session": session_id,
            "data": [
                {"seq": number, "kind": event.kind, "at_ms": event.at_ms, "fields": dict(event.fields)}
                for number, event in page.events
            ],
            "total": page.total,
            "dropped": page.dropped,
            "next_cursor": _encode_cursor(f"e{following}") if following < page.total else None,
        }

    return [session_options, list_sessions, inspect_session, session_events, reset_session, grant_budgets]


async def scan(
    store: SessionStore,
    namespace: str,
    before: tuple[int, str] | None,
    limit: int,
    wanted: Mapping[str, str | None],
    since_ms: int | None,
    now: float,
) -> tuple[list[Listed], tuple[int, str] | None]:
    """Read the namespace's index newest first through the filters: a page, and where the next
    one starts (None: nothing more). Reads at most :data:`SCAN_LIMIT` entries."""
    page: list[Listed] = []
    now_ms = int(now * 1000)
    read = 0
    while read < SCAN_LIMIT:
        batch = await store.sessions(namespace, before, _BATCH)
        for item in batch:
            read += 1
            if since_ms is not None and item.last_seen_ms < since_ms:
                return page, None
            before = (item.last_seen_ms, item.session_id)
            if _matches(item, wanted, now_ms):
                page.append(item)
                if len(page) == limit:
                    return page, before
        if len(batch) < _BATCH:
            return page, None
    return page, before


def _matches(item: Listed, wanted: Mapping[str, str | None], now_ms: int) -> bool:
    summary = item.summary
    if int(summary.get("expires_ms") or 0) <= now_ms:
        return False  # its state expired; the index has not let go of it yet
    for name, value in wanted.items():
        if value is None:
            continue
        if name == "state":
            if ("ended" if summary.get(FIELDS.TERMINATION) else "running") != value:
                return False
        elif str(summary.get(name) or "") != value:
            return False
    return True


def listed(item: Listed) -> dict[str, Any]:
    """One session of the list: what its index entry holds (never contents)."""
    summary = item.summary

    def number(name: str) -> int:
        value = summary.get(name)
        return int(value) if isinstance(value, int | str) and str(value).lstrip("-").isdigit() else 0

    prompt, completion = number(FIELDS.TOKENS_IN), number(FIELDS.TOKENS_OUT)
    termination = summary.get(FIELDS.TERMINATION) or None
    return {
        "id": item.session_id,
        "object": "loopwarden.session.summary",
        "state": "ended" if termination else "running",
        "termination": termination,
        "policy": summary.get(FIELDS.POLICY),
        "client": summary.get(FIELDS.CLIENT),
        "first_seen": number(FIELDS.FIRST_SEEN) or None,
        "last_seen": item.last_seen_ms / 1000,
        "steps": number(FIELDS.STEPS),
        "turns": number(FIELDS.TURNS),
        "tokens": {"prompt": prompt, "completion": completion, "total": prompt + completion},
        "cost_usd": number(FIELDS.COST_MICROS) / MICROS,
        "events": number(FIELDS.TIMELINE_TOTAL),
    }


def _encode_cursor(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidRequest("The cursor is not one this API gave.", param="cursor") from None


def _session_cursor(cursor: str) -> tuple[int, str]:
    seen, _, session_id = _decode_cursor(cursor).partition(":")
    if not seen.isdigit() or not session_id:
        raise InvalidRequest("The cursor is not one this API gave.", param="cursor")
    return int(seen), session_id


def _event_cursor(cursor: str) -> int:
    number = _decode_cursor(cursor)
    if not number.startswith("e") or not number[1:].isdigit():
        raise InvalidRequest("The cursor is not one this API gave.", param="cursor")
    return int(number[1:])


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
        "run": _run(state),
        "termination": state.termination,
        "goal": _goal(state, policy),
        "policy": policy.name,
        "budget_remaining": remaining(state, policy, now).header(),
        "grants": granted(state, policy),
    }


def _run(state: SessionState) -> int:
    """The session's run (1 until an ending is followed by a new instruction or conversation)."""
    value = state.values.get(FIELDS.RUN, "")
    return int(value) if value.isdigit() and int(value) > 0 else 1


def _goal(state: SessionState, policy: Policy) -> dict[str, Any] | None:
    goal = load_goal(state.values.get(GOAL_FIELD))
    if goal is None:
        return None
    settings = policy.goal
    return goal.describe(state.counter(FIELDS.ACTIVE_MS), settings.max_turns, settings.max_active_minutes)
