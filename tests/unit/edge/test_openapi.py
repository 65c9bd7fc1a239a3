"""The OpenAPI description: the error shape it documents is the one the proxy renders."""

from __future__ import annotations

import json

import jsonschema
import pytest

from proxy.books.grants import BUDGETS
from proxy.edge.app import create_app
from proxy.edge.openapi import ANTHROPIC_ERROR_SCHEMA, CHAT_REQUEST, ERROR_SCHEMA
from proxy.errors import ProxyError, RouteNotFound, ServiceUnavailable, UpstreamTimeout, error_body
from proxy.settings import Settings


@pytest.mark.parametrize(
    "error",
    [
        ProxyError("boom"),
        RouteNotFound("gone", param="session_id"),
        ServiceUnavailable("later"),
        UpstreamTimeout("slow"),
    ],
    ids=["base", "with-param", "unavailable", "timeout"],
)
def test_the_documented_error_shape_is_the_rendered_one(error):
    jsonschema.validate(json.loads(error.body()), ERROR_SCHEMA)


def test_the_documented_error_shape_rejects_anything_else():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"detail": "Not Found", "status_code": 404}, ERROR_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(error_body("m", "t")) | {"extra": 1}, ERROR_SCHEMA)


def test_the_chat_request_schema_accepts_an_ordinary_request():
    request = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
        "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}],
        "stream": False,
        "some_new_field": {"passes": "through"},
    }

    jsonschema.validate(request, CHAT_REQUEST)


def test_every_error_answer_in_the_document_has_its_apis_shape():
    document = create_app(Settings(upstream="http://127.0.0.1:9/v1")).openapi_schema.to_schema()
    schemas = document["components"]["schemas"]

    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if status in ("200", "204") or path == "/readyz":
                    continue
                schema = response["content"]["application/json"]["schema"]
                if "$ref" in schema:
                    schema = schemas[schema["$ref"].rsplit("/", 1)[1]]
                    assert set(schema["properties"]) == {"error"}, (path, method, status)
                else:
                    expected = ANTHROPIC_ERROR_SCHEMA if path == "/v1/messages" else ERROR_SCHEMA
                    assert schema == expected, (path, method, status)


def test_the_budget_grant_is_documented_with_every_grantable_budget_and_its_errors():
    document = create_app(Settings(upstream="http://127.0.0.1:9/v1")).openapi_schema.to_schema()
    operation = document["paths"]["/v1/loopwarden/sessions/{session_id}"]["patch"]

    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]) == {budget.name for budget in BUDGETS}
    assert {"400", "404", "409", "503"} <= set(operation["responses"])


def test_the_document_carries_the_packages_version():
    from proxy.edge.openapi import openapi_config
    from proxy.version import VERSION

    assert openapi_config().version == VERSION
