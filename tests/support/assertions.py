"""Assertions shared by tests."""

from __future__ import annotations

import httpx


def assert_openai_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    """The response is an OpenAI-shaped error with ``status`` (and ``code``); returns the error object."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str)
    assert error["message"]
    assert "Traceback" not in error["message"]
    if code is not None:
        assert error["code"] == code
    return error
