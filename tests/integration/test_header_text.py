"""Header values that are not ASCII (a session id, an agent id, a title) are served like any other.

Clients send such values as UTF-8 bytes; they are read as UTF-8, hashed into the ids the
proxy echoes (an echoed header must be ASCII), and forwarded upstream byte for byte.
Sent over a raw connection: httpx refuses to send non-ASCII header values.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.raw_http import raw_request

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
HEADERS = {"Authorization": "Bearer sk-provider", "Content-Type": "application/json"}
HEADER_SAFE = re.compile(r"[A-Za-z0-9._:@-]+")


def chat(proxy, **headers: bytes):
    return raw_request(proxy.port, "POST", "/v1/chat/completions", {**HEADERS, **headers}, BODY)


@pytest.mark.parametrize(
    "session_id",
    ["séance-42".encode(), "会话".encode(), "🤖 run 7".encode(), b"caf\xe9"],
    ids=["accented", "cjk", "emoji", "latin-1-bytes"],
)
def test_a_non_ascii_session_id_is_one_stable_session(proxy, upstream, session_id):
    first = chat(proxy, **{"X-Session-Id": session_id})
    second = chat(proxy, **{"X-Session-Id": session_id})

    assert (first.status, second.status) == (200, 200)
    echoed = first.headers["x-loopwarden-session"]
    assert HEADER_SAFE.fullmatch(echoed)
    assert second.headers["x-loopwarden-session"] == echoed
    assert second.headers["x-loopwarden-step"] == "2"


def test_different_non_ascii_session_ids_are_different_sessions(proxy, upstream):
    one = chat(proxy, **{"X-Session-Id": "séance".encode()})
    other = chat(proxy, **{"X-Session-Id": b"seance"})

    assert one.headers["x-loopwarden-session"] != other.headers["x-loopwarden-session"]


def test_a_non_ascii_agent_id_gets_its_own_sub_session(proxy, upstream):
    parent = chat(proxy, **{"X-Session-Id": b"run-1"})
    helper = chat(proxy, **{"X-Session-Id": b"run-1", "X-Agent-Id": "rédacteur".encode()})

    assert (parent.status, helper.status) == (200, 200)
    echoed = helper.headers["x-loopwarden-session"]
    assert echoed.startswith("run-1@")
    assert HEADER_SAFE.fullmatch(echoed)
    assert helper.headers["x-loopwarden-step"] == "1"


def test_the_echoed_id_opens_the_session_in_the_sessions_api(proxy, upstream):
    echoed = chat(proxy, **{"X-Session-Id": "séance".encode()}).headers["x-loopwarden-session"]

    response = raw_request(proxy.port, "GET", f"/v1/loopwarden/sessions/{echoed}", HEADERS)

    assert response.status == 200
    assert response.json()["steps"] == 1


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
def test_non_ascii_header_values_reach_the_upstream_as_sent(proxy, upstream, path):
    title = "Café ☕ agent".encode()

    response = raw_request(
        proxy.port, "POST", path, {**HEADERS, "X-Title": title, "X-Session-Id": "séance".encode()}, BODY
    )

    assert response.status == 200
    seen = upstream.requests[0]
    assert seen.header("x-title") == title.decode("latin-1")  # the recorder reads raw bytes as latin-1
    assert seen.header("x-session-id") == "séance".encode().decode("latin-1")
