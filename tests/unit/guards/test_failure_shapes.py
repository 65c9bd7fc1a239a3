"""Failure shapes: a tool result that failed without saying "error" is named by its shape."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.guards.failure_shapes import _SHAPES, failure_shape


@pytest.mark.parametrize(
    ("result", "shape"),
    [
        pytest.param("503 Service Unavailable: backend down (request_id=8f3a)", "http_status", id="a-status-line"),
        pytest.param("HTTP/1.1 404 Not Found\r\ncontent-type: text/html", "http_status", id="an-http-response-head"),
        pytest.param("upstream said:\nHTTP 429", "http_status", id="http-and-a-code-on-a-later-line"),
        pytest.param("429 too many requests", "http_status", id="any-case-of-the-reason"),
        pytest.param('{"status": 502, "detail": "bad gateway"}', "json_status", id="a-json-status-field"),
        pytest.param('{"statusCode": "401"}', "json_status", id="a-json-status-code-as-text"),
        pytest.param('{"exit_code": 2, "stdout": ""}', "json_status", id="a-json-non-zero-exit-code"),
        pytest.param('Traceback (most recent call last):\n  File "x.py"', "traceback", id="a-python-traceback"),
        pytest.param("goroutine 1:\npanic: runtime error", "traceback", id="a-go-panic"),
        pytest.param('Exception in thread "main" java.lang.NullPointerException', "traceback", id="a-java-exception"),
        pytest.param("connect ECONNREFUSED 127.0.0.1:5432", "errno", id="an-errno-name"),
        pytest.param("getaddrinfo ENOTFOUND api.example.com", "errno", id="a-resolver-errno"),
        pytest.param("$ make\nmake: *** [all] Error\nexit code: 2", "exit_code", id="a-shell-exit-code"),
        pytest.param("command exited with status 127", "exit_code", id="an-exit-status"),
    ],
)
def test_a_failure_is_named_by_its_shape(result, shape):
    assert failure_shape(result) == shape


@pytest.mark.parametrize(
    "result",
    [
        pytest.param('{"city": "Paris", "temperature_c": 18}', id="a-json-result"),
        pytest.param('{"status": 200, "items": []}', id="a-json-status-under-400"),
        pytest.param('{"status": "ok"}', id="a-json-status-in-words"),
        pytest.param('{"exit_code": 0, "stdout": "done"}', id="a-zero-exit-code"),
        pytest.param("process exited with code 0", id="a-zero-exit-in-words"),
        pytest.param("500 grams of flour, 2 eggs", id="a-number-that-is-no-status"),
        pytest.param("The 404 page was redesigned in 2019.", id="a-status-mid-sentence"),
        pytest.param("Ordered 3 items; ids: 400, 401, 402", id="numbers-in-the-400s"),
        pytest.param("{not json", id="broken-json"),
    ],
)
def test_a_result_without_a_failure_shape_is_none(result):
    assert failure_shape(result) is None


_PLAIN = {
    "errno": re.compile(
        r"\bE(?:CONNREFUSED|CONNRESET|CONNABORTED|TIMEDOUT|HOSTUNREACH|NETUNREACH|NETDOWN|ADDRINUSE|"
        r"ADDRNOTAVAIL|PIPE|NOTFOUND|AI_AGAIN|NOENT|ACCES|PERM|NOSPC|MFILE|NOTCONN)\b"
    ),
    "exit_code": re.compile(
        r"\b(?:exit(?:ed)?(?: with)?[ _](?:code|status)|return[ _]?code|non-zero exit(?: status)?)"
        r"[ \t]*[:=]?[ \t]*(?:-[1-9]|[1-9])\d*\b",
        re.I,
    ),
}
_PIECES = (
    "ECONNREFUSED", "EPIPE", "ENOENT", "E", "xE", "_", " ", "-", "exit code", "Exited with status", "EXIT_STATUS",
    "return code", "ReturnCode", "returncode", "non-zero exit status", "Non-Zero Exit", ": ", "=", "1", "-2", "0",
    "a", "é", "n", "r", "e", "R", "\n", "\t",
)  # fmt: skip


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=10).map("".join))
def test_the_errno_and_exit_code_patterns_find_what_their_plain_forms_find(text):
    for name, pattern in _SHAPES:
        if name in _PLAIN:
            found, plain = pattern.search(text), _PLAIN[name].search(text)
            assert (found and found.span()) == (plain and plain.span())
