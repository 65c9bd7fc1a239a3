"""The guarded model routes, over real HTTP, for every wire format: a body that is no JSON object,
a wrong method and a policy that does not exist are refused in the format's own error shape; the
client's query string goes upstream with the format's path. A proxy per test, stopped after it,
the collector's settings put back."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import httpx
import pytest


@pytest.fixture(autouse=True)
def _collector_as_it_was() -> Iterator[None]:
    """A started proxy tunes the process's cyclic collector for serving (a higher threshold, its
    startup frozen); the unit suite's other tests (test_transport's memory measurement) expect
    the interpreter's own."""
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


ROUTES = [
    pytest.param("/chat/completions", id="chat"),
    pytest.param("/responses", id="responses"),
    pytest.param("/messages", id="messages"),
]


def error_of(route: str, body: dict[str, Any]) -> dict[str, Any]:
    """The error's fields, wherever the route's format puts them (all three nest them in ``error``)."""
    assert route != "/messages" or body["type"] == "error"
    return body["error"]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"", "The request body is empty; expected a JSON object.", id="empty"),
        pytest.param(b"{not json", "The request body is not valid JSON", id="not-json"),
        pytest.param(b"[1, 2]", "The request body must be a JSON object.", id="not-an-object"),
    ],
)
def test_a_body_that_is_no_json_object_is_a_400_in_the_formats_shape(proxy, upstream, route, body, message):
    reply = httpx.post(proxy.base_url + route, content=body, headers={"content-type": "application/json"})

    assert reply.status_code == 400
    error = error_of(route, reply.json())
    assert (error["type"], error["message"][: len(message)]) == ("invalid_request_error", message)
    assert upstream.requests == []


@pytest.mark.parametrize("route", ROUTES)
def test_a_model_route_takes_only_post(proxy, upstream, route):
    reply = httpx.get(proxy.base_url + route)

    assert (reply.status_code, reply.headers["allow"]) == (405, "POST")
    assert "use POST" in error_of(route, reply.json())["message"]


@pytest.mark.parametrize("route", ROUTES)
def test_a_policy_that_does_not_exist_is_a_403_naming_it(proxy, upstream, route):
    reply = httpx.post(proxy.base_url + route, json={"model": "m"}, headers={"x-loopwarden-policy": "nonesuch"})

    assert reply.status_code == 403
    assert error_of(route, reply.json())["message"] == "Policy 'nonesuch' does not exist."
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("route", "body"),
    [
        pytest.param("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, id="chat"),
        pytest.param("/responses", {"model": "m", "input": "hi"}, id="responses"),
        pytest.param(
            "/messages", {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}, id="messages"
        ),
    ],
)
def test_the_clients_query_string_goes_upstream_with_the_formats_path(proxy, upstream, route, body):
    httpx.post(f"{proxy.base_url}{route}?beta=true", json=body)

    assert (upstream.requests[0].path, upstream.requests[0].query) == ("/v1" + route, "beta=true")
