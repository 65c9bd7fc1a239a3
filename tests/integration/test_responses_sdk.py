"""``POST /v1/responses`` guarded like chat completions, with the real openai SDK over real HTTP
against the scripted Responses upstream: plain, streamed (every stream validated) and parsed."""

from __future__ import annotations

import itertools
import json

import httpx
import pydantic
import pytest

from tests.support.assertions import summary_of
from tests.support.fake_responses import (
    function_call,
    message,
    reasoning,
    response,
    text_response,
    verdict,
)
from tests.support.responses_clients import checked_sdk, create, run_agent
from tests.support.responses_events import validate_stream
from tests.support.responses_fixtures import fake, proxy, responses_server  # noqa: F401 (fixtures)

TOOLS = [
    {
        "type": "function",
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
            "additionalProperties": False,
        },
    },
    {"type": "function", "name": "fetch", "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}},
]
TASK = [{"role": "user", "content": "How many people live in Lyon?"}]
REQUEST = {"model": "m", "instructions": "You research.", "tools": TOOLS}


@pytest.fixture
def sdk(proxy):
    with checked_sdk(proxy.base_url) as (client, tee):
        yield client, tee


def calling(name: str, arguments: dict | str, call_id: str, *, thinking: bool = True):
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    items = [reasoning("I should search.")] if thinking else []
    return response(*items, function_call(name, raw, call_id))


def fresh_results():
    counter = itertools.count()
    return lambda call: f"result #{next(counter)} for {call['arguments']}"


STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])


# -- untouched --------------------------------------------------------------------------------


def test_a_well_behaved_request_reaches_upstream_byte_for_byte_and_its_reply_back(proxy, fake):
    raw = b'{"model":"m",  "input":[{"role":"user","content":"caf\\u00e9"}],"store":false,"vendor":{"x":1.50}}'
    fake.script(text_response("Bonjour."))

    reply = httpx.post(f"{proxy.base_url}/responses", content=raw, headers={"Authorization": "Bearer sk-p"})

    assert fake.requests[0].body == raw
    assert fake.requests[0].path == "/v1/responses"
    assert reply.json()["output"][0]["content"][0]["text"] == "Bonjour."
    assert reply.json()["id"] == fake.served[0].response["id"]


def test_a_well_behaved_stream_reaches_the_client_byte_for_byte(proxy, fake):
    fake.script(response(reasoning("Think."), message("Bonjour tout le monde.")))
    body = {"model": "m", "input": "Hi", "stream": True}

    with httpx.stream("POST", f"{proxy.base_url}/responses", json=body, headers={"Authorization": "Bearer sk-p"}) as r:
        raw = r.read()

    parsed = validate_stream(raw)
    assert parsed.text == "Bonjour tout le monde."
    assert json.loads(fake.requests[0].body) == body


def test_the_sdk_reads_a_plain_reply(sdk, fake):
    client, _ = sdk
    fake.script(text_response("It is sunny."))

    reply = client.responses.create(model="m", input="Weather in Paris?")

    assert reply.output_text == "It is sunny."


def test_the_sdk_reads_a_stream_through_its_accumulator(sdk, fake):
    client, tee = sdk
    fake.script(response(reasoning("Hmm."), message("Streaming works fine.")))

    with client.responses.stream(model="m", input="Stream please") as stream:
        final = stream.get_final_response()

    assert final.output_text == "Streaming works fine."
    assert len(tee.streams) == 1


class City(pydantic.BaseModel):
    name: str
    population: int


def test_responses_parse_reads_a_structured_answer(sdk, fake):
    client, _ = sdk
    fake.script(text_response('{"name": "Lyon", "population": 522250}'))

    parsed = client.responses.parse(model="m", input="Lyon?", text_format=City)

    assert parsed.output_parsed == City(name="Lyon", population=522250)
    assert fake.agent_payloads[0]["text"]["format"]["type"] == "json_schema"


# -- guards -----------------------------------------------------------------------------------


@STREAMED
def test_an_empty_reply_is_nudged_once_and_the_client_sees_only_the_good_one(sdk, fake, stream):
    client, _ = sdk
    fake.script(response(message("")), text_response("Lyon has 522,250 inhabitants."))

    headers, reply = create(client, stream, input=TASK, store=False, **REQUEST)

    assert reply.output_text == "Lyon has 522,250 inhabitants."
    assert headers["x-loopwarden-interventions"] == "empty_nudge"
    retry = fake.agent_payloads[1]["input"]
    assert retry[:-1] == TASK
    assert retry[-1]["role"] == "user"
    assert retry[-1]["content"][0]["text"].startswith("Your last reply was empty.")
    assert fake.rejections == []


@STREAMED
def test_a_reasoning_only_model_is_ended_gracefully(sdk, fake, stream):
    client, _ = sdk
    fake.script(
        *[response(reasoning("Still thinking...")) for _ in range(3)], text_response("Found: little. Next: ask.")
    )

    headers, reply = create(client, stream, input=TASK, store=False, **REQUEST)

    assert headers["x-loopwarden-terminated"] == "reasoning_only"
    assert summary_of(reply.output_text) == "Found: little. Next: ask."
    assert all(item.type == "message" for item in reply.output)
    summary = fake.agent_payloads[-1]
    assert summary["tool_choice"] == "none"
    assert "stream" not in summary
    assert fake.rejections == []


@STREAMED
@pytest.mark.parametrize("chained", [False, True], ids=["stateless", "chained"])
def test_the_same_call_forever_ends_within_block_at(sdk, fake, stream, chained):
    client, _ = sdk
    fake.script(
        *[calling("search", {"q": "lyon"}, f"c{n}") for n in range(7)],
        text_response("Lyon: ~520k. Missing: a source."),
    )

    turns, headers, reply, _ = run_agent(
        client,
        fresh_results(),
        TASK,
        stream=stream,
        chained=chained,
        extra_headers={"X-Session-Id": f"loop-{stream}-{chained}"},
        **REQUEST,
    )

    assert headers["x-loopwarden-terminated"] == "loop"
    assert turns <= 5
    assert summary_of(reply.output_text) == "Lyon: ~520k. Missing: a source."
    assert fake.rejections == []


@STREAMED
def test_bad_arguments_go_back_to_the_model_path_by_path(sdk, fake, stream):
    client, _ = sdk
    fake.script(calling("search", {"query": "lyon"}, "c1"), calling("search", {"q": "lyon"}, "c2"), text_response("ok"))

    _, _, reply, history = run_agent(
        client, fresh_results(), TASK, stream=stream, extra_headers={"X-Session-Id": f"args-{stream}"}, **REQUEST
    )

    retry = fake.agent_payloads[1]["input"]
    feedback = retry[-1]
    assert feedback["type"] == "function_call_output"
    assert feedback["call_id"] == "c1"
    assert "$.q: 'q' is a required property" in feedback["output"]
    assert retry[-3]["type"] == "reasoning"  # the reasoning went back with its call
    assert retry[-3]["encrypted_content"] == "gAAAAB-opaque=="
    agent_calls = [item["arguments"] for item in history if item.get("type") == "function_call"]
    assert agent_calls == ['{"q": "lyon"}']
    assert reply.output_text == "ok"
    assert fake.rejections == []


@STREAMED
def test_a_premature_done_is_judged_and_continued(sdk, fake, stream):
    client, _ = sdk
    fake.judge = lambda request: verdict(request, False, "the source was not given")
    fake.script(
        calling("search", {"q": "lyon"}, "c1"),
        text_response("About 500k."),
        calling("fetch", {"url": "https://insee.fr"}, "c2"),
        text_response(
            "Lyon has 522,250 inhabitants (INSEE 2021), so the answer is confirmed by the official census." * 3
        ),
    )

    _, _headers, reply, _ = run_agent(
        client, fresh_results(), TASK, stream=stream, extra_headers={"X-Session-Id": f"judge-{stream}"}, **REQUEST
    )

    assert "INSEE" in reply.output_text
    assert len(fake.judge_requests) == 1
    judged = fake.judge_requests[0].json()
    assert judged["store"] is False
    assert "instructions" in judged
    nudge = fake.agent_payloads[2]["input"]
    assert nudge[-1]["content"][0]["text"].startswith("You are not done yet: the source was not given")
    assert fake.rejections == []


def test_a_commentary_preamble_without_a_call_is_continued(sdk, fake):
    client, _ = sdk
    fake.script(
        calling("search", {"q": "lyon"}, "c1"),
        response(message("I will now check the census data.", phase="commentary")),
        text_response("Lyon has 522,250 inhabitants according to the INSEE census of 2021, which I verified." * 3),
    )

    _, _headers, reply, _ = run_agent(
        client, fresh_results(), TASK, extra_headers={"X-Session-Id": "preamble"}, **REQUEST
    )

    assert "INSEE" in reply.output_text
    assert not any(b"check the census data" in judged.body for judged in fake.judge_requests)  # never judged
    echoed = fake.agent_payloads[2]["input"]
    assert echoed[-2]["phase"] == "commentary"


@STREAMED
def test_a_token_budget_ends_the_session_with_a_summary(make_proxy, fake, write_policies, stream):
    proxy = make_proxy(upstream=fake.url, policies_dir=str(write_policies(default="budgets: {max_tokens: 1200}\n")))
    fake.script(
        response(message("Part one."), usage=(900, 100)),
        text_response("Found most of it; missing Q4."),
    )
    with checked_sdk(proxy.base_url) as (client, _):
        replies = [
            create(
                client,
                stream,
                input=TASK,
                store=False,
                max_output_tokens=100,
                extra_headers={"X-Session-Id": "spend"},
                model="m",
            )
            for _ in range(2)
        ]

    # 1,000 of 1,200 tokens used: the next call would leave no room for an ending, so it is the ending
    assert [h.get("x-loopwarden-terminated") for h, _ in replies] == [None, "budget_tokens"]
    assert summary_of(replies[1][1].output_text) == "Found most of it; missing Q4."
    assert replies[1][1].id.startswith("resp_lw")


def test_an_ending_for_a_structured_request_is_a_refusal(make_proxy, fake, write_policies):
    proxy = make_proxy(
        upstream=fake.url,
        policies_dir=str(write_policies(default="empty_response_max_strikes: 1\nfinalize: {use_upstream: false}\n")),
    )
    fake.script(response(message("")))
    with checked_sdk(proxy.base_url) as (client, _):
        parsed = client.responses.parse(model="m", input="Lyon?", text_format=City)

    assert parsed.output_parsed is None
    assert parsed.output[0].content[0].type == "refusal"


def test_errors_on_the_route_keep_openais_shape(proxy):
    reply = httpx.post(f"{proxy.base_url}/responses", content=b"{not json", headers={"Authorization": "Bearer sk-p"})

    assert reply.status_code == 400
    assert set(reply.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/responses/resp_123"),
        ("DELETE", "/v1/responses/resp_123"),
        ("POST", "/v1/responses/resp_123/cancel"),
        ("GET", "/v1/responses/resp_123/input_items?limit=5"),
        ("POST", "/v1/responses/input_tokens"),
        ("POST", "/v1/responses/compact"),
        ("GET", "/v1/conversations/conv_1/items"),
    ],
)
def test_the_other_responses_routes_pass_through(make_proxy, upstream, method, path):
    proxy = make_proxy()

    reply = httpx.request(method, f"{proxy.url}{path}", headers={"Authorization": "Bearer sk-p"}, content=b"{}")

    assert reply.status_code == 200
    sent = upstream.requests[0]
    assert (sent.method, sent.path + ("?" + sent.query if sent.query else "")) == (method, path)
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    family = path.split("/")[2]
    assert f'route="passthrough:{family}"' in metrics
