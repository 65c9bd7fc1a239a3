"""Wiring only: build the litestar application from settings and injected parts."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from pathlib import Path
from typing import Any

from litestar import Litestar, MediaType, Request, Response, asgi, get, head
from litestar.exceptions import HTTPException, MethodNotAllowedException, NotFoundException, ValidationException
from litestar.openapi import ResponseSpec
from litestar.status_codes import HTTP_503_SERVICE_UNAVAILABLE

from proxy.books.pricing import load_pricing
from proxy.books.tenant_day import TenantDay
from proxy.edge.console.views import ConsoleSources
from proxy.edge.openapi import describe_raw_routes, openapi_config
from proxy.edge.routes import ProxyRoutes, Readiness
from proxy.edge.sessions_api import session_routes
from proxy.edge.tenants import TenantDirectory, load_tenants
from proxy.errors import InvalidRequest, MethodNotAllowed, ProxyError, RouteNotFound
from proxy.loop.build import build_pipeline
from proxy.loop.recording import Recorder
from proxy.observe.logs import log_event
from proxy.observe.metrics import Metrics
from proxy.observe.tracing import Tracing
from proxy.policy.loader import BUNDLED_POLICIES, PolicyError, PolicyRegistry
from proxy.session.base import SessionStore, StoreUnavailable
from proxy.session.memory import MemoryStore
from proxy.session.redis import RedisStore
from proxy.settings import Settings
from proxy.upstream.client import UpstreamClient
from proxy.upstream.paths import CLAUDE_TELEMETRY
from proxy.wire.registry import FORMATS, format_named, passthrough_format

__all__ = ["YOUNG_GC_THRESHOLD", "build_store", "create_app", "load_tenant_directory"]


def build_store(settings: Settings, metrics: Metrics | None = None) -> SessionStore:
    """Redis when a URL is set (shared by replicas), otherwise in-process memory (bounded per tenant)."""
    series = metrics or Metrics()

    def dropped(tenant: str, what: str, count: int) -> None:
        series.of(series.timeline_dropped, tenant, what).inc(count)

    bounds: dict[str, Any] = {
        "timeline_events": settings.timeline_events,
        "listed_sessions": settings.listed_sessions,
        "on_dropped": dropped,
    }
    if settings.redis_url:
        return RedisStore.from_url(
            settings.redis_url,
            timeout=settings.redis_timeout,
            max_connections=settings.redis_max_connections,
            cluster=settings.redis_cluster,
            **bounds,
        )
    return MemoryStore(
        max_sessions_per_tenant=settings.memory_sessions_per_tenant,
        on_evict=lambda tenant: series.of(series.sessions_evicted, tenant).inc(),
        **bounds,
    )


def _check_tenant_policies(tenants: TenantDirectory, policies: PolicyRegistry) -> None:
    """Every tenant's policies exist; all that do not are named at once."""
    missing = {
        tenant.name: names
        for tenant in tenants.tenants
        if (names := [name for name in tenant.policies if policies.get(name) is None])
    }
    if missing:
        named = "; ".join(f"tenant {tenant!r}: {names}" for tenant, names in missing.items())
        raise PolicyError(f"tenants name policies that do not exist in {policies.directory}: {named}")


def _warn_caps_below_reserve(tenants: TenantDirectory, policies: PolicyRegistry) -> None:
    """A tenant's daily token cap at or below what one of its policies reserves for a call that
    sets no output limit: such calls can never fit (each gets a 400 naming the cap), only those
    with a small ``max_tokens`` can. Valid, but worth a line at the start."""
    for tenant in tenants.tenants:
        if tenant.daily_tokens is None:
            continue
        for name in policies.names if tenant.any_policy else tenant.policies:
            policy = policies.get(name)
            if policy is not None and tenant.daily_tokens <= policy.budgets.reserve_tokens:
                fields = {"tenant": tenant.name, "daily_tokens": tenant.daily_tokens, "policy": name}
                reserve = {"reserve_tokens": policy.budgets.reserve_tokens}
                effect = {"effect": "calls without an output limit get 400"}
                log_event("tenant_cap_below_reserve", {**fields, **reserve, **effect}, logging.WARNING)


def _check_recording(policies: PolicyRegistry, settings: Settings) -> None:
    """A policy that records to a Redis stream needs the proxy's Redis."""
    for name in policies.names:
        policy = policies.get(name)
        if policy is not None and policy.recording.enabled and policy.recording.redis_stream and not settings.redis_url:
            raise PolicyError(f"policy {name!r} records to a Redis stream, but no --redis-url is set")


def _pricing_path(policies_dir: Path) -> Path:
    """The directory's ``pricing.yaml``, else the shipped one: cost budgets need prices."""
    own = policies_dir / "pricing.yaml"
    return own if own.exists() else BUNDLED_POLICIES / "pricing.yaml"


def load_tenant_directory(settings: Settings) -> TenantDirectory:
    """The tenants file when one is set; otherwise one open tenant on ``--upstream``."""
    if settings.tenants_file is not None:
        return load_tenants(settings.tenants_file, settings.upstream)
    if not settings.upstream:
        raise ValueError("no upstream: pass --upstream (LOOPWARDEN_UPSTREAM) or a tenants file")
    return TenantDirectory.open(settings.upstream)


_NOT_READY = {
    503: ResponseSpec(
        data_container=dict[str, str],
        description="Starting, draining, or the state store does not answer.",
        generate_examples=False,
    )
}


def _failing_closed(policies: PolicyRegistry) -> list[str]:
    """The policies that refuse requests (503) while the state store does not answer."""
    return [name for name in policies.names if (p := policies.get(name)) is not None and p.state_fail_mode == "closed"]


def _unready_reason(exc: StoreUnavailable, policies: PolicyRegistry) -> str:
    """Why /readyz fails while the store does not answer, and what requests get meanwhile; the
    store's address stays in the log (the ``state_store_unavailable`` line), off the API port."""
    cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "no answer"
    closed = _failing_closed(policies)
    meanwhile = (
        f"requests under the policies that fail closed ({', '.join(closed)}) get 503 until it answers; the others "
        "are served guarded only by what each request shows (X-LoopWarden-Degraded)"
        if closed
        else "requests are served guarded only by what each request shows (X-LoopWarden-Degraded)"
    )
    return f"the session state store does not answer ({cause}); {meanwhile}"


def _error_response(error: ProxyError) -> Response[bytes]:
    return Response(error.body(), status_code=error.status, media_type=MediaType.JSON, headers=error.headers)


_UNKNOWN_ROUTE = (
    "Unknown route. LoopWarden guards POST /v1/chat/completions, /v1/responses and /v1/messages and "
    "passes the rest of /v1 (and Claude Code's telemetry) through to the upstream."
)


def _not_found(request: Request[Any, Any, Any], exc: NotFoundException) -> Response[bytes]:
    """A 404 in the shape of the API the client speaks (Anthropic's for an Anthropic client)."""
    path = request.url.path
    error = RouteNotFound(_UNKNOWN_ROUTE)
    wire = passthrough_format(path, lambda name: request.headers.get(name.decode("latin-1")))
    if wire is None:
        return _error_response(error)
    body = wire.codec.error_body(error)
    return Response(body, status_code=error.status, media_type=MediaType.JSON)


def _method_not_allowed(request: Request[Any, Any, Any], exc: MethodNotAllowedException) -> Response[bytes]:
    """A 405 names the methods the route has, in ``Allow`` too (RFC 9110 requires it)."""
    allowed = (exc.headers or {}).get("allow", "")
    message = f"Method {request.method} is not allowed on {request.url.path}"
    message += f"; use {allowed}." if allowed else "."
    return _error_response(MethodNotAllowed(message, headers={"Allow": allowed} if allowed else None))


def _http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    """litestar's own refusals (a query parameter of the wrong type, ...): a client's error is
    an ``invalid_request_error`` naming the parameter and what it must be, not a server's."""
    if isinstance(exc, ValidationException) or 400 <= exc.status_code < 500:
        param, message = _invalid_parameter(exc.extra, _query_names(request))
        refused = InvalidRequest(message or exc.detail or "The request is not valid.", param=param)
        refused.status = exc.status_code  # type: ignore[misc]
        return _error_response(refused)
    error = ProxyError(exc.detail or "Request failed.")
    error.status = exc.status_code  # type: ignore[misc]
    return _error_response(error)


def _query_names(request: Request[Any, Any, Any]) -> dict[str, str]:
    """The handler's parameters that the query names otherwise (``running`` is ``state``)."""
    try:
        parameters = request.route_handler.parsed_fn_signature.parameters
    except AttributeError:  # no handler resolved (a refusal before routing)
        return {}
    definitions = {name: parameter.kwarg_definition for name, parameter in parameters.items()}
    named = {name: getattr(kwarg, "query", None) or getattr(kwarg, "name", None) for name, kwarg in definitions.items()}
    return {name: alias for name, alias in named.items() if isinstance(alias, str) and alias}


def _invalid_parameter(extra: object, aliases: dict[str, str]) -> tuple[str | None, str | None]:
    """The first refused parameter in a litestar validation error's ``extra`` and a sentence
    about it (``Invalid query parameter 'limit': Expected `int`, got `str`.``)."""
    first = extra[0] if isinstance(extra, list) and extra and isinstance(extra[0], dict) else None
    if first is None or not first.get("key"):
        return None, None
    key = aliases.get(str(first["key"]), str(first["key"]))
    source = str(getattr(first.get("source"), "value", first.get("source")) or "query")
    why = str(first.get("message") or "not valid").rstrip(".")
    return key, f"Invalid {source} parameter '{key}': {why}."


def _proxy_error(_: Request[Any, Any, Any], exc: ProxyError) -> Response[bytes]:
    return _error_response(exc)


def _internal_error(_: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    return _error_response(ProxyError("The proxy failed to handle the request."))


YOUNG_GC_THRESHOLD = 10_000
"""Tracked objects allocated (net of those freed) before the cyclic GC runs a young collection.

Python's default, 700, is crossed every few requests by what requests in flight hold alive
(not garbage: a request's objects are freed by reference counting when it ends), so young
collections kept traversing live requests and promoting them, and older collections the
promoted: 7 % of a busy process's CPU, growing over a long run. At 10,000 a load of 64
requests in flight triggers none (``tests/bench/session_load.py``); real cyclic garbage still
triggers one after 10,000 objects, a few milliseconds at most."""


def create_app(
    settings: Settings,
    *,
    tenants: TenantDirectory | None = None,
    upstream: UpstreamClient | None = None,
    readiness: Readiness | None = None,
    store: SessionStore | None = None,
    policies: PolicyRegistry | None = None,
    metrics: Metrics | None = None,
    tracing: Tracing | None = None,
    recorder: Recorder | None = None,
) -> Litestar:
    """Assemble the proxy. Every collaborator can be injected; defaults come from ``settings``."""
    directory = tenants or load_tenant_directory(settings)
    registry = policies or PolicyRegistry(settings.policies_dir or BUNDLED_POLICIES)
    _check_tenant_policies(directory, registry)
    _warn_caps_below_reserve(directory, registry)
    _check_recording(registry, settings)
    series = metrics or Metrics()
    client = upstream or UpstreamClient(settings, metrics=series)
    state_store = store or build_store(settings, series)
    ready = readiness or Readiness()
    prices_path = _pricing_path(registry.directory)
    prices = load_pricing(prices_path)
    log_event(
        "configuration",
        {
            "policies_dir": str(registry.directory),
            "policies": registry.names,
            "pricing": str(prices_path),
            "priced_models": len(prices.prices),
        },
    )
    steps = recorder or Recorder(settings.redis_url, cluster=settings.redis_cluster, timeout=settings.redis_timeout)
    pipeline = build_pipeline(
        client,
        state_store,
        series,
        formats=format_named,
        prices=prices,
        log_contents=settings.log_contents,
        tracing=tracing or Tracing.from_endpoint(settings.otel_endpoint),
        keepalive_secs=settings.stream_keepalive_secs,
        recorder=steps,
    )
    routes = ProxyRoutes(
        settings, directory, client, ready, pipeline, registry, series, TenantDay(state_store, series, prices)
    )
    background: list[asyncio.Task[None]] = []

    handlers = {wire.name: routes.model_route(wire) for wire in FORMATS}
    model_calls = [
        asgi(wire.route, is_mount=wire.addressing is not None, copy_scope=False, name=wire.name)(handlers[wire.name])
        for wire in FORMATS
    ]
    # Served before litestar (which routes ``/v1beta/…`` through the ``/v1`` mount): exact routes,
    # and a format whose path names the call by everything below its mount.
    guarded = {wire.route + ("/" if wire.addressing is not None else ""): routes.model_entry(wire) for wire in FORMATS}

    @asgi(list(CLAUDE_TELEMETRY), copy_scope=False)
    async def claude_telemetry(scope: object, receive: object, send: object) -> None:
        """Claude Code's telemetry: forwarded where it would go without the proxy, where the tenant allows it."""
        await routes.passthrough(scope, receive, send)  # type: ignore[arg-type]

    @asgi("/v1", is_mount=True, copy_scope=False)
    async def passthrough(scope: object, receive: object, send: object) -> None:
        await routes.passthrough(scope, receive, send)  # type: ignore[arg-type]

    @get("/", media_type=MediaType.JSON, include_in_schema=False)
    async def root() -> dict[str, str]:
        """What answers at the base URL (Claude Code probes it with HEAD): the proxy, alive."""
        return {"service": "loopwarden", "status": "ok"}

    @head("/", include_in_schema=False)
    async def root_head() -> None:
        """The same probe without a body."""

    @get("/healthz", media_type=MediaType.JSON)
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @get("/readyz", media_type=MediaType.JSON, responses=_NOT_READY)
    async def readyz() -> Response[dict[str, str]]:
        """Readiness: started, not draining, state store answering."""
        if not ready.started or ready.draining:
            reason = "draining" if ready.draining else "starting"
            return Response({"status": reason}, status_code=HTTP_503_SERVICE_UNAVAILABLE)
        try:
            await state_store.ping()
        except StoreUnavailable as exc:
            body = {"status": "state store unavailable", "reason": _unready_reason(exc, registry)}
            return Response(body, status_code=HTTP_503_SERVICE_UNAVAILABLE)
        return Response({"status": "ready"})

    async def check_store() -> None:
        """At the start, a store that does not answer is a warning naming where it is, at once
        (not the first request's error): the proxy still starts, and /readyz says why it is not ready."""
        try:
            await state_store.ping()
        except StoreUnavailable as exc:
            closed = _failing_closed(registry)
            log_event("state_store_unavailable", {"error": str(exc), "fail_closed_policies": closed}, logging.WARNING)

    async def on_startup() -> None:
        ready.started = True
        # Everything built so far (the app, routes, policies, imported modules) lives for the
        # whole process: move it out of the cyclic GC's generations so collections triggered
        # by per-request garbage do not traverse it again and again.
        gc.collect()
        gc.freeze()
        gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
        loop = asyncio.get_running_loop()
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            loop.add_signal_handler(signal.SIGHUP, registry.reload)  # only possible in the main thread
        if settings.policy_reload_interval > 0:
            background.append(asyncio.create_task(registry.watch(settings.policy_reload_interval)))
        background.append(asyncio.create_task(check_store()))

    async def on_shutdown() -> None:
        ready.draining = True
        for task in background:
            task.cancel()
        await steps.aclose()
        await client.aclose()
        await state_store.aclose()

    app = Litestar(
        route_handlers=[
            *model_calls,
            claude_telemetry,
            root,
            root_head,
            passthrough,
            healthz,
            readyz,
            *session_routes(directory, state_store, routes.policy_for, series),
        ],
        exception_handlers={
            NotFoundException: _not_found,
            MethodNotAllowedException: _method_not_allowed,
            ProxyError: _proxy_error,
            HTTPException: _http_exception,
            500: _internal_error,
        },
        on_startup=[on_startup],
        on_shutdown=[on_shutdown],
        openapi_config=openapi_config(),
        logging_config=None,
        debug=False,
    )
    describe_raw_routes(app)
    app.state.guarded_routes = guarded  # served before litestar by the server (see proxy.edge.dispatch)
    app.state.console = ConsoleSources(directory, state_store, routes.policy_for, series.scrape_registry)
    return app
