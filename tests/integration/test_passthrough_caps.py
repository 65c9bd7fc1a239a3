"""The /v1 pass-through within the tenant's terms, on both stores: a spent day refuses calls that
spend, the usage pass-through replies report is booked into the day, and a tenant's allow-list
names the families it may use at all."""

from __future__ import annotations

import uuid

import httpx
import pytest

from proxy.edge.tenants import hash_key
from tests.support.assertions import assert_openai_error
from tests.support.fake_upstream import Json, Sse, chat_completion

MESSAGES = [{"role": "user", "content": "Summarize the quarterly report."}]
KEY = "lw-capped"
LISTED_KEY = "lw-listed"
ANTHROPIC = {"anthropic-version": "2023-06-01"}

SPENDING = [
    ("/completions", {"model": "gpt-3.5-turbo-instruct", "prompt": "x" * 32_000}),
    ("/embeddings", {"model": "text-embedding-3-small", "input": "x" * 32_000}),
    ("/images/generations", {"model": "gpt-image-1", "prompt": "a cat"}),
    ("/batches", {"input_file_id": "file-1", "endpoint": "/v1/chat/completions", "completion_window": "24h"}),
    ("/responses/compact", {"model": "gpt-5", "input": "x" * 32_000}),
]


def tenants_file(tmp_path, suffix: str) -> str:
    """Tenant ``capped-…`` (a fresh name: Redis outlives the test) has 1000 tokens a day; tenant
    ``listed-…`` may use the models and embeddings families only."""
    path = tmp_path / "tenants.yaml"
    path.write_text(
        f"""
tenants:
  - name: capped-{suffix}
    key_sha256: ["{hash_key(KEY)}"]
    upstream: {{api_key_env: PROVIDER_KEY}}
    daily_tokens: 1000
  - name: listed-{suffix}
    key_sha256: ["{hash_key(LISTED_KEY)}"]
    upstream: {{api_key_env: PROVIDER_KEY}}
    passthrough: [models, embeddings]
"""
    )
    return str(path)


@pytest.fixture(params=["memory", "redis"])
def capped(request, make_proxy, tmp_path, monkeypatch, redis_url):
    monkeypatch.setenv("PROVIDER_KEY", "sk-provider")
    store = {"redis_url": redis_url} if request.param == "redis" else {}
    return make_proxy(tenants_file=tenants_file(tmp_path, uuid.uuid4().hex[:8]), **store)


def guarded(proxy, key: str = KEY) -> httpx.Response:
    return httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES, "max_tokens": 100},
        headers={"Authorization": f"Bearer {key}", "X-Session-Id": uuid.uuid4().hex},
    )


def passed(proxy, path: str, body: dict | None = None, key: str = KEY, **headers: str) -> httpx.Response:
    method = "GET" if body is None else "POST"
    return httpx.request(
        method, f"{proxy.base_url}{path}", json=body, headers={"Authorization": f"Bearer {key}", **headers}
    )


def spend_the_day(proxy, upstream) -> None:
    spent = chat_completion("Part of the answer.")
    spent["usage"] = {"prompt_tokens": 500, "completion_tokens": 500, "total_tokens": 1000}
    upstream.script(Json(spent))
    assert guarded(proxy).status_code == 200
    upstream.requests.clear()


@pytest.mark.parametrize(("path", "body"), SPENDING, ids=[path for path, _ in SPENDING])
def test_a_spent_day_refuses_every_pass_through_call_that_spends(capped, upstream, path, body):
    spend_the_day(capped, upstream)

    refused = passed(capped, path, body)

    assert_openai_error(refused, 429, "tenant_budget_exceeded")
    assert 0 < int(refused.headers["retry-after"]) <= 86_400
    assert upstream.requests == []


def test_a_spent_day_refuses_an_anthropic_batch_in_anthropics_shape(capped, upstream):
    spend_the_day(capped, upstream)

    refused = passed(capped, "/messages/batches", {"requests": []}, **ANTHROPIC)

    assert refused.status_code == 429
    assert refused.json()["type"] == "error"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("path", "body"), [("/models", None), ("/messages/count_tokens", {"model": "m", "messages": MESSAGES})]
)
def test_a_spent_day_still_serves_pass_through_calls_that_spend_nothing(capped, upstream, path, body):
    spend_the_day(capped, upstream)

    assert passed(capped, path, body, **ANTHROPIC).status_code == 200
    assert len(upstream.requests) == 1


@pytest.mark.parametrize(
    ("path", "reply"),
    [
        ("/completions", {"object": "text_completion", "usage": {"prompt_tokens": 600, "completion_tokens": 400}}),
        ("/embeddings", {"object": "list", "data": [], "usage": {"prompt_tokens": 1000, "total_tokens": 1000}}),
        ("/responses/compact", {"object": "response.compaction", "usage": {"input_tokens": 900, "output_tokens": 100}}),
        ("/batches", {"object": "batch", "usage": {"input_tokens": 500, "output_tokens": 500}}),
    ],
    ids=["completions", "embeddings", "compact", "batches"],
)
def test_the_usage_a_pass_through_reply_reports_is_booked_into_the_tenants_day(capped, upstream, path, reply):
    upstream.script(Json(reply))
    assert passed(capped, path, {"model": "m", "input": "x"}).status_code == 200

    refused = guarded(capped)

    assert_openai_error(refused, 429, "tenant_budget_exceeded")
    assert len(upstream.requests) == 1


def test_a_streamed_completion_books_the_usage_of_its_last_chunk(capped, upstream):
    chunks = [
        {"object": "text_completion", "choices": [{"text": "a", "index": 0}], "usage": None},
        {"object": "text_completion", "choices": [], "usage": {"prompt_tokens": 600, "completion_tokens": 400}},
    ]
    upstream.script(Sse(chunks))
    streamed = passed(capped, "/completions", {"model": "m", "prompt": "x", "stream": True})
    assert streamed.status_code == 200
    assert b"[DONE]" in streamed.content

    assert_openai_error(passed(capped, "/embeddings", {"model": "m", "input": "x"}), 429, "tenant_budget_exceeded")


def test_a_reply_without_usage_books_nothing_and_gives_its_reservation_back(capped, upstream):
    for _ in range(3):
        upstream.script(Json({"id": "batch_1", "object": "batch", "status": "validating"}))
        assert passed(capped, "/batches", {"input_file_id": "file-1"}).status_code == 200

    upstream.script(Json(chat_completion("ok")))
    assert guarded(capped).status_code == 200


def test_a_family_outside_the_tenants_allow_list_is_refused_before_anything_is_sent(capped, upstream):
    refused = passed(capped, "/files", None, key=LISTED_KEY)

    error = assert_openai_error(refused, 403, "permission_denied")
    assert "'files'" in error["message"]
    assert "embeddings, models" in error["message"]
    assert upstream.requests == []


def test_a_family_outside_the_allow_list_is_refused_to_an_anthropic_client_in_anthropics_shape(capped, upstream):
    refused = passed(capped, "/messages/batches", {"requests": []}, key=LISTED_KEY, **ANTHROPIC)

    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "permission_error"
    assert upstream.requests == []


def test_the_families_on_the_allow_list_are_forwarded(capped, upstream):
    upstream.script(Json({"object": "list", "data": []}), Json({"object": "list", "data": []}))

    assert passed(capped, "/models", None, key=LISTED_KEY).status_code == 200
    assert passed(capped, "/embeddings", {"model": "m", "input": "x"}, key=LISTED_KEY).status_code == 200
    assert [r.path for r in upstream.requests] == ["/v1/models", "/v1/embeddings"]


def test_a_frozen_store_fails_a_spending_call_open_by_the_tenants_default_policy(
    make_proxy, upstream, tmp_path, monkeypatch, private_redis
):
    monkeypatch.setenv("PROVIDER_KEY", "sk-provider")
    proxy = make_proxy(tenants_file=tenants_file(tmp_path, "open"), redis_url=private_redis.url, redis_timeout=0.3)
    private_redis.freeze()

    assert passed(proxy, "/embeddings", {"model": "m", "input": "x"}).status_code == 200
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    assert 'loopwarden_state_errors_total{fail_mode="open",operation="admit_tenant"} 1.0' in metrics


def test_a_frozen_store_refuses_a_spending_call_when_the_tenants_default_policy_fails_closed(
    make_proxy, upstream, tmp_path, monkeypatch, private_redis, write_policies
):
    monkeypatch.setenv("PROVIDER_KEY", "sk-provider")
    policies = str(write_policies(default="state_fail_mode: closed\n"))
    proxy = make_proxy(
        tenants_file=tenants_file(tmp_path, "closed"),
        redis_url=private_redis.url,
        redis_timeout=0.3,
        policies_dir=policies,
    )
    private_redis.freeze()

    assert_openai_error(passed(proxy, "/embeddings", {"model": "m", "input": "x"}), 503, "service_unavailable")
    assert upstream.requests == []
