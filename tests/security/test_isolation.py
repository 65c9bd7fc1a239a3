"""Tenants never see each other: sessions, the inspect and reset APIs, keys in logs and metrics."""

from __future__ import annotations

import secrets

import httpx
import pytest

from proxy.observe.logs import JsonFormatter
from tests.support.assertions import assert_openai_error
from tests.support.fake_upstream import Json, chat_completion
from tests.support.raw_http import raw_request

KEYS = {"alpha": "lw-alpha-" + "1" * 24, "beta": "lw-beta-" + "2" * 24}
MESSAGES = [{"role": "user", "content": "task"}]


@pytest.fixture
def tenants_proxy(make_proxy, write_tenants):
    return make_proxy(tenants_file=write_tenants(KEYS))


def call(proxy, tenant: str, session: str) -> httpx.Response:
    return httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"Authorization": f"Bearer {KEYS[tenant]}", "X-Session-Id": session},
    )


def test_same_session_id_in_two_tenants_is_two_sessions(tenants_proxy, upstream):
    for _ in range(3):
        call(tenants_proxy, "alpha", "s1")
    beta = call(tenants_proxy, "beta", "s1")

    assert beta.headers["x-loopwarden-step"] == "1"


def test_a_thousand_guessed_ids_reveal_nothing_across_tenants(tenants_proxy, upstream):
    call(tenants_proxy, "alpha", "s1")
    guesses = ["s1", "S1", "s1 ", "alpha:s1", "lw:{alpha:s1}", "{alpha:s1}", "../s1", "s1@x"]
    guesses += [secrets.token_hex(4) for _ in range(1000 - len(guesses))]
    headers = {"Authorization": f"Bearer {KEYS['beta']}"}

    with httpx.Client(base_url=tenants_proxy.base_url, headers=headers) as client:
        reads = [client.get(f"/loopwarden/sessions/{guess}").status_code for guess in guesses]
        deletes = [client.delete(f"/loopwarden/sessions/{guess}").json().get("deleted") for guess in guesses[:50]]

    assert set(reads) == {404}
    assert not any(deletes)
    alpha_view = httpx.get(
        f"{tenants_proxy.base_url}/loopwarden/sessions/s1", headers={"Authorization": f"Bearer {KEYS['alpha']}"}
    )
    assert alpha_view.json()["steps"] == 1


def test_keys_appear_in_no_log_line_metric_or_error_body(tenants_proxy, upstream, log_records):
    upstream.script(Json({"error": {"message": "bad", "type": "x", "param": None, "code": None}}, status=400))
    bodies = [
        call(tenants_proxy, "alpha", "k").text,
        httpx.post(
            f"{tenants_proxy.base_url}/chat/completions",
            content=b"{",
            headers={"Authorization": f"Bearer {KEYS['beta']}"},
        ).text,
        httpx.get(
            f"{tenants_proxy.base_url}/models", headers={"Authorization": "Bearer " + KEYS["alpha"][:-1] + "x"}
        ).text,
    ]
    metrics = httpx.get(f"{tenants_proxy.metrics_url}/metrics").text
    logged = "\n".join(JsonFormatter().format(record) for record in log_records)

    for secret in (*KEYS.values(), "sk-provider-" + "9" * 20):
        assert secret not in logged
        assert secret not in metrics
        assert all(secret not in body for body in bodies)


def test_bad_keys_get_one_uniform_answer(tenants_proxy):
    answers = {
        httpx.post(f"{tenants_proxy.base_url}/chat/completions", json={}, headers=headers).text
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Bearer " + KEYS["alpha"] + "x"})
    }

    assert len(answers) == 1


def test_a_runaway_loop_stops_within_its_budget_plus_one_call(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default="max_steps: 100\nbudgets: {max_tokens: 2000}\n")))
    runaway = chat_completion("Still working...")
    runaway["usage"] = {"prompt_tokens": 40, "completion_tokens": 100, "total_tokens": 140}  # max_tokens: 100
    upstream.script(*[Json(runaway) for _ in range(100)])

    for _ in range(50):
        reply = httpx.post(
            f"{proxy.base_url}/chat/completions",
            json={"model": "m", "messages": MESSAGES, "max_tokens": 100},
            headers={"Authorization": "Bearer sk-p", "X-Session-Id": "runaway"},
        )
        if "x-loopwarden-terminated" in reply.headers:
            break

    view = httpx.get(f"{proxy.base_url}/loopwarden/sessions/runaway", headers={"Authorization": "Bearer sk-p"}).json()
    assert view["termination"] == "budget_tokens"
    assert view["tokens"]["total"] <= 2000 + 140  # the budget, plus the one (capped) summary call


def _open_call(proxy, key: str, session: str | None = None, messages=MESSAGES) -> httpx.Response:
    headers = ({"Authorization": f"Bearer {key}"} if key else {}) | ({"X-Session-Id": session} if session else {})
    return httpx.post(f"{proxy.base_url}/chat/completions", json={"model": "m", "messages": messages}, headers=headers)


def test_without_tenants_file_two_keys_never_share_a_named_session(proxy, upstream):
    for _ in range(3):
        _open_call(proxy, "sk-first", "s1")
    other = _open_call(proxy, "sk-second", "s1")

    assert other.headers["x-loopwarden-step"] == "1"


def test_without_tenants_file_two_keys_never_share_a_derived_session(proxy, upstream):
    opened = _open_call(proxy, "sk-first").json()["choices"][0]["message"]["content"]
    history = [*MESSAGES, {"role": "assistant", "content": opened}, {"role": "user", "content": "go on"}]
    first = _open_call(proxy, "sk-first", messages=history)
    other = _open_call(proxy, "sk-second", messages=history)

    assert first.headers["x-loopwarden-session"] == other.headers["x-loopwarden-session"]
    assert first.headers["x-loopwarden-step"] == "2"
    assert other.headers["x-loopwarden-step"] == "1"


def test_without_tenants_file_another_key_cannot_read_or_delete_a_session(proxy, upstream):
    _open_call(proxy, "sk-first", "s1")
    url = f"{proxy.base_url}/loopwarden/sessions/s1"
    other = {"Authorization": "Bearer sk-second"}

    assert_openai_error(httpx.get(url, headers=other), 404, "not_found")
    assert_openai_error(httpx.delete(url, headers=other), 404, "not_found")
    assert httpx.get(url, headers={"Authorization": "Bearer sk-first"}).json()["steps"] == 1


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_without_tenants_file_the_sessions_api_refuses_callers_without_a_key(proxy, upstream, method):
    _open_call(proxy, "", "s1")  # a caller without a key: its sessions belong to nobody in particular

    response = httpx.request(method, f"{proxy.base_url}/loopwarden/sessions/s1")

    assert_openai_error(response, 401, "invalid_api_key")


@pytest.mark.parametrize("name", ["api-key", "x-api-key", "x-goog-api-key"])
def test_without_tenants_file_two_keys_in_another_key_header_never_share_a_session(proxy, upstream, name):
    first, second = {name: "sk-first-" + "1" * 16}, {name: "sk-second-" + "2" * 16}

    def call(key: dict[str, str]) -> httpx.Response:  # Azure's SDK sends api-key, Anthropic's x-api-key
        body = {"model": "m", "messages": MESSAGES}
        return httpx.post(f"{proxy.base_url}/chat/completions", json=body, headers={**key, "X-Session-Id": "s1"})

    for _ in range(3):
        call(first)
    other = call(second)

    assert other.headers["x-loopwarden-step"] == "1"
    url = f"{proxy.base_url}/loopwarden/sessions/s1"
    assert [httpx.get(url, headers=key).json()["steps"] for key in (first, second)] == [3, 1]


def test_without_tenants_file_a_caller_with_a_non_ascii_key_reaches_its_sessions(proxy, upstream):
    key = {"Authorization": "Bearer sk-clé-".encode() + b"1" * 16}  # UTF-8 bytes, as a client sends them
    body = b'{"model": "m", "messages": [{"role": "user", "content": "task"}]}'

    raw_request(proxy.port, "POST", "/v1/chat/completions", {**key, "X-Session-Id": "s1"}, body)
    seen = raw_request(proxy.port, "GET", "/v1/loopwarden/sessions/s1", key)

    assert seen.status == 200
    assert seen.json()["steps"] == 1
