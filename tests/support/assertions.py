"""Assertions shared by tests."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx

from tests.support.waiting import wait_for


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


def recorded_lines(path: Path, count: int) -> list[dict[str, Any]]:
    """The records of a JSONL recording once it holds ``count`` (a record is written just after
    its reply is sent, so a test that has its answer may still be ahead of the file)."""
    held = wait_for(lambda: path.exists() and len(path.read_text().splitlines()) >= count)
    assert held, f"{path} holds fewer than {count} records"
    return [json.loads(line) for line in path.read_text().splitlines()]


_NOTICE = re.compile(r"LoopWarden stopped this run \([a-z_]+\): [^\n]*\n\n")


def summary_of(text: str) -> str:
    """An ending's words without the notice the default policy puts first (asserted there)."""
    notice = _NOTICE.match(text)
    assert notice is not None, f"no LoopWarden notice first in {text!r}"
    return text[notice.end() :]
