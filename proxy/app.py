"""Wiring only: build the litestar application from settings and injected parts."""

from __future__ import annotations

from typing import Any

from litestar import Litestar, MediaType, Request, Response, asgi, get
from litestar.exceptions import HTTPException, MethodNotAllowedException, NotFoundException
from litestar.status_codes import HTTP_503_SERVICE_UNAVAILABLE

from proxy.errors import MethodNotAllowed, ProxyError, RouteNotFound
from proxy.routes import ProxyRoutes, Readiness
from proxy.settings import Settings
from proxy.tenants import TenantDirectory, load_tenants
from proxy.upstream import UpstreamClient

__all__ = ["create_app", "load_tenant_directory"]


def load_tenant_directory(settings: Settings) -> TenantDirectory:
    """The tenants file when one is set; otherwise one open tenant on ``--upstream``."""
    if settings.tenants_file is not None:
        return load_tenants(settings.tenants_file, settings.upstream)
    if not settings.upstream:
        raise ValueError("no upstream: pass --upstream (LOOPWARDEN_UPSTREAM) or a tenants file")
    return TenantDirectory.open(settings.upstream)


def _error_response(error: ProxyError) -> Response[bytes]:
    return Response(error.body(), status_code=error.status, media_type=MediaType.JSON, headers=error.headers)


def _not_found(_: Request[Any, Any, Any], exc: NotFoundException) -> Response[bytes]:
    return _error_response(RouteNotFound("Unknown route. LoopWarden serves the OpenAI API under /v1."))


def _method_not_allowed(_: Request[Any, Any, Any], exc: MethodNotAllowedException) -> Response[bytes]:
    return _error_response(MethodNotAllowed(f"Method not allowed: {exc.detail}."))


def _http_exception(_: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    error = ProxyError(exc.detail or "Request failed.")
    error.status = exc.status_code  # type: ignore[misc]
    return _error_response(error)


def _internal_error(_: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    return _error_response(ProxyError("The proxy failed to handle the request."))


def create_app(
    settings: Settings,
    *,
    tenants: TenantDirectory | None = None,
    upstream: UpstreamClient | None = None,
    readiness: Readiness | None = None,
) -> Litestar:
    """Assemble the proxy. Every collaborator can be injected; defaults come from ``settings``."""
    directory = tenants or load_tenant_directory(settings)
    client = upstream or UpstreamClient(settings)
    ready = readiness or Readiness()
    routes = ProxyRoutes(settings, directory, client, ready)

    @asgi("/v1/chat/completions", copy_scope=False)
    async def chat_completions(scope: object, receive: object, send: object) -> None:
        await routes.chat_completions(scope, receive, send)  # type: ignore[arg-type]

    @asgi("/v1", is_mount=True, copy_scope=False)
    async def passthrough(scope: object, receive: object, send: object) -> None:
        await routes.passthrough(scope, receive, send)  # type: ignore[arg-type]

    @get("/healthz", media_type=MediaType.JSON)
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @get("/readyz", media_type=MediaType.JSON)
    async def readyz() -> Response[dict[str, str]]:
        """Readiness: started and not draining; load balancers stop sending when this fails."""
        if ready.started and not ready.draining:
            return Response({"status": "ready"})
        reason = "draining" if ready.draining else "starting"
        return Response({"status": reason}, status_code=HTTP_503_SERVICE_UNAVAILABLE)

    async def on_startup() -> None:
        ready.started = True

    async def on_shutdown() -> None:
        ready.draining = True
        await client.aclose()

    return Litestar(
        route_handlers=[chat_completions, passthrough, healthz, readyz],
        exception_handlers={
            NotFoundException: _not_found,
            MethodNotAllowedException: _method_not_allowed,
            HTTPException: _http_exception,
            500: _internal_error,
        },
        on_startup=[on_startup],
        on_shutdown=[on_shutdown],
        openapi_config=None,
        logging_config=None,
        debug=False,
    )
