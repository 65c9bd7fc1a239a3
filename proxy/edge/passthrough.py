"""The ``/v1/*`` pass-through and Claude Code's telemetry: forwarded as sent, within the tenant's limits.

What the proxy does not guard it still keeps to the tenant's terms. A path is checked before
anything is sent (no way out of the tenant's base, no other spelling of a guarded route, see
:mod:`proxy.upstream.paths`); its family must be on the tenant's allow-list, when it has one
(403); a call that spends model tokens must fit the tenant's day (429 once spent) and books
the usage its reply reports (see :mod:`proxy.books.tenant_day`). Claude Code's telemetry goes
to the upstream's host only where the tenant allows it, and never with the tenant's provider
key; elsewhere it is answered here, with the success Claude Code expects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import httpx
from litestar.types import HTTPScope, Receive, Send

from proxy.books.tenant_day import TenantDay
from proxy.edge.client_watch import ResponseTracker, unless_client_leaves
from proxy.edge.http import forwarded_headers, header, read_body, send_reply
from proxy.edge.tenants import API_KEY_HEADERS, Credentials, Tenant
from proxy.errors import UpstreamDisconnected
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy
from proxy.settings import Settings
from proxy.upstream.client import UpstreamClient, UpstreamReply
from proxy.upstream.headers import reply_headers
from proxy.upstream.paths import (
    is_api_root,
    is_telemetry,
    passthrough_family,
    passthrough_url,
    spends,
    telemetry_url,
)
from proxy.wire.base import WireFormat
from proxy.wire.registry import passthrough_format
from proxy.wire.usage import UsageTap, named_model

__all__ = ["Passthrough", "passthrough_wire", "upstream_headers"]

Answer = Callable[
    [UpstreamReply, Send, dict[str, object], Sequence[tuple[str, str]], "WireFormat | None"], Awaitable[None]
]
"""Copies a whole upstream reply (an error masked, in the route's shape): the routes' own."""
OwnHeaders = Callable[[UpstreamReply], list[tuple[bytes, bytes]]]
_TELEMETRY_ACCEPTED = b"{}"
"""What the proxy answers telemetry it keeps back: a 200 with a JSON body, which Claude Code's
exporter takes as delivered (it retries, and later reports, anything else)."""
_JSON = [(b"content-type", b"application/json")]


class Passthrough:
    """Forwards one pass-through call for an authenticated caller."""

    def __init__(
        self,
        settings: Settings,
        upstream: UpstreamClient,
        day: TenantDay,
        metrics: Metrics,
        policy_of: Callable[[Tenant], Policy],
        answer: Answer,
        own_headers: OwnHeaders,
        clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._upstream = upstream
        self._day = day
        self._metrics = metrics
        self._policy_of = policy_of
        self._answer = answer
        self._own_headers = own_headers
        self._clock = clock

    async def serve(
        self, scope: HTTPScope, receive: Receive, tracker: ResponseTracker, credentials: Credentials
    ) -> dict[str, object]:
        tenant = credentials.tenant
        facts: dict[str, object] = {"tenant": tenant.name}
        path, query, method = scope["raw_path"], scope["query_string"], scope["method"]
        wire = passthrough_wire(scope)
        if is_telemetry(path):
            if not self.forwards_telemetry(tenant):
                await read_body(receive, self._settings.max_body_bytes, header(scope, b"content-length"))
                self._metrics.of(self._metrics.telemetry_kept, tenant.name).inc()
                facts["outcome"] = "telemetry_kept"
                await send_reply(tracker.send, 200, _JSON, _TELEMETRY_ACCEPTED)  # type: ignore[arg-type]
                return facts
            url, headers = telemetry_url(tenant.upstream_url, path, query), telemetry_headers(scope, credentials)
        else:
            url = passthrough_url(tenant.upstream_url, path, query)
            tenant.check_family(passthrough_family(path))
            headers = upstream_headers(scope, credentials, wire)
        body = await read_body(receive, self._settings.max_body_bytes, header(scope, b"content-length"))
        started = self._clock()
        policy = self._policy_of(tenant)
        limits = []
        if spends(method, path) and (tenant.daily_tokens is not None or tenant.daily_cost_usd is not None):
            limits = await self._day.admit(tenant.name, tenant.daily_tokens, tenant.daily_cost_usd, policy, started)
        tap = UsageTap() if limits else None
        try:
            # A call answered whole (embeddings, a non-streamed response) waits here for all of it:
            # a client that hangs up meanwhile cancels it, as it does a body being relayed.
            sending = self._upstream.send(method, url, headers, body, stream=True, bounded=False)
            reply = await unless_client_leaves(sending, receive, facts, tracker)
            await self._copy_reply(reply, tracker, receive, facts, headers, wire, tap)
        finally:
            if limits:
                usage, model = tap.usage() if tap is not None else (None, None)
                if usage is not None:
                    facts.update(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)
                    await self._day.book(tenant.name, policy, limits, usage, model or named_model(body), started)
        return facts

    def forwards_telemetry(self, tenant: Tenant) -> bool:
        """The tenant's flag, else the process's setting (``auto``: the base is the API's own ``/v1``)."""
        if tenant.forward_telemetry is not None:
            return tenant.forward_telemetry
        setting = self._settings.forward_telemetry
        return setting == "on" or (setting == "auto" and is_api_root(tenant.upstream_url))

    async def _copy_reply(
        self,
        reply: UpstreamReply,
        tracker: ResponseTracker,
        receive: Receive,
        facts: dict[str, object],
        sent: Sequence[tuple[str, str]],
        wire: WireFormat | None,
        tap: UsageTap | None,
    ) -> None:
        """Copy the upstream's body to the client chunk by chunk, as it arrives (an error whole)."""
        send: Send = tracker.send  # type: ignore[assignment]
        response = reply.response
        facts.update(upstream_status=response.status_code, attempts=reply.attempts)
        if response.status_code >= 400:
            try:
                await response.aread()
            finally:
                await response.aclose()
            await self._answer(reply, send, facts, sent, wire)
            return
        headers = reply_headers(response.headers.raw, self._own_headers(reply))
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        try:
            await unless_client_leaves(_copy_body(response, send, tap), receive, facts, tracker)
        except UpstreamDisconnected:
            facts["outcome"] = "upstream_cut"  # the status is out: all a client can see is a short body
        finally:
            await response.aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _copy_body(response: httpx.Response, send: Send, tap: UsageTap | None) -> None:
    try:
        async for chunk in response.aiter_raw():
            if tap is not None:
                tap.feed(chunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except httpx.TimeoutException as exc:
        raise UpstreamDisconnected("The upstream model API stopped sending (read timeout).") from exc
    except httpx.TransportError as exc:
        raise UpstreamDisconnected("The upstream model API broke off the response.") from exc


def passthrough_wire(scope: HTTPScope) -> WireFormat | None:
    """The wire format a pass-through call belongs to (its errors' shape, where its key goes)."""
    raw = scope.get("raw_path") or b""
    return passthrough_format(raw.decode("latin-1"), lambda name: header(scope, name))


def telemetry_headers(scope: HTTPScope, credentials: Credentials) -> list[tuple[str, str]]:
    """The caller's own headers for the telemetry endpoint, which needs no provider key: the
    tenant's is never added, and where the proxy holds it, the headers a caller's proxy key came
    in stay behind. A key the client brought itself (no tenants file, or its own key) goes as sent."""
    holds_key = credentials.tenant.upstream_authorization is not None
    return forwarded_headers(
        scope, None if holds_key else credentials.upstream_authorization, dropped=API_KEY_HEADERS if holds_key else ()
    )


def upstream_headers(
    scope: HTTPScope, credentials: Credentials, wire: WireFormat | None, *, identity_encoding: bool = False
) -> list[tuple[str, str]]:
    """The caller's headers as the upstream gets them. When the proxy sends the tenant's own
    provider key, every header a proxy key can arrive in stays behind: a caller authenticated
    by ``x-api-key`` on an OpenAI route would otherwise hand its proxy key to the provider."""
    holds_key = credentials.tenant.upstream_authorization is not None
    return forwarded_headers(
        scope,
        credentials.upstream_authorization,
        identity_encoding=identity_encoding,
        key_header=_key_header(credentials, wire),
        dropped=API_KEY_HEADERS if holds_key else (),
    )


def _key_header(credentials: Credentials, wire: WireFormat | None) -> str:
    """Where the provider key goes: the format's own header when the proxy holds the tenant's
    key (Anthropic's ``x-api-key``); a key the client brought goes as the client sent it."""
    if wire is None or credentials.tenant.upstream_authorization is None:
        return "authorization"
    return wire.key_header
