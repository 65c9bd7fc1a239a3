"""The proxy's OpenAPI description, served without a key at ``GET /openapi.json``.

litestar describes its own routes (health, readiness, metrics, the sessions API). The raw
ASGI routes are invisible to it, so ``POST /v1/chat/completions`` is written here by hand:
the fields the proxy reads, typed as it checks them, everything else let through (the proxy
forwards unknown fields untouched), and every answer it can give, errors in OpenAI's shape.
The ``/v1/*`` pass-through forwards whatever the upstream serves and is described in words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from litestar import Litestar, Router
from litestar.handlers import HTTPRouteHandler
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import (
    Components,
    OpenAPIMediaType,
    OpenAPIType,
    Operation,
    PathItem,
    RequestBody,
    Schema,
    SecurityRequirement,
    SecurityScheme,
)
from litestar.routes import BaseRoute
from litestar.types import ControllerRouterHandler

from proxy.books.grants import MOST_PER_GRANT
from proxy.version import VERSION

__all__ = [
    "ANTHROPIC_ERROR_SCHEMA",
    "AUTHENTICATED",
    "ERROR_SCHEMA",
    "GrantOperation",
    "OpenAIError",
    "describe_raw_routes",
    "error_responses",
    "openapi_config",
]

_DESCRIPTION = (
    "A guarding reverse proxy for LLM agents. `POST /v1/chat/completions`, `POST /v1/responses` "
    "(OpenAI) and `POST /v1/messages` (Anthropic) are guarded; every other `/v1/*` route (models, "
    "embeddings, files, stored responses, count_tokens, ...) is forwarded to the upstream model API "
    "as it is and answers what the upstream answers. Every error the proxy itself returns has the "
    'shape of the API it answers: OpenAI\'s `{"error": {"message", "type", "param", "code"}}`, '
    'or on Anthropic routes `{"type": "error", "error": {"type", "message"}}`. '
    "Without a tenants file (the quick start) no proxy key is checked: the client's own "
    "`Authorization` header goes upstream as it is."
)

AUTHENTICATED: list[SecurityRequirement] = [{"bearer": []}, {"proxyKey": [], "bearer": []}]
"""A proxy key as a bearer token, or (bring-your-own-key tenants) in X-LoopWarden-Key
with the provider key as the bearer token."""

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "additionalProperties": False,
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "additionalProperties": False,
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


@dataclass
class ErrorDetail:
    message: str
    type: str
    param: str | None
    code: str | None


@dataclass
class OpenAIError:
    """The error envelope (see :func:`proxy.errors.error_body`), for litestar's response specs."""

    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int, ResponseSpec]:
    """Documented error answers for a litestar handler, each in OpenAI's shape."""
    return {
        status: ResponseSpec(
            data_container=OpenAIError,
            description=_ERRORS[status],
            media_type="application/json",
            generate_examples=False,
        )
        for status in statuses
    }


_ERRORS = {
    400: "Malformed JSON, a body that is not an object, or a request schema that does not compile.",
    401: "Missing or unknown proxy key (one uniform answer).",
    403: "A policy the key may not use.",
    404: "Unknown route or session (another tenant's sessions are unknown too).",
    405: "Wrong method.",
    409: "A budget grant over the policy's ceiling, or of a budget it does not set; the message says how much may "
    "still be granted.",
    413: "Body over the size limit.",
    429: "The tenant's rolling-day budget is used up (with Retry-After), or the upstream's 429.",
    500: "The upstream's own 500.",
    502: "Upstream unreachable, closed the connection, or answered something malformed.",
    503: "Upstream pool exhausted, session state unavailable under a fail-closed policy, or the upstream's 503.",
    504: "Upstream timeout or total deadline passed.",
}


def _grant_amount(integer: bool, what: str) -> Schema:
    kind = OpenAPIType.INTEGER if integer else OpenAPIType.NUMBER
    return Schema(type=kind, exclusive_minimum=0, maximum=MOST_PER_GRANT, description=what)


GRANT_BODY = Schema(
    type=OpenAPIType.OBJECT,
    min_properties=1,
    additional_properties=False,
    description="More of the session's budgets, on top of its policy's; each within the policy's "
    "budgets.grant_ceiling for that budget, counted over every grant the session received. A session that "
    "budget ended (budget_steps, budget_tokens, budget_cost, budget_time) goes on with its next request.",
    properties={
        "steps": _grant_amount(True, "More model calls (max_steps)."),
        "tokens": _grant_amount(True, "More prompt + completion tokens (budgets.max_tokens)."),
        "cost_usd": _grant_amount(False, "More cost in USD (budgets.max_cost_usd)."),
        "active_secs": _grant_amount(False, "More active time in seconds (budgets.max_active_secs)."),
    },
)


@dataclass
class GrantOperation(Operation):
    """The budget grant's operation, its JSON body described (the handler reads it raw, to
    answer a bad body in OpenAI's shape, naming the field)."""

    def __post_init__(self) -> None:
        self.request_body = RequestBody(
            content={"application/json": OpenAPIMediaType(schema=GRANT_BODY)}, required=True
        )


class _DocumentRouter(Router):
    """litestar's OpenAPI router without its HTML "404 Not found" page for other paths below
    it: those get the proxy's OpenAI-shaped 404, like every other unknown route."""

    def register(self, value: ControllerRouterHandler) -> list[BaseRoute]:
        if isinstance(value, HTTPRouteHandler) and "/{path:str}" in value.paths:
            return []
        return super().register(value)


def openapi_config() -> OpenAPIConfig:
    """Only the JSON document, at ``/openapi.json`` (no UI pages, nothing else at the root)."""
    return OpenAPIConfig(
        title="LoopWarden",
        version=VERSION,
        description=_DESCRIPTION,
        path="/openapi.json",
        use_handler_docstrings=True,
        render_plugins=[JsonRenderPlugin(path="/")],
        openapi_router=_DocumentRouter("/openapi.json", route_handlers=[], include_in_schema=False),
        components=Components(
            security_schemes={
                "bearer": SecurityScheme(
                    type="http", scheme="bearer", description="The proxy key, or a provider key without tenants."
                ),
                "proxyKey": SecurityScheme(
                    type="apiKey",
                    name="X-LoopWarden-Key",
                    security_scheme_in="header",
                    description="The proxy key of a bring-your-own-key tenant.",
                ),
            }
        ),
    )


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool", "function"]},
        "content": {
            "oneOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "object"}},
                {"type": "null"},
            ]
        },
        "name": {"type": "string"},
        "tool_call_id": {"type": "string"},
        "tool_calls": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "type", "function"],
                "properties": {
                    "id": {"type": "string"},
                    "type": {"type": "string", "enum": ["function"]},
                    "function": {
                        "type": "object",
                        "required": ["name", "arguments"],
                        "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
                    },
                },
            },
        },
    },
}

_TOOL = {
    "type": "object",
    "required": ["type", "function"],
    "properties": {
        "type": {"type": "string", "enum": ["function"]},
        "function": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "description": {"type": "string"},
                "parameters": {"type": "object"},
            },
        },
    },
}

CHAT_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["model", "messages"],
    "description": "OpenAI's chat completions request; fields not listed here are forwarded untouched.",
    "properties": {
        "model": {"type": "string"},
        "messages": {"type": "array", "items": _MESSAGE},
        "stream": {"type": "boolean"},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
        "tools": {"type": "array", "items": _TOOL},
        "tool_choice": {"oneOf": [{"type": "string"}, {"type": "object"}]},
        "max_tokens": {"type": "integer", "minimum": 1},
        "max_completion_tokens": {"type": "integer", "minimum": 1},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "response_format": {
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": {"type": "string", "enum": ["text", "json_object", "json_schema"]},
                "json_schema": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "schema": {"type": "object"}},
                },
            },
        },
    },
}

_COMPLETION = {
    "type": "object",
    "required": ["object", "choices"],
    "description": "The upstream's chat.completion (or the proxy's graceful ending, in the same shape).",
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string"},
        "model": {"type": "string"},
        "choices": {"type": "array", "items": {"type": "object"}},
        "usage": {"type": "object"},
    },
}

_SSE_EVENT = {
    "type": "object",
    "description": "One server-sent event: `data` is a chat.completion.chunk as JSON, an error object, or `[DONE]`.",
    "required": ["data"],
    "properties": {
        "data": {"type": "string"},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}

_SESSION_HEADERS = [
    {
        "name": "X-Session-Id",
        "in": "header",
        "required": False,
        "schema": {"type": "string"},
        "description": "The agent's session; derived from the conversation's opening when absent.",
    },
    {
        "name": "X-Agent-Id",
        "in": "header",
        "required": False,
        "schema": {"type": "string"},
        "description": "A sub-agent of the session, with state of its own.",
    },
    {
        "name": "X-LoopWarden-Policy",
        "in": "header",
        "required": False,
        "schema": {"type": "string"},
        "description": "One of the tenant's policies (403 for another).",
    },
]


def _chat_operation() -> dict[str, Any]:
    error = ERROR_SCHEMA
    responses: dict[str, Any] = {
        "200": {
            "description": "A chat.completion; with `stream: true`, an SSE stream of chat.completion.chunk events.",
            "content": {
                "application/json": {"schema": _COMPLETION},
                "text/event-stream": {"schema": _SSE_EVENT},
            },
        }
    }
    for status in (400, 401, 403, 405, 413, 429, 500, 502, 503, 504):
        responses[str(status)] = _json(error, _ERRORS[status])
    responses["default"] = _json(error, "Another upstream error status, passed through in OpenAI's shape.")
    return {
        "summary": "Guarded chat completions",
        "description": "Forwarded to the upstream through the guard pipeline; see the README's Guards section.",
        "operationId": "createChatCompletion",
        "tags": ["chat"],
        "security": AUTHENTICATED,
        "parameters": _SESSION_HEADERS,
        "requestBody": {"required": True, "content": {"application/json": {"schema": CHAT_REQUEST}}},
        "responses": responses,
    }


ANTHROPIC_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}
"""The error shape of the Messages route (Anthropic's own)."""


def _guarded_operation(
    summary: str, operation_id: str, tag: str, required: list[str], reply: str, error: dict[str, Any], shape: str
) -> dict[str, Any]:
    """A guarded model route other than chat's: its request's required fields, its reply, and
    its errors in ``error``'s shape."""
    responses: dict[str, Any] = {
        "200": {
            "description": reply,
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "text/event-stream": {"schema": _SSE_EVENT},
            },
        }
    }
    for status in (400, 401, 403, 405, 413, 429, 500, 502, 503, 504):
        responses[str(status)] = _json(error, _ERRORS[status])
    responses["default"] = _json(error, f"Another upstream error status, passed through in {shape} shape.")
    return {
        "summary": summary,
        "description": "Forwarded to the upstream through the same guard pipeline as chat completions.",
        "operationId": operation_id,
        "tags": [tag],
        "security": AUTHENTICATED,
        "parameters": _SESSION_HEADERS,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object", "required": required}}},
        },
        "responses": responses,
    }


def describe_raw_routes(app: Litestar) -> None:
    """Add the hand-written operations of the raw ASGI routes to the generated document."""
    responses = _guarded_operation(
        "Guarded responses (OpenAI Responses API)",
        "createResponse",
        "responses",
        ["model"],
        "A response; with `stream: true`, an SSE stream of named response events.",
        ERROR_SCHEMA,
        "OpenAI's",
    )
    messages = _guarded_operation(
        "Guarded messages (Anthropic Messages API)",
        "createMessage",
        "messages",
        ["model", "max_tokens", "messages"],
        "A message; with `stream: true`, an SSE stream of named message events.",
        ANTHROPIC_ERROR_SCHEMA,
        "Anthropic's",
    )
    operations = {
        "/v1/chat/completions": _chat_operation(),
        "/v1/responses": responses,
        "/v1/messages": messages,
    }
    described = {path: cast(PathItem, {"post": operation}) for path, operation in operations.items()}
    app.openapi_schema.paths = {**(app.openapi_schema.paths or {}), **described}  # plain dicts render as they are
