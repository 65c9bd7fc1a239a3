"""Budgets over real HTTP: tenant day caps, the inspect API, metered streams, the budget header."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from tests.integration.test_loop_guards import answer, calling, fresh_results, run_agent, sdk
from tests.support.assertions import assert_openai_error, summary_of
from tests.support.fake_upstream import Json, Sse, chat_completion, stream_chunks

MESSAGES = [{"role": "user", "content": "Summarize the quarterly report."}]


def costly(total: int, text: str = "Part of the answer."):
    body = chat_completion(text)
    body["usage"] = {"prompt_tokens": total // 2, "completion_tokens": total - total // 2, "total_tokens": total}
    return Json(body)


@pytest.fixture
def tenants(make_proxy, upstream, write_tenants):
    keys = {"capped": "lw-capped", "other": "lw-other"}
    path = write_tenants(keys, provider_key="sk-provider", fields={"capped": "daily_tokens: 1000"})
    return make_proxy(tenants_file=path)


def post(proxy, key, session, **extra):
    return httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES, "max_tokens": 100, **extra},
        headers={"Authorization": f"Bearer {key}", "X-Session-Id": session},
    )


def test_tenant_day_cap_answers_429_with_retry_after(tenants, upstream):
    upstream.script(costly(500), costly(500))
    assert post(tenants, "lw-capped", "a").status_code == 200
    assert post(tenants, "lw-capped", "b").status_code == 200  # other sessions share the tenant's day

    refused = post(tenants, "lw-capped", "c")

    assert_openai_error(refused, 429, "tenant_budget_exceeded")
    assert 0 < int(refused.headers["retry-after"]) <= 86_400
    assert refused.headers["x-should-retry"] == "false"
    assert len(upstream.requests) == 2


def test_one_tenants_cap_does_not_touch_another(tenants, upstream):
    upstream.script(costly(1000), costly(10))
    post(tenants, "lw-capped", "a")

    assert post(tenants, "lw-other", "a").status_code == 200


def test_inspect_shows_the_sessions_counters(tenants, upstream):
    upstream.script(costly(300))
    post(tenants, "lw-other", "inspect-me")

    response = httpx.get(
        f"{tenants.base_url}/loopwarden/sessions/inspect-me", headers={"Authorization": "Bearer lw-other"}
    )

    view = response.json()
    assert response.status_code == 200
    assert (view["object"], view["steps"], view["turns"]) == ("loopwarden.session", 1, 1)
    assert view["tokens"] == {"prompt": 150, "completion": 150, "total": 300}
    assert view["termination"] is None
    assert view["budget_remaining"] == "steps=49"


def test_inspect_of_another_tenants_session_is_404(tenants, upstream):
    post(tenants, "lw-other", "private")

    response = httpx.get(
        f"{tenants.base_url}/loopwarden/sessions/private", headers={"Authorization": "Bearer lw-capped"}
    )

    assert_openai_error(response, 404, "not_found")


def test_inspect_needs_a_key(tenants):
    assert_openai_error(httpx.get(f"{tenants.base_url}/loopwarden/sessions/x"), 401)


def _usage_event():
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [],
        "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48},
    }


def test_streamed_tokens_are_metered_without_showing_the_client_a_usage_chunk(proxy, upstream):
    upstream.script(Sse([*stream_chunks("streamed answer"), _usage_event()]))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", default_headers={"X-Session-Id": "metered"})

    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    view = httpx.get(f"{proxy.base_url}/loopwarden/sessions/metered", headers={"Authorization": "Bearer sk-p"}).json()

    assert upstream.requests[0].json()["stream_options"] == {"include_usage": True}
    assert all(chunk.choices for chunk in chunks)
    assert all(chunk.usage is None for chunk in chunks)
    assert view["tokens"]["total"] == 48


def test_a_stream_without_a_usage_chunk_is_metered_by_an_estimate(proxy, upstream):
    text = "an answer from an upstream that ignores include_usage " * 8
    upstream.script(Sse(stream_chunks(text)))  # complete ([DONE]) but no usage chunk
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", default_headers={"X-Session-Id": "no-usage"})

    list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    view = httpx.get(f"{proxy.base_url}/loopwarden/sessions/no-usage", headers={"Authorization": "Bearer sk-p"}).json()
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text

    assert view["tokens"]["completion"] >= len(text) // 4
    assert view["tokens"]["prompt"] > 0
    assert 'loopwarden_usage_estimated_total{policy="default",reason="no_usage_chunk",tenant="default"} 1.0' in metrics


def test_a_client_that_asked_for_usage_still_gets_it(proxy, upstream):
    upstream.script(Sse([*stream_chunks("streamed answer"), _usage_event()]))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p")

    chunks = list(
        client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )

    assert chunks[-1].usage.total_tokens == 48


def test_every_reply_says_what_budget_is_left(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default="budgets: {max_tokens: 5000}\n")))
    upstream.script(costly(1000))

    response = post(proxy, "sk-p", "header")

    assert response.headers["x-loopwarden-budget-remaining"] == "steps=49;tokens=4000"


def test_token_budget_ends_a_real_session_with_a_summary(make_proxy, upstream, write_policies):
    policy = "budgets: {max_tokens: 1200}\nfinalize: {max_tokens: 50}\n"
    proxy = make_proxy(policies_dir=str(write_policies(default=policy)))
    upstream.script(costly(1000), costly(600), Json(chat_completion("Found most of it; missing Q4.")))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", default_headers={"X-Session-Id": "spend"})

    replies = [
        client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, max_tokens=100) for _ in range(3)
    ]

    assert [r.headers.get("x-loopwarden-terminated") for r in replies] == [None, None, "budget_tokens"]
    assert summary_of(replies[2].parse().choices[0].message.content) == "Found most of it; missing Q4."
    assert replies[1].headers["x-loopwarden-interventions"] == "budget_note"


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_an_output_limit_above_the_daily_cap_is_a_400_naming_the_cap(tenants, upstream, field):
    response = httpx.post(
        f"{tenants.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES, field: 5000},
        headers={"Authorization": "Bearer lw-capped", "X-Session-Id": "too-big"},
    )

    error = assert_openai_error(response, 400)
    assert error["param"] == field
    assert "daily token cap" in error["message"]
    assert "1000" in error["message"]
    assert "retry-after" not in response.headers
    assert upstream.requests == []


def test_a_request_without_an_output_limit_under_a_cap_below_the_reserve_is_a_400_naming_cap_and_reserve(
    tenants, upstream
):
    response = httpx.post(
        f"{tenants.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES},  # no max_tokens: the policy reserves 4,096 tokens
        headers={"Authorization": "Bearer lw-capped", "X-Session-Id": "unlimited"},
    )

    error = assert_openai_error(response, 400)
    assert error["param"] == "max_tokens"
    assert "daily token cap of 1000 tokens: it can never fit" in error["message"]
    assert "4096 the policy reserves (budgets.reserve_tokens)" in error["message"]
    assert "Set max_tokens to at most" in error["message"]
    assert "retry-after" not in response.headers
    assert upstream.requests == []


def test_a_daily_cap_below_a_policys_reserve_is_a_warning_at_the_start(make_proxy, write_tenants, log_records):
    path = write_tenants({"capped": "lw-capped", "roomy": "lw-roomy"}, fields={"capped": "daily_tokens: 1000"})
    make_proxy(tenants_file=path)

    warned = [r.fields for r in log_records if r.getMessage() == "tenant_cap_below_reserve"]
    assert warned == [
        {
            "tenant": "capped",
            "daily_tokens": 1000,
            "policy": "default",
            "reserve_tokens": 4096,
            "effect": "calls without an output limit get 400",
        }
    ]


def test_a_prompt_and_output_limit_over_the_cap_together_are_a_400_not_a_429(tenants, upstream):
    long = [{"role": "user", "content": "word " * 740}]  # about 940 tokens of prompt, 100 of output asked

    response = post(tenants, "lw-capped", "long", messages=long)

    error = assert_openai_error(response, 400)
    assert "its max_tokens 100" in error["message"]
    assert "it can never fit" in error["message"]
    assert upstream.requests == []


def test_an_output_limit_above_the_session_budget_is_a_400_and_the_session_goes_on(
    make_proxy, upstream, write_policies
):
    policy = "budgets: {max_tokens: 1200}\nfinalize: {max_tokens: 50}\n"
    proxy = make_proxy(policies_dir=str(write_policies(default=policy)))

    refused = post(proxy, "sk-p", "oversized", max_tokens=5000)
    answered = post(proxy, "sk-p", "oversized", max_tokens=100)

    error = assert_openai_error(refused, 400)
    assert error["param"] == "max_tokens"
    assert "session's token budget" in error["message"]
    assert "1200" in error["message"]
    assert answered.status_code == 200
    assert "x-loopwarden-terminated" not in answered.headers
    assert len(upstream.requests) == 1


FAILED_THRICE = [
    {"role": "user", "content": "How many people live in Lyon?"},
    *[
        turn
        for n in range(3)
        for turn in (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"c{n}", "type": "function", "function": {"name": "search", "arguments": f'{{"q": "{n}"}}'}}
                ],
            },
            {"role": "tool", "tool_call_id": f"c{n}", "content": "Error: search is down"},
        )
    ],
]


def _finalize_tokens(proxy) -> float:
    text = httpx.get(f"{proxy.metrics_url}/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("loopwarden_tokens_total{") and 'kind="finalize"' in line
    )


@pytest.mark.parametrize("unusable", ["empty", "tool_call"])
def test_an_unusable_summary_reply_is_replaced_locally_but_its_tokens_are_booked(proxy, upstream, unusable):
    reply = costly(300, "") if unusable == "empty" else costly(300, None)
    if unusable == "tool_call":
        reply.body["choices"][0]["message"]["tool_calls"] = [
            {"id": "x", "type": "function", "function": {"name": "search", "arguments": "{}"}}
        ]
    upstream.script(reply)
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    ended = client.chat.completions.with_raw_response.create(
        model="m", messages=FAILED_THRICE, extra_headers={"X-Session-Id": f"unusable-summary-{unusable}"}
    )

    assert ended.headers["x-loopwarden-terminated"] == "tool_failures"
    assert summary_of(ended.parse().choices[0].message.content).startswith("I have to stop here")  # the local summary
    session = httpx.get(
        f"{proxy.base_url}/loopwarden/sessions/unusable-summary-{unusable}", headers={"Authorization": "Bearer sk-p"}
    ).json()
    assert session["tokens"] == {"prompt": 150, "completion": 150, "total": 300}
    assert _finalize_tokens(proxy) == 300


def test_a_client_capped_at_max_steps_requests_gets_the_ending_never_a_tool_call_it_cannot_answer(
    make_proxy, upstream, write_policies
):
    proxy = make_proxy(policies_dir=str(write_policies(default="max_steps: 5\n")))
    pages = [calling("search", {"q": f"lyon page {n}"}, f"c{n}") for n in range(5)]
    upstream.script(*pages[:4], answer("Found: pages 0-3. Missing: the population figure."))

    turns, last, _ = run_agent(sdk(proxy), fresh_results(), max_turns=5, session="capped-at-five")

    assert turns == 5  # the client's own cap, reached with the ending in hand
    assert last.headers["x-loopwarden-terminated"] == "budget_steps"
    assert last.parse().choices[0].message.tool_calls is None
    assert summary_of(last.parse().choices[0].message.content) == "Found: pages 0-3. Missing: the population figure."
    assert len(upstream.requests) == 5  # 4 agent calls and the summary call: max_steps in all
    session = httpx.get(
        f"{proxy.base_url}/loopwarden/sessions/capped-at-five", headers={"Authorization": "Bearer sk-p"}
    )
    assert session.json()["steps"] == 5


def test_the_call_that_would_leave_no_room_for_an_ending_is_the_ending(make_proxy, upstream, write_policies):
    policy = "budgets: {max_tokens: 1000}\nfinalize: {max_tokens: 100}\n"
    proxy = make_proxy(policies_dir=str(write_policies(default=policy)))
    upstream.script(costly(300), costly(300), costly(115, "Summary: two parts read, the third is missing."))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", default_headers={"X-Session-Id": "room"})

    replies = [
        client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, max_tokens=300) for _ in range(3)
    ]

    # the 3rd call's worst case (~315) would fit the 400 left, but not with an ending (~115) after it
    assert [r.headers.get("x-loopwarden-terminated") for r in replies] == [None, None, "budget_tokens"]
    assert summary_of(replies[2].parse().choices[0].message.content) == "Summary: two parts read, the third is missing."
    session = httpx.get(f"{proxy.base_url}/loopwarden/sessions/room", headers={"Authorization": "Bearer sk-p"})
    assert session.json()["tokens"]["total"] == 715 <= 1000  # the ending included


def test_the_openai_agents_sdk_capped_at_max_steps_turns_ends_with_the_summary(make_proxy, upstream, write_policies):
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool
    def search(q: str) -> str:
        """Search the web."""
        return f"results for {q}"

    proxy = make_proxy(policies_dir=str(write_policies(default="max_steps: 5\n")))
    upstream.script(
        *[calling("search", {"q": f"lyon page {n}"}, f"c{n}") for n in range(4)],
        answer("Found: pages 0-3. Missing: the population figure."),
    )
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    agent: Agent[None] = Agent(
        name="research", model=OpenAIChatCompletionsModel(model="m", openai_client=client), tools=[search]
    )

    result = asyncio.run(Runner.run(agent, "How many people live in Lyon?", max_turns=5))

    assert (
        summary_of(result.final_output) == "Found: pages 0-3. Missing: the population figure."
    )  # not MaxTurnsExceeded
    assert len(upstream.requests) == 5
    assert b"The session is ending because" in upstream.requests[-1].body  # the 5th call was the summary
