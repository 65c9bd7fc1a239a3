"""The guard pipeline end to end: the real openai SDK, the proxy over HTTP, a scripted model."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.support.assertions import summary_of
from tests.support.fake_upstream import Json, chat_completion, tool_call

SYSTEM = {"role": "system", "content": "You are a research agent."}
MESSAGES = [SYSTEM, {"role": "user", "content": "Find the population of Lyon."}]
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


def empty():
    return Json(chat_completion(None))


def reasoning_only(text="I should search for Lyon..."):
    return Json(chat_completion(None, reasoning=text))


def sdk(proxy, **kwargs):
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-provider", max_retries=0, **kwargs)


def test_good_reply_passes_with_one_upstream_call_and_untouched_bytes(proxy, upstream):
    upstream.script(Json(chat_completion("Direct answer.")))

    response = httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"Authorization": "Bearer sk-p"},
    )

    assert response.json()["choices"][0]["message"]["content"] == "Direct answer."
    assert response.headers["x-loopwarden-interventions"] == "none"
    assert response.headers["x-loopwarden-session"].startswith("d-")
    assert len(upstream.requests) == 1


def test_the_ending_call_forbids_tools_but_keeps_them(proxy, upstream):
    upstream.script(reasoning_only(), reasoning_only(), reasoning_only(), Json(chat_completion("Summary.")))

    sdk(proxy).chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)

    final_request = upstream.requests[-1].json()
    assert final_request["tool_choice"] == "none"
    assert final_request["tools"] == TOOLS
    assert "what is still missing" in final_request["messages"][-1]["content"]


def test_later_calls_of_an_ended_session_without_a_new_instruction_get_the_same_ending_without_upstream(
    proxy, upstream
):
    upstream.script(reasoning_only(), reasoning_only(), reasoning_only(), Json(chat_completion("The summary.")))
    client = sdk(proxy)
    first = client.chat.completions.create(model="m", messages=MESSAGES)
    calls_before = len(upstream.requests)
    # The ended conversation sent again (a new user turn would start a new run: tests/integration/test_runs.py).
    follow_up = [*MESSAGES, {"role": "assistant", "content": first.choices[0].message.content}]

    raw = client.chat.completions.with_raw_response.create(model="m", messages=follow_up)

    assert summary_of(raw.parse().choices[0].message.content) == "The summary."
    assert raw.headers["x-loopwarden-terminated"] == "reasoning_only"
    assert len(upstream.requests) == calls_before


def test_ending_is_built_locally_when_the_summary_call_fails(proxy, upstream):
    failure = {"error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": None}}
    upstream.script(empty(), empty(), empty(), Json(failure, status=400))
    messages = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [tool_call("search", '{"q": "Lyon"}', "c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "Lyon: 522,250 (2021 census)"},
    ]

    raw = sdk(proxy).chat.completions.with_raw_response.create(model="m", messages=messages, tools=TOOLS)
    text = raw.parse().choices[0].message.content

    assert raw.headers["x-loopwarden-terminated"] == "empty_response"
    assert "What was found" in text
    assert "search returned: Lyon: 522,250 (2021 census)" in text
    assert "What is missing" in text
    assert "Suggested next step" in text


def test_text_only_reply_without_tool_use_passes(proxy, upstream):
    upstream.script(Json(chat_completion("Short.")))

    raw = sdk(proxy).chat.completions.with_raw_response.create(model="m", messages=MESSAGES)

    assert raw.headers["x-loopwarden-interventions"] == "none"
    assert len(upstream.requests) == 1


def test_shadow_mode_counts_the_decision_and_leaves_the_reply_alone(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default="mode: shadow\n")))
    upstream.script(empty())

    raw = sdk(proxy).chat.completions.with_raw_response.create(model="m", messages=MESSAGES)

    assert raw.parse().choices[0].message.content is None
    assert raw.headers["x-loopwarden-shadow"] == "empty_nudge"
    assert raw.headers["x-loopwarden-interventions"] == "none"
    assert len(upstream.requests) == 1
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    series = 'guard="empty_reply",kind="empty_nudge",policy="default",tenant="default"'
    assert f"loopwarden_shadow_decisions_total{{{series}}} 1.0" in metrics


def test_a_fresh_opening_starts_a_new_run_with_no_strikes(proxy, upstream):
    client = sdk(proxy)
    upstream.script(empty(), empty(), Json(chat_completion("ok")))  # two strikes in the first run
    client.chat.completions.create(model="m", messages=MESSAGES)
    upstream.script(empty(), Json(chat_completion("second run ok")))

    raw = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)

    assert raw.parse().choices[0].message.content == "second run ok"
    assert "x-loopwarden-terminated" not in raw.headers


def test_strikes_count_consecutive_misses_across_turns(proxy, upstream):
    client = sdk(proxy, default_headers={"X-Session-Id": "consecutive"})
    upstream.script(empty(), empty(), Json(chat_completion("recovered")), empty(), Json(chat_completion("fine")))

    client.chat.completions.create(model="m", messages=MESSAGES)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)

    assert raw.parse().choices[0].message.content == "fine"
    assert "x-loopwarden-terminated" not in raw.headers


def test_ended_session_streams_its_ending_to_a_streaming_client(proxy, upstream):
    upstream.script(empty(), empty(), empty(), Json(chat_completion("Streamed summary.")))
    client = sdk(proxy, default_headers={"X-Session-Id": "stream-end"})
    client.chat.completions.create(model="m", messages=MESSAGES)

    stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)

    assert summary_of(text) == "Streamed summary."


def test_delete_resets_an_ended_session(proxy, upstream):
    upstream.script(empty(), empty(), empty(), Json(chat_completion("Ending.")))
    client = sdk(proxy, default_headers={"X-Session-Id": "to-reset"})
    client.chat.completions.create(model="m", messages=MESSAGES)

    deleted = httpx.delete(
        f"{proxy.base_url}/loopwarden/sessions/to-reset", headers={"Authorization": "Bearer sk-provider"}
    )
    upstream.script(Json(chat_completion("Working again.")))
    after = client.chat.completions.create(model="m", messages=MESSAGES)

    assert deleted.json() == {"id": "to-reset", "object": "loopwarden.session.deleted", "deleted": True}
    assert after.choices[0].message.content == "Working again."


@pytest.fixture
def two_tenants(make_proxy, upstream, write_tenants, write_policies):
    keys = {"alpha": "lw-alpha", "beta": "lw-beta"}
    tenants = write_tenants(keys, provider_key="sk-shared", fields={"alpha": "policies: [default, strict]"})
    policies = write_policies(default="", strict="empty_response_max_strikes: 1\n")
    return make_proxy(tenants_file=tenants, policies_dir=str(policies))


def test_a_tenant_may_choose_an_allowed_policy_per_request(two_tenants, upstream):
    upstream.script(empty(), Json(chat_completion("Strict summary.")))
    client = openai.OpenAI(
        base_url=two_tenants.base_url, api_key="lw-alpha", default_headers={"X-LoopWarden-Policy": "strict"}
    )

    raw = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)

    assert raw.headers["x-loopwarden-policy"] == "strict"
    assert raw.headers["x-loopwarden-terminated"] == "empty_response"


def test_a_policy_the_tenant_may_not_use_is_403(two_tenants, upstream):
    response = httpx.post(
        f"{two_tenants.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"Authorization": "Bearer lw-beta", "X-LoopWarden-Policy": "strict"},
    )

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert upstream.requests == []


def test_one_tenant_cannot_reset_or_see_another_tenants_session(two_tenants, upstream):
    upstream.script(empty(), empty(), empty(), Json(chat_completion("Alpha's ending.")))
    alpha = openai.OpenAI(base_url=two_tenants.base_url, api_key="lw-alpha", default_headers={"X-Session-Id": "s1"})
    beta = openai.OpenAI(base_url=two_tenants.base_url, api_key="lw-beta", default_headers={"X-Session-Id": "s1"})
    alpha.chat.completions.create(model="m", messages=MESSAGES)

    upstream.script(Json(chat_completion("Beta works.")))
    beta_reply = beta.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)
    beta_delete = httpx.delete(
        f"{two_tenants.base_url}/loopwarden/sessions/s1", headers={"Authorization": "Bearer lw-beta"}
    )
    alpha_again = alpha.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)

    assert beta_reply.parse().choices[0].message.content == "Beta works."
    assert "x-loopwarden-terminated" not in beta_reply.headers
    assert beta_delete.json()["deleted"] is True  # beta's own s1
    assert alpha_again.headers["x-loopwarden-terminated"] == "empty_response"


def test_deleting_needs_a_valid_key(two_tenants):
    response = httpx.delete(f"{two_tenants.base_url}/loopwarden/sessions/s1")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_a_stream_with_tools_offered_is_guarded_then_replayed(proxy, upstream):
    upstream.script(empty(), Json(chat_completion("Lyon has 522,250 inhabitants.")))

    stream = sdk(proxy).chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, stream=True)
    chunks = list(stream)

    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Lyon has 522,250 inhabitants."
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert len(upstream.requests) == 2
