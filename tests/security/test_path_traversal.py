"""The /v1 pass-through reaches only paths below the tenant's base URL, whatever the path says.

Sent over real HTTP with the path as written (clients normalize ``..`` away before sending).
The upstream's base URL has a path of its own, as Azure OpenAI's do, so a path that climbs
out of it would reach another deployment or another API of the host with the tenant's key.
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.assertions import assert_openai_error
from tests.support.raw_http import RawResponse, raw_request

AUTH = {"Authorization": "Bearer sk-provider"}
BASE_PATH = "/openai/deployments/x"

ESCAPES = [
    "/v1/../_control/state",
    "/v1//../../x",
    "/v1/models/../../x",
    "/v1/models/..",
    "/v1/./models",
    "/v1//models",
    "/v1/models/",
    "/v1/%2e%2e/_control/state",
    "/v1/%2E%2E/_control/state",
    "/v1/.%2e/x",
    "/v1/models%2f..%2f..%2fx",
    "/v1/models%2F%2E%2E%2F%2E%2E%2Fx",
    "/v1/%2fx",
    "/v1%2f..%2fx",
    "/v1/models\\..\\..\\x",
    "/v1/models%5c..%5c..%5cx",
    "/v1/x/../chat/completions",
    "/v1/..;/_control/state",
    "/v1/%252e%252e/_control/state",
    "/v1/chat/completions/../../x",
    # forms some servers read as '..': overlong UTF-8, IIS's %u, full-width dots (NFKC), a NUL
    # that ends the segment for C code, whitespace trimmed away
    "/v1/%c0%ae%c0%ae/_control/state",
    "/v1/%e0%80%ae%e0%80%ae/_control/state",
    "/v1/%u002e%u002e/_control/state",
    "/v1/%ef%bc%8e%ef%bc%8e/_control/state",
    "/v1/..%00/_control/state",
    "/v1/models/..%00.json/x",
    "/v1/..%20/_control/state",
    "/v1/%09../_control/state",
    "/v1/models/%20",
]


@pytest.fixture
def deployment_proxy(make_proxy, upstream):
    return make_proxy(upstream=f"http://127.0.0.1:{upstream.port}{BASE_PATH}")


def as_httpx(response: RawResponse) -> httpx.Response:
    return httpx.Response(response.status, headers=list(response.headers.items()), content=response.body)


@pytest.mark.parametrize("path", ESCAPES)
def test_a_path_that_could_leave_the_base_is_refused_before_anything_is_sent(deployment_proxy, upstream, path):
    response = raw_request(deployment_proxy.port, "GET", path, AUTH)

    error = assert_openai_error(as_httpx(response), 400)
    assert error["type"] == "invalid_request_error"
    assert upstream.requests == []


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_writes_are_refused_like_reads(deployment_proxy, upstream, method):
    response = raw_request(deployment_proxy.port, method, "/v1/files/../../x/files", AUTH, b"{}")

    assert_openai_error(as_httpx(response), 400)
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("path", "forwarded"),
    [
        ("/v1/models", f"{BASE_PATH}/models"),
        ("/v1/files/file-1/content", f"{BASE_PATH}/files/file-1/content"),
        ("/v1/files/a%20b", f"{BASE_PATH}/files/a%20b"),
        ("/v1/files/..a", f"{BASE_PATH}/files/..a"),
        ("/v1/files/a.b", f"{BASE_PATH}/files/a.b"),
        ("/v1", BASE_PATH),
    ],
)
def test_a_plain_path_is_forwarded_below_the_base(deployment_proxy, upstream, path, forwarded):
    response = raw_request(deployment_proxy.port, "GET", path, AUTH)

    assert response.status == 200
    assert [r.path for r in upstream.requests] == [forwarded]


def test_the_query_is_kept_and_cannot_change_the_path(deployment_proxy, upstream):
    response = raw_request(deployment_proxy.port, "GET", "/v1/models?x=/../../y&z=%2e%2e", AUTH)

    assert response.status == 200
    seen = upstream.requests[0]
    assert (seen.path, seen.query) == (f"{BASE_PATH}/models", "x=/../../y&z=%2e%2e")


@pytest.mark.parametrize(
    ("path", "query"), [("/v1/chat%2Fcompletions", ""), ("/v1/chat/completions?/../../x", "/../../x")]
)
def test_chat_completions_always_reach_the_fixed_upstream_path(deployment_proxy, upstream, path, query):
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'

    response = raw_request(deployment_proxy.port, "POST", path, {**AUTH, "Content-Type": "application/json"}, body)

    assert response.status == 200  # a query is kept as sent (Azure's api-version), and never moves the path
    assert [(r.path, r.query) for r in upstream.requests] == [(f"{BASE_PATH}/chat/completions", query)]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/loopwarden/sessions/../../models",
        "/v1/loopwarden/sessions/..%2f..%2fmodels",
        "/v1/loopwarden/sessions/%2e%2e",
        "/v1/loopwarden/sessions/..%5c..%5cmodels",
    ],
)
def test_the_sessions_api_cannot_be_walked_out_of(deployment_proxy, upstream, path):
    read = raw_request(deployment_proxy.port, "GET", path, AUTH)
    delete = raw_request(deployment_proxy.port, "DELETE", path, AUTH)

    assert read.status in (400, 404)
    assert delete.status in (400, 404) or delete.json()["deleted"] is False  # an id like any other
    assert upstream.requests == []


ALIASES = [
    "/v1/chat/completions;x",
    "/v1/responses;x",
    "/v1/messages;beta=true",
    "/v1/chat/completions%00",
    "/v1/Messages",
    "/v1/Chat/Completions",
    "/v1/chat/completions.json",
    "/v1/responses.json",
    "/v1/chat/completions%3Bx",
    "/v1/openai/deployments/gpt/chat/completions",
]


@pytest.mark.parametrize("path", ALIASES)
def test_another_spelling_of_a_guarded_route_is_refused_naming_the_path(deployment_proxy, upstream, path):
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8000}'

    response = raw_request(deployment_proxy.port, "POST", path, {**AUTH, "Content-Type": "application/json"}, body)

    error = assert_openai_error(as_httpx(response), 400)
    assert path in error["message"]
    assert upstream.requests == []
