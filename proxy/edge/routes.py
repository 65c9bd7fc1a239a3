"""Thin route handlers: authenticate, read, forward, answer.

The guarded model routes (``/v1/chat/completions``, ``/v1/responses``, ``/v1/messages``; each
route's wire format parses and renders its bodies) and the ``/v1/*`` pass-through are raw ASGI
handlers: they sit on every model call, and litestar's request parsing and response rendering
would cost more than everything else the proxy does. Everything else is ordinary litestar.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgspec
from litestar.enums import ScopeType
from litestar.types import HTTPScope, Receive, Scope, Send

from proxy.books.tenant_day import TenantDay
from proxy.edge.client_watch import ClientWatch, ResponseTracker
from proxy.edge.http import ClientDisconnected, header, headers_by_name, read_body, send_error, send_reply
from proxy.edge.passthrough import Passthrough, passthrough_wire, upstream_headers
from proxy.edge.request_schemas import compile_request_schemas
from proxy.edge.responses_socket import SOCKET_FORMATS, serve_socket
from proxy.edge.tenants import API_KEY_HEADERS, Credentials, Tenant, TenantDirectory
from proxy.edge.websockets import NO_WEBSOCKETS, asks_websocket, refuse_websocket
from proxy.errors import (
    InvalidRequest,
    MalformedJSON,
    MethodNotAllowed,
    PermissionDenied,
    ProxyError,
)
from proxy.loop.continuity import ChainPoint
from proxy.loop.pipeline import Pipeline
from proxy.observe.logs import log_event, logger
from proxy.observe.metrics import Metrics
from proxy.observe.timing import begin
from proxy.policy.loader import PolicyRegistry
from proxy.policy.models import Policy
from proxy.request import AgentRequest, Outcome
from proxy.schemas.compiled import SchemaCache, SchemaLimits
from proxy.session.identity import identify
from proxy.settings import Settings
from proxy.upstream.client import ATTEMPTS_HEADER, UpstreamClient, UpstreamReply
from proxy.upstream.headers import reply_headers
from proxy.upstream.paths import checked_url_text, passthrough_route
from proxy.upstream.relayed_errors import credential_values, relayed_error, secret_forms
from proxy.wire.base import Address, WireFormat
from proxy.wire.gemini.address import keyed

__all__ = ["ProxyRoutes", "Readiness"]

_decode = msgspec.json.decode
_ATTEMPTS = ATTEMPTS_HEADER.encode()
_UNCHAINED = ChainPoint()  # where a request of a format without chains goes on: as it came
_Handler = Callable[[HTTPScope, Receive, "ResponseTracker"], Awaitable[dict[str, object]]]
_Read = Callable[[bytes], str | None]


@dataclass(slots=True)
class Readiness:
    """What /readyz reports: started, not draining."""

    started: bool = False
    draining: bool = False
    in_flight: int = field(default=0)


class ProxyRoutes:
    """The raw ASGI handlers of the forwarding routes, sharing one upstream client."""

    def __init__(
        self,
        settings: Settings,
        tenants: TenantDirectory,
        upstream: UpstreamClient,
        readiness: Readiness,
        pipeline: Pipeline,
        policies: PolicyRegistry,
        metrics: Metrics,
        day: TenantDay,
    ) -> None:
        self._metrics = metrics
        self._settings = settings
        self._tenants = tenants
        self._upstream = upstream
        self._readiness = readiness
        self._pipeline = pipeline
        self._policies = policies
        limits = SchemaLimits(settings.max_schema_bytes, settings.max_schema_properties)
        self._schemas = SchemaCache(settings.schema_cache_bytes, limits)
        self._forward = Passthrough(
            settings,
            upstream,
            day,
            metrics,
            lambda tenant: self.policy_for(tenant, None),
            self._answer,
            _own_headers,
            time.time,
        )

    # -- entry points ---------------------------------------------------------------

    def model_route(self, wire: WireFormat) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        """:meth:`model_entry` awaited, as litestar mounts it."""
        enter = self.model_entry(wire)

        async def handle(scope: Scope, receive: Receive, send: Send) -> None:
            await enter(scope, receive, send)

        return handle

    def model_entry(self, wire: WireFormat) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        """The guarded handler of a format's model call (its ``route``; for a format whose path names
        the call, its mount, which passes through what is no model call): a plain function handing
        back the work to await (:mod:`proxy.edge.dispatch`), no coroutine of its own per request."""
        serve: _Handler = partial(self._model_call, wire)  # one per route, not one per request

        def enter(scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
            if scope["type"] == ScopeType.WEBSOCKET and wire.name in SOCKET_FORMATS:
                return self._socket(wire, scope, receive, send)
            if wire.addressing is None:
                return self._guarded(serve, scope, receive, send, wire.name, wire)
            scope = _keyed(scope)
            address = wire.addressing.guarded(scope.get("raw_path") or b"")
            if address is None:  # Gemini's countTokens, models
                return self.passthrough(scope, receive, send)
            call = partial(self._model_call, wire, address=address)
            return self._guarded(call, scope, receive, send, wire.name, wire)

        return enter

    async def _socket(self, wire: WireFormat, scope: Any, receive: Any, send: Any) -> None:
        """A WebSocket on a format's route: authenticated at its handshake, then each of its
        ``response.create`` events served as one request of this route."""

        async def refusal() -> tuple[int, bytes] | None:
            try:
                credentials = self._authenticate(scope, ResponseTracker(send, begin()))
                self.policy_for(credentials.tenant, header(scope, b"x-loopwarden-policy"))
            except ProxyError as exc:
                self._metrics.of(self._metrics.requests, "-", wire.name, f"{exc.status // 100}xx").inc()
                log_event("request", {"route": wire.name, "method": "WEBSOCKET", "status": exc.status})
                return exc.status, wire.codec.error_body(exc)
            return None

        async def turn(turn_scope: HTTPScope, body: bytes, payload: dict[str, Any], respond: Any, watch: Any) -> None:
            await self._guarded(
                partial(self._model_call, wire, body=body, payload=payload), turn_scope, watch, respond, wire.name, wire
            )

        idle = self._settings.socket_idle_timeout
        draining = lambda: self._readiness.draining  # noqa: E731
        await serve_socket(scope, receive, send, refusal, turn, idle, draining, self._upstream.sockets.open)

    async def passthrough(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope = _keyed(scope)
        raw = scope.get("raw_path") or b""
        wire = passthrough_wire(scope)  # type: ignore[arg-type]
        if wire is not None and wire.addressing is not None:
            if wire.addressing.guarded(raw) is not None:  # the SDK's /v1/models/{model}:generateContent
                await self.model_entry(wire)(scope, receive, send)
                return
            scope = {**scope, "raw_path": wire.addressing.passthrough_path(raw)}  # type: ignore[assignment]
        await self._guarded(self._passthrough, scope, receive, send, passthrough_route(scope["raw_path"]), wire)

    # -- handlers -------------------------------------------------------------------

    async def _model_call(
        self,
        wire: WireFormat,
        scope: HTTPScope,
        receive: Receive,
        tracker: ResponseTracker,
        address: Address | None = None,
        body: bytes | None = None,
        payload: dict[str, Any] | None = None,
    ) -> dict[str, object]:
        """One model call; ``address``: what a format whose path names the call read from it
        (Gemini's model and whether it streams); ``body``, ``payload``: a WebSocket event's, read."""
        send: Send = tracker.send  # type: ignore[assignment]
        if scope["method"] != "POST":
            raise MethodNotAllowed(
                f"Method {scope['method']} is not allowed on {wire.route}; use POST.", headers={"Allow": "POST"}
            )
        read = headers_by_name(scope)  # a dozen headers read: one index, not a scan each
        credentials = self._authenticate(scope, tracker, read)
        policy = self.policy_for(credentials.tenant, read(b"x-loopwarden-policy"))
        if body is None:
            body = await read_body(receive, self._settings.max_body_bytes, read(b"content-length"))
        if payload is None:
            payload = _parse_object(body)
        parsed = wire.codec.parse_request(payload)
        if address is not None:  # the path names the model and whether it streams
            parsed = parsed.addressed(address.model, address.stream)
        conversation = await compile_request_schemas(
            wire.codec.declared_schemas(payload), parsed, self._schemas, len(body)
        )
        hint = wire.codec.session_hint(payload, read)
        chains = wire.chains
        point = _UNCHAINED if chains is None else await self._pipeline.resume(chains, credentials.namespace, payload)
        hint = hint or point.session
        if point.rewritten is not None:
            payload, body = point.rewritten, wire.codec.encode(point.rewritten)
        session = identify(credentials.namespace, conversation, read(b"x-session-id"), read(b"x-agent-id"), hint)
        if logger.isEnabledFor(logging.DEBUG):  # why a session continued or started over
            log_event(
                "session_identified",
                {  # a derived run's first request is named by the reply it delivers: not yet
                    "session": session.id if session.named else None,
                    "derived": session.derived,
                    "fresh": session.fresh,
                    "policy": policy.name,
                },
                logging.DEBUG,
            )
        request = AgentRequest(
            tenant=credentials.tenant.name,
            policy=policy,
            session=session,
            payload=payload,
            body=body,
            conversation=conversation,
            url=_model_url(credentials.tenant.upstream_url, wire, scope["query_string"], address),
            headers=upstream_headers(scope, credentials, wire, identity_encoding=True),
            stream=conversation.stream,
            daily_tokens=credentials.tenant.daily_tokens,
            daily_cost_usd=credentials.tenant.daily_cost_usd,
            goal=_text_header(read, b"x-loopwarden-goal"),
            goal_criteria=_text_header(read, b"x-loopwarden-goal-criteria"),
            wire=wire,
            namespace=credentials.namespace,
            store_failure=point.store_failure,
            respond=send if conversation.stream else None,
        )
        facts: dict[str, object] = {"tenant": request.tenant, "policy": policy.name, "session": None}
        facts["stream"] = request.stream
        # A client that hangs up cancels the upstream call (and any nudge or judge call); what was used is committed.
        watch = ClientWatch(receive, tracker)  # inline: no coroutine of its own around the pipeline
        try:
            outcome = await self._pipeline.run(request)
        except asyncio.CancelledError:
            watch.left(facts)
            raise
        finally:
            watch.stop()
            facts["session"] = request.session.id  # named by now, if a reply named it
        if (delivering := self._deliver(outcome, send, facts, request.headers, wire)) is not None:
            await delivering
        return facts

    def policy_for(self, tenant: Tenant, requested: str | None) -> Policy:
        """The tenant's policy for this request; 403 for one it may not use. ``requested`` is
        the header's text (see :func:`proxy.edge.http.header_text`)."""
        name = tenant.choose_policy(requested.strip() or None if requested else None)
        policy = self._policies.get(name)
        if policy is None:
            raise PermissionDenied(f"Policy {name!r} does not exist.", param="policy")
        return policy

    def _deliver(
        self,
        outcome: Outcome,
        send: Send,
        facts: dict[str, object],
        sent: Sequence[tuple[str, str]],
        wire: WireFormat,
    ) -> Awaitable[None] | None:
        """Send what the pipeline decided: its own body, or the upstream's reply copied (the
        sending to await, None when the pipeline delivered it: no coroutine of its own)."""
        if outcome.delivered:
            return None
        if outcome.body is not None:
            headers = [(b"content-type", outcome.content_type), *outcome.headers]
            facts["upstream_status"] = None
            return send_reply(send, outcome.status, headers, outcome.body)
        if outcome.upstream is None:  # an outcome carries a body or an upstream reply
            raise ProxyError("The proxy produced no reply.")
        return self._answer(outcome.upstream, send, facts, sent, wire, own=outcome.headers)

    async def _passthrough(self, scope: HTTPScope, receive: Receive, tracker: ResponseTracker) -> dict[str, object]:
        return await self._forward.serve(scope, receive, tracker, self._authenticate(scope, tracker))

    # -- shared steps ---------------------------------------------------------------

    def _secrets(self, sent: Sequence[tuple[str, str]]) -> list[bytes]:
        """Every provider key an upstream error could quote: the one sent with the request (the
        client's own, when it is forwarded), every tenant's, every judge's. Errors only: not
        worth precomputing, and always current after a reload."""
        keys = credential_values(sent)
        for tenant in self._tenants.tenants:
            if tenant.upstream_authorization:
                keys += credential_values([("authorization", tenant.upstream_authorization)])
        for name in self._policies.names:
            policy = self._policies.get(name)
            if policy is not None and policy.judge.api_key_env:
                keys.append(os.environ.get(policy.judge.api_key_env, ""))
        return secret_forms(keys)

    def _authenticate(self, scope: HTTPScope, tracker: ResponseTracker, read: _Read | None = None) -> Credentials:
        """The caller; its tenant is noted at once, so a later failure is counted against it."""
        read = read or partial(header, scope)
        authorization = read(b"authorization")
        credentials = self._tenants.authenticate(
            authorization, read(b"x-loopwarden-key"), api_key=None if authorization else _api_key(read)
        )
        tracker.tenant = credentials.tenant.name
        return credentials

    async def _guarded(
        self,
        handler: _Handler,
        scope: Scope,
        receive: Receive,
        send: Send,
        route: str,
        wire: WireFormat | None = None,
    ) -> None:
        """Run a handler; turn every failure into an answer in the route's error shape (OpenAI's
        without a format), a metric and one log line."""
        timing = begin()
        if scope["type"] == ScopeType.WEBSOCKET or asks_websocket(scope):  # refused: clients go on over HTTP
            await refuse_websocket(scope, send, wire.codec.error_body(NO_WEBSOCKETS) if wire is not None else None)
            self._metrics.of(self._metrics.requests, "-", route, "4xx").inc()
            log_event("request", {"route": route, "method": "WEBSOCKET", "status": NO_WEBSOCKETS.status})
            return
        state = ResponseTracker(send, timing)
        self._readiness.in_flight += 1
        self._metrics.in_flight.inc()
        status: int | str = "error"
        facts: dict[str, object] = {}
        try:
            facts = await handler(scope, receive, state)
            status = state.status
        except ProxyError as exc:
            status = exc.status
            facts = {"error": exc.code or exc.type}
            if not state.started:
                body = wire.codec.error_body(exc) if wire is not None else None
                await send_error(state.send, exc, body=body)  # type: ignore[arg-type]
        except ClientDisconnected:
            status = "client_disconnected"
        except Exception as exc:  # the last line of defense: never a stack trace on the wire
            status = 500
            log_event("unhandled_error", {"route": route, "error_type": type(exc).__name__}, logging.ERROR)
            if not state.started:
                failed = ProxyError("The proxy failed to handle the request.")
                body = wire.codec.error_body(failed) if wire is not None else None
                await send_error(state.send, failed, body=body)  # type: ignore[arg-type]
        finally:
            self._readiness.in_flight -= 1
            self._metrics.in_flight.dec()
        overhead = timing.overhead()
        status_class = f"{status // 100}xx" if isinstance(status, int) else status
        if state.tenant is not None:
            facts.setdefault("tenant", state.tenant)
        self._metrics.of(self._metrics.requests, str(facts.get("tenant", "-")), route, status_class).inc()
        self._metrics.of(self._metrics.overhead, route).observe(overhead)
        if timing.first_byte is not None:
            self._metrics.stream_ttfb.observe(timing.first_byte)
        facts["route"] = route  # assigned, not update(**kwargs): no keyword dict per request
        facts["method"] = scope.get("method")
        facts["status"] = status
        facts["duration_ms"] = round(timing.elapsed() * 1000, 3)
        facts["overhead_ms"] = round(overhead * 1000, 3)
        log_event("request", facts)

    async def _answer(
        self,
        reply: UpstreamReply,
        send: Send,
        facts: dict[str, object],
        sent: Sequence[tuple[str, str]],
        wire: WireFormat | None,
        own: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        """Copy a whole upstream reply; an error goes out without any provider key in it (one
        the proxy must rewrap, in the error shape of the route's API)."""
        response = reply.response
        body = response.content
        headers = reply_headers(response.headers.raw, [*_own_headers(reply), *own])
        if response.status_code >= 400:
            shape = wire.codec.error_body if wire is not None else None
            body, headers = relayed_error(response.status_code, body, headers, self._secrets(sent), shape)
        facts["upstream_status"] = response.status_code
        facts["attempts"] = reply.attempts
        await send_reply(send, response.status_code, headers, body)


def _model_url(base_url: str, wire: WireFormat, query: bytes, address: Address | None = None) -> str:
    """Where a model call goes: the tenant's base plus the format's path (the one the path
    names, for Gemini), with the client's query string when it sends one (Claude Code's
    ``?beta=true``, Azure's ``api-version``), checked as a pass-through URL is."""
    if address is not None and wire.addressing is not None:
        query = wire.addressing.upstream_query(query, address.stream)
        return checked_url_text(base_url, b"/v1" + address.upstream_path().encode(), query)
    if not query:
        return base_url + wire.upstream_path
    return checked_url_text(base_url, b"/v1" + wire.upstream_path.encode(), query)


def _keyed(scope: Scope) -> Scope:
    """The scope with a key sent as ``?key=`` (Google's clients) moved into ``x-goog-api-key``,
    before anything reads the request: no log, metric, record or upstream URL carries it."""
    query = scope.get("query_string") or b""
    if b"key=" not in query:
        return scope
    moved, headers = keyed(query, list(scope["headers"]))
    return {**scope, "query_string": moved, "headers": headers}  # type: ignore[return-value]


def _api_key(read: _Read) -> str | None:
    return next((value for name in API_KEY_HEADERS if (value := read(name.encode()))), None)


def _text_header(read: _Read, name: bytes) -> str | None:
    """A header meant as text, stripped; None when blank."""
    value = (read(name) or "").strip()
    return value or None


def _parse_object(body: bytes) -> dict[str, object]:
    """Decode a JSON request body that must be an object, with a 400 that says why not."""
    if not body:
        raise MalformedJSON("The request body is empty; expected a JSON object.")
    try:
        payload = _decode(body)
    except msgspec.DecodeError as exc:
        raise MalformedJSON(f"The request body is not valid JSON: {exc}.") from None
    except RecursionError:
        raise MalformedJSON("The request body is nested too deeply.") from None
    if not isinstance(payload, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    return payload


def _own_headers(reply: UpstreamReply) -> list[tuple[bytes, bytes]]:
    own = [(_ATTEMPTS, str(reply.attempts).encode())]
    if reply.retries_spent:
        # The proxy already retried with backoff: ask SDKs (openai's honors this) not to multiply
        # that into a storm. Not after a 429 or a Retry-After: the client's own backoff, paced by the upstream's header.
        own.append((b"x-should-retry", b"false"))
    return own
