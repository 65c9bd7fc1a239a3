"""The proxy on real Redis: shared state, and defined behavior when Redis fails."""

from __future__ import annotations

import logging

import httpx
import openai

from proxy.observe.logs import JsonFormatter
from tests.support.assertions import summary_of
from tests.support.fake_upstream import Json, chat_completion
from tests.support.timed import Stopwatch
from tests.support.waiting import wait_for

MESSAGES = [{"role": "user", "content": "Summarize the report."}]


def empty():
    return Json(chat_completion(None))


def post(proxy, session="s", timeout=10.0):
    return httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"Authorization": "Bearer sk-p", "X-Session-Id": session},
        timeout=timeout,
    )


def test_two_proxies_over_one_redis_share_a_session(make_proxy, upstream, private_redis):
    first = make_proxy(redis_url=private_redis.url)
    second = make_proxy(redis_url=private_redis.url)
    upstream.script(
        empty(), empty(), Json(chat_completion("ok")), empty(), empty(), empty(), Json(chat_completion("End."))
    )

    post(first, "shared")  # two strikes then recovers: strikes cleared
    ended = post(second, "shared")  # three strikes on the other replica: ends
    replay = post(first, "shared")  # the first replica knows it ended

    assert ended.headers["x-loopwarden-terminated"] == "empty_response"
    assert replay.headers["x-loopwarden-terminated"] == "empty_response"
    assert summary_of(replay.json()["choices"][0]["message"]["content"]) == "End."


def test_step_counter_lives_in_redis(make_proxy, upstream, private_redis, write_policies):
    policies = str(write_policies(default="max_steps: 3\n"))
    replicas = [make_proxy(redis_url=private_redis.url, policies_dir=policies) for _ in range(2)]

    steps = [post(replicas[i % 2], "steps").headers["x-loopwarden-step"] for i in range(3)]
    upstream.script(Json(chat_completion("Out of steps.")))
    ending = post(replicas[1], "steps")

    assert steps == ["1", "2", "3"]
    assert ending.headers["x-loopwarden-terminated"] == "budget_steps"


def test_back_to_back_requests_across_replicas_each_see_the_last_commit(make_proxy, upstream, private_redis):
    replicas = [make_proxy(redis_url=private_redis.url) for _ in range(2)]

    steps = [post(replicas[i % 2], "relay").headers["x-loopwarden-step"] for i in range(40)]

    assert steps == [str(step) for step in range(1, 41)]


def test_frozen_redis_fail_open_serves_marked_and_counted(make_proxy, upstream, private_redis):
    proxy = make_proxy(redis_url=private_redis.url, redis_timeout=0.3)
    private_redis.freeze()

    with Stopwatch() as watch:
        response = post(proxy)

    assert response.status_code == 200
    assert response.headers["x-loopwarden-degraded"] == "state-store"
    assert watch.elapsed < 0.3 + watch.scaled(1.0)  # one timeout per request (no commit after a failed load)
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    assert 'loopwarden_state_errors_total{fail_mode="open",operation="load"} 1.0' in metrics


def test_frozen_redis_fail_open_still_guards_with_what_the_request_shows(make_proxy, upstream, private_redis):
    proxy = make_proxy(redis_url=private_redis.url, redis_timeout=0.3)
    private_redis.freeze()
    upstream.script(empty(), Json(chat_completion("Nudged even without state.")))

    response = post(proxy)

    assert response.json()["choices"][0]["message"]["content"] == "Nudged even without state."
    assert response.headers["x-loopwarden-interventions"] == "empty_nudge"


def test_frozen_redis_fail_closed_is_503(make_proxy, upstream, private_redis, write_policies):
    policies = str(write_policies(default="state_fail_mode: closed\n"))
    proxy = make_proxy(redis_url=private_redis.url, redis_timeout=0.3, policies_dir=policies)
    private_redis.freeze()

    response = post(proxy)

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "service_unavailable"
    assert upstream.requests == []


def test_readiness_reports_a_frozen_store(make_proxy, private_redis):
    proxy = make_proxy(redis_url=private_redis.url, redis_timeout=0.3)
    private_redis.freeze()

    response = httpx.get(f"{proxy.url}/readyz", timeout=5)

    assert response.status_code == 503


def test_proxy_reconnects_after_redis_restarts(make_proxy, upstream, private_redis):
    proxy = make_proxy(redis_url=private_redis.url, redis_timeout=0.5)
    assert post(proxy, "before").status_code == 200

    private_redis.restart()
    responses = [post(proxy, "after") for _ in range(3)]

    assert all(r.status_code == 200 for r in responses)
    assert [r.headers.get("x-loopwarden-degraded") for r in responses] == [None, None, None]
    assert [r.headers["x-loopwarden-step"] for r in responses] == ["1", "2", "3"]


def test_openai_sdk_runs_against_the_redis_backed_proxy(make_proxy, upstream, redis_url):
    proxy = make_proxy(redis_url=redis_url)
    upstream.script(empty(), Json(chat_completion("Shared state works.")))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    completion = client.chat.completions.create(model="m", messages=MESSAGES)

    assert completion.choices[0].message.content == "Shared state works."


def test_in_memory_sessions_over_the_tenant_cap_drop_the_least_recently_used(make_proxy, upstream):
    proxy = make_proxy(memory_sessions_per_tenant=2)
    for session in ("first", "second", "third"):
        assert post(proxy, session).status_code == 200

    def known(session: str) -> bool:
        view = httpx.get(f"{proxy.base_url}/loopwarden/sessions/{session}", headers={"Authorization": "Bearer sk-p"})
        return view.status_code == 200

    assert [known(s) for s in ("first", "second", "third")] == [False, True, True]
    assert 'loopwarden_sessions_evicted_total{tenant="default"} 1.0' in httpx.get(f"{proxy.metrics_url}/metrics").text


def _unreachable_redis() -> tuple[int, str]:
    from tests.support.processes import free_port

    port = free_port()
    return port, f"redis://:hunter2-secret@127.0.0.1:{port}/0"


def test_an_unreachable_redis_at_start_is_one_warning_naming_host_and_port_never_the_password(make_proxy, log_records):
    port, url = _unreachable_redis()
    make_proxy(redis_url=url, redis_timeout=0.3)

    assert wait_for(lambda: [r for r in log_records if r.getMessage() == "state_store_unavailable"])
    (warning,) = [r for r in log_records if r.getMessage() == "state_store_unavailable"]
    assert warning.levelno == logging.WARNING
    assert warning.fields["error"].startswith(f"ping failed at Redis at 127.0.0.1:{port}/0: ConnectionError")
    assert warning.fields["fail_closed_policies"] == ["strict"]
    assert not [r for r in log_records if "hunter2" in JsonFormatter().format(r)]


def test_readiness_says_the_store_does_not_answer_and_which_policies_refuse_meanwhile(make_proxy):
    _, url = _unreachable_redis()
    proxy = make_proxy(redis_url=url, redis_timeout=0.3)

    response = httpx.get(f"{proxy.url}/readyz", timeout=5)

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "state store unavailable"
    assert body["reason"].startswith("the session state store does not answer (ConnectionError)")
    assert "policies that fail closed (strict) get 503" in body["reason"]
    assert "127.0.0.1" not in body["reason"]  # the address is in the log, not on the API port


def test_a_request_during_a_redis_outage_logs_the_error_naming_the_stores_address(make_proxy, upstream, log_records):
    port, url = _unreachable_redis()
    proxy = make_proxy(redis_url=url, redis_timeout=0.3)

    assert post(proxy).status_code == 200

    (error,) = [r.fields for r in log_records if r.getMessage() == "state_store_error"]
    assert error["operation"] == "load"
    assert f"at Redis at 127.0.0.1:{port}/0: ConnectionError" in error["error"]
    assert "hunter2" not in error["error"]
