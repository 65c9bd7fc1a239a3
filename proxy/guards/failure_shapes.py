"""Failures recognised by their shape, whatever words the tool uses.

A tool that answers ``503 Service Unavailable`` or ``{"status": 502, ...}`` has failed though
its output never says "error". :func:`failure_shape` names the shape a tool result has, or
None:

- ``http_status``: an HTTP status line of 400 or more at the start of a line
  (``HTTP/1.1 503 …``, ``HTTP 429``, or ``503 Service Unavailable`` with its standard reason);
- ``json_status``: a JSON object whose top-level ``status``/``status_code``/``statusCode``/
  ``http_status`` is 400 to 599, or whose ``exit_code``/``exitCode``/``returncode`` is not 0;
- ``traceback``: a Python traceback, a Go ``panic:``, a Java ``Exception in thread``;
- ``errno``: an errno name such as ``ECONNREFUSED`` or ``ETIMEDOUT``;
- ``exit_code``: a shell tool's non-zero exit code (``exit code: 2``, ``exited with status 1``).

Matching is by plain regexes (linear, no backtracking blow-up) over the result's first
characters, the same prefix the policy's patterns search.
"""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.guards.memo import per_text

__all__ = ["failure_shape"]

_REASONS = (
    "bad request|unauthorized|payment required|forbidden|not found|method not allowed|not acceptable|"
    "request timeout|conflict|gone|precondition failed|payload too large|unsupported media type|"
    "unprocessable (?:entity|content)|too many requests|internal server error|not implemented|bad gateway|"
    "service unavailable|gateway timeout|insufficient storage|network authentication required"
)
_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("http_status", re.compile(r"^[ \t]*HTTP(?:/\d(?:\.\d)?)?[ \t]+[45]\d\d\b", re.M)),
    ("http_status", re.compile(rf"^[ \t]*[45]\d\d[ \t]+(?:{_REASONS})\b", re.M | re.I)),
    ("traceback", re.compile(r"Traceback \(most recent call last\)|^panic: |^Exception in thread \"", re.M)),
    (
        "errno",
        re.compile(
            r"\bE(?:CONNREFUSED|CONNRESET|CONNABORTED|TIMEDOUT|HOSTUNREACH|NETUNREACH|NETDOWN|ADDRINUSE|"
            r"ADDRNOTAVAIL|PIPE|NOTFOUND|AI_AGAIN|NOENT|ACCES|PERM|NOSPC|MFILE|NOTCONN)\b"
        ),
    ),
    (
        "exit_code",
        re.compile(
            r"\b(?:exit(?:ed)?(?: with)?[ _](?:code|status)|return[ _]?code|non-zero exit(?: status)?)"
            r"[ \t]*[:=]?[ \t]*(?:-[1-9]|[1-9])\d*\b",
            re.I,
        ),
    ),
)
_STATUS_KEYS = ("status", "status_code", "statusCode", "http_status")
_EXIT_KEYS = ("exit_code", "exitCode", "returncode")


def _number(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _json_shape(text: str) -> str | None:
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    for key in _STATUS_KEYS:
        status = _number(value.get(key))
        if status is not None and 400 <= status <= 599:
            return "json_status"
    for key in _EXIT_KEYS:
        code = _number(value.get(key))
        if code:
            return "json_status"
    return None


@per_text
def failure_shape(text: str) -> str | None:
    """The failure shape of a tool result (see the module), or None."""
    shape = _json_shape(text)
    if shape is not None:
        return shape
    for name, pattern in _SHAPES:
        if pattern.search(text):
            return name
    return None
