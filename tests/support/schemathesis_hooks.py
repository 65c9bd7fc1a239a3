"""schemathesis hooks for the proxy's run (loaded with ``SCHEMATHESIS_HOOKS``): our own check."""

from __future__ import annotations

import json
from typing import Any

import schemathesis


@schemathesis.check
def openai_error_shape(ctx: Any, response: Any, case: Any) -> None:
    """Every error answer of the proxy has the shape of the API it answers: Anthropic's on the
    Messages route, OpenAI's elsewhere (the /readyz probe excepted)."""
    if response.status_code < 400 or case.operation.path == "/readyz":
        return
    try:
        body = json.loads(response.content)
    except ValueError:
        raise AssertionError(f"error body is not JSON: {response.content[:200]!r}") from None
    if case.operation.path == "/v1/messages":
        _anthropic_shaped(body)
        return
    if not isinstance(body, dict) or set(body) != {"error"}:
        raise AssertionError(f"error body is not {{'error': ...}}: {body!r}"[:300])
    error = body["error"]
    if not isinstance(error, dict) or set(error) != {"message", "type", "param", "code"}:
        raise AssertionError(f"error object lacks OpenAI's fields: {error!r}"[:300])
    if not isinstance(error["message"], str) or "Traceback" in error["message"]:
        raise AssertionError("error message is not a clean string")


def _anthropic_shaped(body: Any) -> None:
    if not isinstance(body, dict) or set(body) != {"type", "error"} or body["type"] != "error":
        raise AssertionError(f"error body is not Anthropic's {{'type': 'error', 'error': ...}}: {body!r}"[:300])
    error = body["error"]
    if not isinstance(error, dict) or set(error) != {"type", "message"}:
        raise AssertionError(f"error object lacks Anthropic's fields: {error!r}"[:300])
    if not isinstance(error["message"], str) or "Traceback" in error["message"]:
        raise AssertionError("error message is not a clean string")
