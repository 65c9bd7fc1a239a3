"""Transient upstream faults are retried inside the proxy, bounded, and never after bytes were sent."""

from __future__ import annotations

import re
import time

import httpx
import openai
import pytest

from tests.support.fake_upstream import CloseAfterRequest, Json, Sse, chat_completion, stream_chunks
from tests.support.processes import free_port
from tests.support.timed import Stopwatch
from tests.support.waiting import wait_for

AUTH = {"Authorization": "Bearer sk-provider"}
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
OVERLOADED = {"error": {"message": "overloaded", "type": "server_error", "param": None, "code": None}}


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_transient_status_is_retried_until_success(proxy, upstream, status):
    upstream.script(Json(OVERLOADED, status=status), Json(OVERLOADED, status=status), Json(chat_completion("ok")))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-provider", max_retries=0)

    completion = client.chat.completions.with_raw_response.create(model="m", messages=BODY["messages"])

    assert completion.parse().choices[0].message.content == "ok"
    assert completion.headers["x-loopwarden-upstream-attempts"] == "3"
    assert len(upstream.requests) == 3


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_client_errors_are_not_retried(proxy, upstream, status):
    upstream.script(Json(OVERLOADED, status=status))

    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)

    assert response.status_code == status
    assert len(upstream.requests) == 1


def test_exhausted_retries_of_a_5xx_return_its_status_and_ask_the_client_not_to_retry(make_proxy, upstream):
    proxy = make_proxy(retry_attempts=3, retry_base_delay=0.01)  # 6 attempts shared with the client's retries
    upstream.script(*[Json(OVERLOADED, status=503) for _ in range(6)])

    httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)
    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)  # the client's retry

    assert response.status_code == 503
    assert response.headers["x-should-retry"] == "false"
    assert response.json() == OVERLOADED
    assert len(upstream.requests) == 6


def test_a_5xx_while_the_shared_budget_lasts_leaves_the_client_its_retry(make_proxy, upstream):
    proxy = make_proxy(retry_attempts=3, retry_base_delay=0.01)  # 6 attempts shared with the client's retries
    upstream.script(*[Json(OVERLOADED, status=503) for _ in range(3)])

    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)

    assert response.status_code == 503
    assert "x-should-retry" not in response.headers
    assert len(upstream.requests) == 3


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_three_500s_then_a_good_reply_reach_the_openai_sdk_as_a_success(make_proxy, upstream, stream):
    # Alone, the SDK's 3 attempts use up the three 500s and it fails; through the proxy its first
    # retry gets the attempts left in the budget it shares with the proxy's own.
    proxy = make_proxy(retry_attempts=3, retry_base_delay=0.01)
    failing = {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}}
    upstream.script(*[Json(failing, status=500) for _ in range(3)], Json(chat_completion("fine")))
    sent: list[httpx.Request] = []
    client = openai.OpenAI(
        base_url=proxy.base_url, api_key="sk-provider", http_client=httpx.Client(event_hooks={"request": [sent.append]})
    )

    answer = client.chat.completions.create(model="m", messages=BODY["messages"], stream=stream)

    text = (
        "".join(c.choices[0].delta.content or "" for c in answer if c.choices)
        if stream
        else answer.choices[0].message.content
    )
    assert text == "fine"
    assert len(upstream.requests) == 4
    assert len(sent) == 2


def test_a_spent_shared_budget_stops_the_openai_sdk_and_is_logged(make_proxy, upstream, log_records):
    proxy = make_proxy(retry_attempts=3, retry_base_delay=0.01)
    failing = {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}}
    upstream.script(*[Json(failing, status=500) for _ in range(9)])
    sent: list[httpx.Request] = []
    client = openai.OpenAI(
        base_url=proxy.base_url, api_key="sk-provider", http_client=httpx.Client(event_hooks={"request": [sent.append]})
    )

    with pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(model="m", messages=BODY["messages"])

    assert len(upstream.requests) == 6  # not 3 x 3
    assert len(sent) == 2
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert [r.fields["shared"] for r in log_records if r.getMessage() == "upstream_retries_exhausted"] == [6]
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    assert re.search(r'^loopwarden_upstream_attempts_total\{outcome="exhausted"\} 1\.0$', metrics, re.M)


def test_exhausted_named_waits_return_the_status_and_its_retry_after_for_the_client(make_proxy, upstream):
    proxy = make_proxy(retry_after_attempts=3)
    upstream.script(*[Json(OVERLOADED, status=503, headers={"Retry-After": "0"}) for _ in range(3)])

    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)

    assert response.status_code == 503
    assert response.headers["retry-after"] == "0"
    assert "x-should-retry" not in response.headers
    assert len(upstream.requests) == 3


RATE_LIMITED = {"error": {"message": "rate limited", "type": "rate_limit_error", "param": None, "code": None}}


def _rate_limited(times: int) -> list[Json]:
    return [Json(RATE_LIMITED, status=429, headers={"Retry-After": "1"}) for _ in range(times)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_storm_of_five_429s_with_retry_after_reaches_the_openai_sdk_as_one_slow_success(proxy, upstream, stream):
    upstream.script(
        *_rate_limited(5), Sse(stream_chunks("weathered")) if stream else Json(chat_completion("weathered"))
    )
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-provider", max_retries=0)

    started = time.monotonic()
    raw = client.chat.completions.with_raw_response.create(model="m", messages=BODY["messages"], stream=stream)
    parsed = raw.parse()
    text = "".join(c.choices[0].delta.content or "" for c in parsed) if stream else parsed.choices[0].message.content

    assert text == "weathered"
    assert time.monotonic() - started >= 5.0
    assert len(upstream.requests) == 6


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_when_the_proxy_gives_up_on_a_429_storm_the_openai_sdks_own_backoff_takes_over(make_proxy, upstream, stream):
    proxy = make_proxy(retry_after_cap=1.5)
    upstream.script(*_rate_limited(3), Sse(stream_chunks("patience")) if stream else Json(chat_completion("patience")))
    sent: list[httpx.Request] = []
    client = openai.OpenAI(  # the SDK's default: 2 retries of its own
        base_url=proxy.base_url, api_key="sk-provider", http_client=httpx.Client(event_hooks={"request": [sent.append]})
    )

    completion = client.chat.completions.create(model="m", messages=BODY["messages"], stream=stream)
    text = (
        "".join(c.choices[0].delta.content or "" for c in completion)
        if stream
        else completion.choices[0].message.content
    )

    assert text == "patience"
    assert len(sent) == 2  # the proxy waited once, gave up, the SDK waited its Retry-After and asked again
    assert len(upstream.requests) == 4


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_client_leaving_during_a_named_wait_ends_the_wait(proxy, upstream, stream):
    upstream.script(Json(RATE_LIMITED, status=429, headers={"Retry-After": "5"}), Json(chat_completion()))

    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{proxy.base_url}/chat/completions", json={**BODY, "stream": stream}, headers=AUTH, timeout=0.5)
    wait_for(lambda: not proxy.readiness.in_flight)

    assert proxy.readiness.in_flight == 0
    time.sleep(0.2)
    assert len(upstream.requests) == 1  # the wait ended with the client: its retry was never sent


def test_retry_after_is_waited_out(proxy, upstream):
    upstream.script(Json(OVERLOADED, status=429, headers={"retry-after-ms": "400"}), Json(chat_completion()))

    started = time.monotonic()
    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)

    assert response.status_code == 200
    assert time.monotonic() - started >= 0.4
    assert len(upstream.requests) == 2


def test_retry_after_beyond_the_cap_goes_straight_to_the_client(make_proxy, upstream):
    proxy = make_proxy(retry_after_cap=1.0)
    upstream.script(Json(OVERLOADED, status=429, headers={"Retry-After": "30"}))

    with Stopwatch() as watch:
        response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)

    assert response.status_code == 429
    assert response.headers["retry-after"] == "30"
    assert "x-should-retry" not in response.headers
    assert watch.elapsed < watch.scaled(1.0)
    assert len(upstream.requests) == 1


def test_post_is_not_resent_when_upstream_dropped_it_after_receiving(proxy, upstream):
    upstream.script(CloseAfterRequest(), Json(chat_completion()))

    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)

    assert response.status_code == 502
    assert len(upstream.requests) == 1


def test_post_is_resent_after_a_drop_when_configured(make_proxy, upstream):
    proxy = make_proxy(retry_after_send=True)
    upstream.script(CloseAfterRequest(), Json(chat_completion("second time lucky")))

    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)

    assert response.status_code == 200
    assert len(upstream.requests) == 2


def test_stream_cut_after_bytes_is_not_retried_and_ends_with_an_error_event(proxy, upstream):
    upstream.script(Sse(stream_chunks("this answer will be cut", pieces=5), cut_after=2), Json(chat_completion()))

    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", json={**BODY, "stream": True}, headers=AUTH) as r:
        text = r.read().decode()

    assert r.status_code == 200
    assert '"upstream_disconnected"' in text.splitlines()[-2]
    assert "[DONE]" not in text
    assert len(upstream.requests) == 1


def test_stream_is_retried_while_upstream_answers_with_transient_status(proxy, upstream):
    upstream.script(Json(OVERLOADED, status=503), Sse(stream_chunks("after a retry")))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-provider", max_retries=0)

    stream = client.chat.completions.create(model="m", messages=BODY["messages"], stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)

    assert text == "after a retry"
    assert len(upstream.requests) == 2


def _refused_url() -> str:
    """An upstream whose port refuses connections (free, and no process is handed it)."""
    return f"http://127.0.0.1:{free_port()}/v1"


def _upstream_attempts(proxy) -> float:
    """Every attempt the proxy made upstream, from its own metrics (refused ones included)."""
    text = httpx.get(f"{proxy.metrics_url}/metrics").text
    found = re.findall(r'^loopwarden_upstream_attempts_total\{outcome="(\w+)"\} (\S+)$', text, re.M)
    return sum(float(v) for outcome, v in found if outcome != "exhausted")  # exhausted: a request, no attempt


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_after_the_proxy_retried_a_refused_connection_the_openai_sdk_retries_once_within_the_shared_budget(
    make_proxy, stream
):
    proxy = make_proxy(upstream=_refused_url(), retry_attempts=3, retry_base_delay=0.01)
    sent: list[httpx.Request] = []
    client = openai.OpenAI(  # the SDK's default: 2 retries of its own
        base_url=proxy.base_url,
        api_key="sk-provider",
        http_client=httpx.Client(event_hooks={"request": [sent.append]}),
    )

    with pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(model="m", messages=BODY["messages"], stream=stream)

    assert _upstream_attempts(proxy) == 6  # 3 of the first call, 3 of the SDK's one retry: the shared budget
    assert len(sent) == 2
    assert raised.value.status_code == 502
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert raised.value.response.headers["x-loopwarden-upstream-attempts"] == "3"


@pytest.mark.parametrize("path", ["/chat/completions", "/embeddings"])
def test_an_error_after_the_proxy_retried_says_how_many_attempts_and_not_to_retry(make_proxy, path):
    proxy = make_proxy(upstream=_refused_url(), retry_attempts=2, retry_base_delay=0.01)

    httpx.post(f"{proxy.base_url}{path}", json=BODY, headers=AUTH)
    response = httpx.post(f"{proxy.base_url}{path}", json=BODY, headers=AUTH)  # the client's retry

    assert response.status_code == 502
    assert response.headers["x-loopwarden-upstream-attempts"] == "2"
    assert response.headers["x-should-retry"] == "false"


def test_an_error_on_the_only_attempt_leaves_retrying_to_the_client(proxy, upstream):
    upstream.script(CloseAfterRequest())  # may have been received: the proxy does not resend it

    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)

    assert response.status_code == 502
    assert response.headers["x-loopwarden-upstream-attempts"] == "1"
    assert "x-should-retry" not in response.headers


def test_a_client_error_reached_after_retries_is_not_retried_by_the_client_either(proxy, upstream):
    conflict = {"error": {"message": "busy", "type": "invalid_request_error", "param": None, "code": None}}
    upstream.script(Json(OVERLOADED, status=503), Json(conflict, status=409))

    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)

    assert response.status_code == 409  # which the openai SDK would retry on its own
    assert response.headers["x-loopwarden-upstream-attempts"] == "2"
    assert response.headers["x-should-retry"] == "false"
