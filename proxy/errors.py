"""Every error the proxy itself returns, in one hierarchy.

Clients of an OpenAI-compatible API parse ``{"error": {"message", "type", "param", "code"}}``;
each class below fixes the HTTP status and the OpenAI error ``type`` so a handler only
raises and the edge renders. Upstream errors are not in this tree: they pass through as
the upstream sent them, provider keys masked (``proxy.upstream.relayed_errors``). An error reached after the
upstream client's own retries carries their count and ``x-should-retry: false`` in ``headers``.

    ProxyError                      500 server_error
    ├── InvalidRequest              400 invalid_request_error
    │   ├── MalformedJSON           400 invalid_request_error / invalid_json
    │   └── RepeatedBasePath        400 invalid_request_error / base_url_repeats_v1
    ├── AuthenticationFailed        401 authentication_error / invalid_api_key
    ├── PermissionDenied            403 permission_error
    ├── RouteNotFound               404 invalid_request_error / not_found
    ├── WebSocketRefused            426 invalid_request_error / websocket_not_supported
    ├── MethodNotAllowed            405 invalid_request_error / method_not_allowed
    ├── GrantOverCeiling            409 invalid_request_error / grant_over_ceiling
    ├── PayloadTooLarge             413 invalid_request_error / payload_too_large
    ├── RateLimited                 429 rate_limit_error / tenant_budget_exceeded
    ├── ServiceUnavailable          503 server_error / service_unavailable
    └── UpstreamError               502 upstream_error
        ├── UpstreamUnreachable     502 upstream_error / upstream_unreachable
        ├── UpstreamDisconnected    502 upstream_error / upstream_disconnected
        ├── UpstreamMalformed       502 upstream_error / upstream_malformed
        ├── UpstreamReplyTooLarge   502 upstream_error / upstream_reply_too_large
        └── UpstreamTimeout         504 upstream_error / upstream_timeout
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

__all__ = [
    "AuthenticationFailed",
    "GrantOverCeiling",
    "InvalidRequest",
    "MalformedJSON",
    "MethodNotAllowed",
    "PayloadTooLarge",
    "PermissionDenied",
    "ProxyError",
    "RateLimited",
    "RepeatedBasePath",
    "RouteNotFound",
    "ServiceUnavailable",
    "UpstreamDisconnected",
    "UpstreamError",
    "UpstreamMalformed",
    "UpstreamReplyTooLarge",
    "UpstreamTimeout",
    "UpstreamUnreachable",
    "WebSocketRefused",
    "error_body",
]

_encode = msgspec.json.Encoder().encode


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> bytes:
    """Render the OpenAI error envelope; the one place its shape is spelled out."""
    return _encode({"error": {"message": message, "type": type_, "param": param, "code": code}})


class ProxyError(Exception):
    """Base of every error the proxy answers with; carries status, type and code."""

    status: ClassVar[int] = 500
    type: ClassVar[str] = "server_error"
    code: ClassVar[str | None] = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers = headers or {}

    def body(self) -> bytes:
        return error_body(self.message, self.type, self.code, self.param)


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class MalformedJSON(InvalidRequest):
    code = "invalid_json"


class RepeatedBasePath(InvalidRequest):
    """A path that starts ``/v1/v1``: the client's base URL already ends in ``/v1``."""

    code = "base_url_repeats_v1"


class AuthenticationFailed(ProxyError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(ProxyError):
    status = 403
    type = "permission_error"
    code = "permission_denied"


class RouteNotFound(ProxyError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class WebSocketRefused(ProxyError):
    """A WebSocket upgrade the proxy does not take: 426 tells a client with an HTTP transport
    (Codex) to use it at once (a 404 or 403 makes Codex retry five times first)."""

    status = 426
    type = "invalid_request_error"
    code = "websocket_not_supported"


class MethodNotAllowed(ProxyError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class GrantOverCeiling(ProxyError):
    """A budget grant the policy's ceiling does not allow; the message says what is left."""

    status = 409
    type = "invalid_request_error"
    code = "grant_over_ceiling"


class PayloadTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "payload_too_large"


class RateLimited(ProxyError):
    status = 429
    type = "rate_limit_error"
    code = "tenant_budget_exceeded"


class ServiceUnavailable(ProxyError):
    status = 503
    type = "server_error"
    code = "service_unavailable"


class UpstreamError(ProxyError):
    status = 502
    type = "upstream_error"
    code = "upstream_error"


class UpstreamUnreachable(UpstreamError):
    code = "upstream_unreachable"


class UpstreamDisconnected(UpstreamError):
    code = "upstream_disconnected"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class UpstreamMalformed(UpstreamError):
    code = "upstream_malformed"


class UpstreamReplyTooLarge(UpstreamError):
    """The upstream's reply grew past ``max_reply_bytes``: the proxy holds a guarded reply
    whole, so an unbounded one would hold unbounded memory."""

    code = "upstream_reply_too_large"
