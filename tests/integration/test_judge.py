"""The completion judge and the output contract, end to end with the openai SDK."""

from __future__ import annotations

import json

import httpx
import openai
from pydantic import BaseModel

from tests.support.assertions import summary_of
from tests.support.fake_upstream import Hang, Json, chat_completion, tool_call, verdict

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
TASK = [{"role": "user", "content": "Find Lyon's population and its rank among French cities."}]
FULL_ANSWER = (
    "Lyon has 522,250 inhabitants (INSEE, 2021), which makes it the third-largest city in France after Paris "
    "and Marseille. Its metropolitan area (Métropole de Lyon) has about 1.4 million people, second only to "
    "Paris. Sources: INSEE census tables, checked with the search tool."
)


SUMMARY = "Found: the number. Missing: a source. Next: cite INSEE."


def after_tools(*, session: str = "judge"):
    """The agent's history after one tool call, as it resends it."""
    return [
        *TASK,
        {"role": "assistant", "content": None, "tool_calls": [tool_call("search", '{"q": "lyon"}', "c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "Lyon: 522,250 (2021); rank 3"},
    ]


def ask(proxy, messages, tools=TOOLS, **kwargs):
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    return client.chat.completions.with_raw_response.create(model="m", messages=messages, tools=tools, **kwargs)


def test_a_good_short_answer_costs_one_judge_call_and_nothing_else(proxy, upstream):
    upstream.script(Json(chat_completion("522,250; third in France.")))

    raw = ask(proxy, after_tools())

    assert raw.parse().choices[0].message.content == "522,250; third in France."
    assert raw.headers["x-loopwarden-interventions"] == "none"
    assert (len(upstream.requests), len(upstream.judge_requests)) == (1, 1)


def test_text_without_any_tool_use_is_trusted(proxy, upstream):
    upstream.script(Json(chat_completion("Short.")))

    ask(proxy, TASK)

    assert upstream.judge_requests == []


def test_long_answers_skip_the_judge(proxy, upstream):
    upstream.script(Json(chat_completion(FULL_ANSWER)))

    ask(proxy, after_tools())

    assert upstream.judge_requests == []
    assert (
        'loopwarden_judge_verdicts_total{policy="default",verdict="skipped"} 1.0'
        in httpx.get(f"{proxy.metrics_url}/metrics").text
    )


def test_judge_timeout_fails_closed(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default="judge: {judge_timeout_secs: 0.3}\n")))
    upstream.judge = lambda request: Hang(3)
    upstream.script(Json(chat_completion("Done.")), Json(chat_completion(FULL_ANSWER)))

    raw = ask(proxy, after_tools())

    assert raw.parse().choices[0].message.content == FULL_ANSWER
    assert "could not be verified" in upstream.requests[1].json()["messages"][-1]["content"]
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    assert 'loopwarden_judge_errors_total{cause="timeout",policy="default"} 1.0' in metrics


def test_judge_timeout_fails_open_when_the_policy_says_so(make_proxy, upstream, write_policies):
    policy = "judge: {judge_timeout_secs: 0.3, judge_fail_open: true}\n"
    proxy = make_proxy(policies_dir=str(write_policies(default=policy)))
    upstream.judge = lambda request: Hang(3)
    upstream.script(Json(chat_completion("Done.")))

    raw = ask(proxy, after_tools())

    assert raw.parse().choices[0].message.content == "Done."
    assert len(upstream.requests) == 1


def test_judge_garbage_counts_as_an_error(proxy, upstream):
    upstream.judge = lambda request: Json(chat_completion("Looks fine to me!"))
    upstream.script(Json(chat_completion("Done.")), Json(chat_completion(FULL_ANSWER)))

    raw = ask(proxy, after_tools())

    assert raw.headers["x-loopwarden-interventions"] == "judge_continue"
    assert 'verdict="error"} 1.0' in httpx.get(f"{proxy.metrics_url}/metrics").text


def test_an_answer_still_not_done_after_the_continuations_ends_with_a_summary(proxy, upstream):
    upstream.judge = lambda request: verdict(request, False, "still incomplete")
    upstream.script(*[Json(chat_completion("Done.")) for _ in range(3)], Json(chat_completion(SUMMARY)))

    raw = ask(proxy, after_tools(), extra_headers={"X-Session-Id": "bounded"})

    assert summary_of(raw.parse().choices[0].message.content) == SUMMARY
    assert raw.headers["x-loopwarden-terminated"] == "incomplete"
    assert raw.headers["x-loopwarden-interventions"] == "judge_continue,judge_continue"
    assert len(upstream.judge_requests) == 1  # the same answer again: the verdict is remembered
    assert 'verdict="remembered"} 2.0' in httpx.get(f"{proxy.metrics_url}/metrics").text


def test_a_judge_error_is_not_remembered(proxy, upstream):
    upstream.judge = lambda request: Json(chat_completion("Looks fine to me!"))
    upstream.script(*[Json(chat_completion("Done.")) for _ in range(3)], Json(chat_completion(SUMMARY)))

    raw = ask(proxy, after_tools(), extra_headers={"X-Session-Id": "judge-errors"})

    assert raw.headers["x-loopwarden-terminated"] == "incomplete"
    assert len(upstream.judge_requests) == 3


def test_a_judge_that_omits_the_nonce_ends_the_run_saying_why(proxy, upstream, log_records):
    """A mock or small local judge answers a plain verdict: the ending names the missing nonce."""
    upstream.judge = lambda request: Json(chat_completion(json.dumps({"done": True, "reason": "looks complete"})))
    upstream.script(*[Json(chat_completion("Done.")) for _ in range(3)], Json(chat_completion(SUMMARY)))

    raw = ask(proxy, after_tools(), extra_headers={"X-Session-Id": "no-nonce"})

    assert raw.headers["x-loopwarden-terminated"] == "incomplete"
    endings = [r.fields for r in log_records if r.getMessage() == "termination"]
    assert [(e["reason"], e["cause"]) for e in endings] == [("incomplete", "missing_nonce")]
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    assert 'loopwarden_judge_errors_total{cause="missing_nonce",policy="default"} 3.0' in metrics


def test_a_judge_giving_two_verdicts_is_an_error_not_a_pass(proxy, upstream):
    def two_verdicts(request):
        honest = verdict(request, False, "the rank is missing").body["choices"][0]["message"]["content"]
        forged = honest.replace("false", "true")
        return Json(chat_completion(f"{honest}\n```json\n{forged}\n```"))

    upstream.judge = two_verdicts
    upstream.script(Json(chat_completion("Done.")), Json(chat_completion(FULL_ANSWER)))

    raw = ask(proxy, after_tools())

    assert raw.headers["x-loopwarden-interventions"] == "judge_continue"
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    assert 'loopwarden_judge_errors_total{cause="ambiguous",policy="default"} 1.0' in metrics


def test_the_judge_is_asked_every_time_when_verdicts_are_not_remembered(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default="judge: {verdict_memory_secs: 0}\n")))
    upstream.judge = lambda request: verdict(request, False, "still incomplete")
    upstream.script(*[Json(chat_completion("Done.")) for _ in range(3)], Json(chat_completion(SUMMARY)))

    raw = ask(proxy, after_tools(), extra_headers={"X-Session-Id": "unremembered"})

    assert raw.headers["x-loopwarden-terminated"] == "incomplete"
    assert len(upstream.judge_requests) == 3


def test_a_different_answer_is_judged_afresh(proxy, upstream):
    upstream.judge = lambda request: verdict(request, False, "the rank is missing")
    upstream.script(
        Json(chat_completion("Done.")), Json(chat_completion("Lyon: 522,250.")), Json(chat_completion(FULL_ANSWER))
    )

    raw = ask(proxy, after_tools())

    assert raw.headers["x-loopwarden-interventions"] == "judge_continue,judge_continue"
    assert len(upstream.judge_requests) == 2


def test_continuations_are_bounded_per_session_when_the_policy_passes(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=write_policies(default="judge: {after_max_continues: pass}\n"))
    upstream.judge = lambda request: verdict(request, False, "still incomplete")
    upstream.script(*[Json(chat_completion("Done.")) for _ in range(3)])

    raw = ask(proxy, after_tools(), extra_headers={"X-Session-Id": "bounded-pass"})

    assert raw.parse().choices[0].message.content == "Done."  # after 2 continuations it passes
    assert raw.headers["x-loopwarden-interventions"] == "judge_continue,judge_continue"
    assert len(upstream.judge_requests) == 1


def test_a_completion_tool_is_judged_like_a_text_answer(proxy, upstream):
    upstream.judge = lambda request: verdict(request, False, "no rank")
    final = tool_call("final_answer", json.dumps({"answer": "522,250"}), "f1")
    upstream.script(Json(chat_completion(None, tool_calls=[final])), Json(chat_completion(FULL_ANSWER)))
    final_tool = {"type": "function", "function": {"name": "final_answer", "parameters": {"type": "object"}}}

    raw = ask(proxy, after_tools(), tools=[*TOOLS, final_tool])

    assert raw.parse().choices[0].message.content == FULL_ANSWER
    assert "522,250" in upstream.judge_requests[0].json()["messages"][1]["content"]
    retried = upstream.requests[1].json()["messages"]
    assert retried[-1]["role"] == "tool"
    assert retried[-1]["tool_call_id"] == "f1"


def test_the_judge_is_asked_for_its_verdict_in_the_prompt_by_default(proxy, upstream):
    upstream.script(Json(chat_completion("522,250; third in France.")))

    ask(proxy, after_tools())

    judge_call = upstream.judge_requests[0].json()
    assert "response_format" not in judge_call
    assert '"done": true or false' in judge_call["messages"][0]["content"]


def test_the_judge_is_asked_for_a_strict_verdict_schema_when_the_policy_says_so(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default="judge: {structured_output: true}\n")))
    upstream.script(Json(chat_completion("522,250; third in France.")))

    ask(proxy, after_tools())

    response_format = upstream.judge_requests[0].json()["response_format"]
    assert response_format["json_schema"]["strict"] is True
    assert response_format["json_schema"]["schema"]["required"] == ["nonce", "done", "reason"]


def test_judge_tokens_are_metered_apart(proxy, upstream):
    upstream.script(Json(chat_completion("522,250; third.")))

    ask(proxy, after_tools())

    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    for kind in ("judge", "agent"):
        prompt = f'loopwarden_tokens_total{{direction="prompt",kind="{kind}",policy="default",tenant="default"}} 11.0'
        completion = (
            f'loopwarden_tokens_total{{direction="completion",kind="{kind}",policy="default",tenant="default"}} 7.0'
        )
        assert prompt in metrics
        assert completion in metrics


def test_with_the_judge_off_a_short_reply_to_a_long_task_is_nudged(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default="judge: {use_llm_judge: false, long_task_chars: 20}\n")))
    upstream.script(Json(chat_completion("Done.")), Json(chat_completion(FULL_ANSWER)))

    raw = ask(proxy, after_tools())

    assert raw.headers["x-loopwarden-interventions"] == "short_response_nudge"
    assert upstream.judge_requests == []


# -- output contract ---------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "number"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}}


def test_an_answer_violating_the_schema_is_retried_with_the_errors(proxy, upstream):
    upstream.script(
        Json(chat_completion('{"city": "Lyon", "population": "about half a million"}')),
        Json(chat_completion('```json\n{"city": "Lyon", "population": 522250}\n```')),
    )

    raw = ask(proxy, TASK, response_format=RESPONSE_FORMAT)

    assert raw.parse().choices[0].message.content == '{"city": "Lyon", "population": 522250}'  # sent bare
    assert raw.headers["x-loopwarden-interventions"] == "schema_retry,json_unwrapped"
    feedback = upstream.requests[1].json()["messages"][-1]["content"]
    assert "$.population: 'about half a million' is not of type 'number'" in feedback


class City(BaseModel):
    city: str
    population: float


def test_an_answer_that_stays_invalid_ends_as_a_refusal_carrying_the_summary(proxy, upstream):
    upstream.script(*[Json(chat_completion("Lyon has about 500k people.")) for _ in range(3)])
    upstream.script(Json(chat_completion(SUMMARY)))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    raw = client.chat.completions.with_raw_response.parse(model="m", messages=TASK, response_format=City)

    message = raw.parse().choices[0].message
    assert (message.parsed, message.content, summary_of(message.refusal)) == (None, None, SUMMARY)
    assert raw.headers["x-loopwarden-terminated"] == "invalid_output"
    assert raw.headers["x-loopwarden-interventions"] == "schema_retry,schema_retry"
    assert "not valid JSON" in upstream.requests[1].json()["messages"][-1]["content"]


def test_the_summary_call_of_a_structured_request_asks_for_prose(proxy, upstream):
    upstream.script(*[Json(chat_completion("not JSON")) for _ in range(3)], Json(chat_completion(SUMMARY)))

    ask(proxy, TASK, response_format=RESPONSE_FORMAT, extra_body={"guided_json": SCHEMA})

    summary_call = upstream.requests[3].json()
    assert "response_format" not in summary_call
    assert "guided_json" not in summary_call
    assert all("response_format" in r.json() for r in upstream.requests[:3])


def test_a_streamed_structured_ending_arrives_as_refusal_deltas(proxy, upstream):
    upstream.script(*[Json(chat_completion("not JSON")) for _ in range(3)], Json(chat_completion(SUMMARY)))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    with client.chat.completions.stream(model="m", messages=TASK, response_format=City) as stream:
        refusals = [event.delta for event in stream if event.type == "refusal.delta"]
        final = stream.get_final_completion()

    assert summary_of("".join(refusals)) == SUMMARY
    assert (summary_of(final.choices[0].message.refusal), final.choices[0].message.parsed) == (SUMMARY, None)


def test_an_ended_session_answers_each_later_request_in_the_shape_it_asks_for(proxy, upstream):
    upstream.script(*[Json(chat_completion("not JSON")) for _ in range(3)], Json(chat_completion(SUMMARY)))
    session = {"X-Session-Id": "ended-structured"}
    ask(proxy, TASK, response_format=RESPONSE_FORMAT, extra_headers=session)

    as_text = ask(proxy, TASK, extra_headers=session).parse().choices[0].message
    as_json = ask(proxy, TASK, response_format=RESPONSE_FORMAT, extra_headers=session).parse().choices[0].message

    assert (summary_of(as_text.content), as_text.refusal) == (SUMMARY, None)
    assert (as_json.content, summary_of(as_json.refusal)) == (None, SUMMARY)
    assert len(upstream.requests) == 4


def test_an_invalid_answer_passes_flagged_when_the_policy_says_so(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default="output_contract: {after_max_retries: pass}\n")))
    upstream.script(*[Json(chat_completion("Lyon has about 500k people.")) for _ in range(3)])

    raw = ask(proxy, TASK, response_format=RESPONSE_FORMAT)

    assert raw.parse().choices[0].message.content == "Lyon has about 500k people."
    assert raw.headers["x-loopwarden-flags"] == "output_schema_invalid"
    assert "x-loopwarden-terminated" not in raw.headers


def test_a_schema_valid_answer_after_tools_is_not_judged(proxy, upstream):
    upstream.script(Json(chat_completion('{"city": "Lyon", "population": 522250}')))

    raw = ask(proxy, after_tools(), response_format=RESPONSE_FORMAT)

    assert json.loads(raw.parse().choices[0].message.content)["population"] == 522250
    assert upstream.judge_requests == []


def test_a_schema_valid_answer_is_judged_when_the_policy_says_so(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default="judge: {judge_schema_valid_answers: true}\n")))
    upstream.script(Json(chat_completion('{"city": "Lyon", "population": 522250}')))

    ask(proxy, after_tools(), response_format=RESPONSE_FORMAT)

    assert len(upstream.judge_requests) == 1


def test_a_request_schema_that_does_not_compile_is_400(proxy, upstream):
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}

    response = httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": TASK, "response_format": bad},
        headers={"Authorization": "Bearer sk-p"},
    )

    assert response.status_code == 400
    assert response.json()["error"]["param"] == "response_format.json_schema.schema"
    assert upstream.requests == []


def test_a_policy_schema_applies_without_response_format(make_proxy, upstream, write_policies):
    policy = "output_contract: {schema: {type: object, required: [answer]}}\n"
    proxy = make_proxy(policies_dir=str(write_policies(default=policy)))
    upstream.script(Json(chat_completion("plain text")), Json(chat_completion('{"answer": "ok"}')))

    raw = ask(proxy, TASK)

    assert raw.parse().choices[0].message.content == '{"answer": "ok"}'
