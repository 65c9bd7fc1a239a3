"""Which session a Responses request belongs to, and how nudges keep a stored chain valid:
X-Session-Id, then Codex's own ids, then the response chain, then the derived opening."""

from __future__ import annotations

import itertools
import json

import httpx
import openai
import pytest

from tests.support.assertions import summary_of
from tests.support.fake_responses import function_call, message, reasoning, response, text_response
from tests.support.responses_clients import checked_sdk, create, run_agent
from tests.support.responses_fixtures import fake, proxy, responses_server  # noqa: F401 (fixtures)

TOOLS = [
    {"type": "function", "name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
]
TASK = [{"role": "user", "content": "How many people live in Lyon?"}]
REQUEST = {"model": "m", "instructions": "You research.", "tools": TOOLS}


def calling(call_id: str):
    return response(reasoning("Search again."), function_call("search", '{"q": "lyon"}', call_id))


def results():
    counter = itertools.count()
    return lambda call: f"result #{next(counter)}"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_chained_run_without_any_session_id_is_one_session_and_its_loop_is_ended(proxy, fake, stream):
    fake.script(*[calling(f"c{n}") for n in range(7)], text_response("Lyon: ~520k. Missing: a source."))

    with checked_sdk(proxy.base_url) as (client, _):
        turns, headers, reply, _ = run_agent(client, results(), TASK, stream=stream, chained=True, **REQUEST)

    assert headers["x-loopwarden-terminated"] == "loop"
    assert turns <= 5
    assert summary_of(reply.output_text) == "Lyon: ~520k. Missing: a source."
    assert fake.rejections == []


def test_every_turn_of_a_chain_reports_the_session_of_its_first(proxy, fake):
    fake.script(calling("c1"), calling("c2"), text_response("Done: 522,250."))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    sessions = []
    previous = None
    new: list = list(TASK)
    for _ in range(3):
        raw = client.responses.with_raw_response.create(
            input=new, **({"previous_response_id": previous} if previous else {}), **REQUEST
        )
        sessions.append(raw.headers["x-loopwarden-session"])
        reply = raw.parse()
        previous = reply.id
        new = [
            {"type": "function_call_output", "call_id": i.call_id, "output": "r"}
            for i in reply.output
            if i.type == "function_call"
        ]

    assert len(set(sessions)) == 1
    assert sessions[0].startswith("d-")


def test_an_empty_reply_on_a_chained_request_is_retried_on_the_same_chain(proxy, fake):
    fake.script(calling("c1"), response(message("")), text_response("Lyon has 522,250 inhabitants."))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    first = client.responses.create(input=TASK, **REQUEST)

    reply = client.responses.create(
        input=[{"type": "function_call_output", "call_id": "c1", "output": "522,250"}],
        previous_response_id=first.id,
        **REQUEST,
    )

    assert reply.output_text == "Lyon has 522,250 inhabitants."
    retry = fake.agent_payloads[2]
    assert retry["previous_response_id"] == first.id  # the empty reply is nothing to chain to
    assert [item["type"] for item in retry["input"]] == ["function_call_output", "message"]
    assert fake.rejections == []


def test_a_chained_call_handed_back_is_answered_on_the_chain(proxy, fake):
    fake.script(calling("c1"), response(function_call("search", '{"q": 3', "c2")), calling("c3"))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    first = client.responses.create(input=TASK, **REQUEST)

    reply = client.responses.create(
        input=[{"type": "function_call_output", "call_id": "c1", "output": "r"}],
        previous_response_id=first.id,
        **REQUEST,
    )

    assert [item.call_id for item in reply.output if item.type == "function_call"] == ["c3"]
    retry = fake.agent_payloads[2]
    assert retry["previous_response_id"] == fake.served[1].response["id"]
    assert retry["input"][0]["type"] == "function_call_output"
    assert retry["input"][0]["call_id"] == "c2"
    assert fake.rejections == []


def test_a_chain_point_nobody_recorded_starts_a_session_of_its_own(proxy, fake):
    fake.script(text_response("Stored elsewhere."), text_response("Continued."))
    elsewhere = fake.url.removesuffix("/v1")

    stored = httpx.post(f"{elsewhere}/v1/responses", json={"model": "m", "input": "Hi"}).json()
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    raw = client.responses.with_raw_response.create(model="m", input="Go on.", previous_response_id=stored["id"])

    assert raw.headers["x-loopwarden-session"] == f"chain-{stored['id']}"
    assert raw.parse().output_text == "Continued."


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_stateless_codex_style_run_never_sends_an_unpaired_item_upstream(proxy, fake, stream):
    fake.script(
        response(
            reasoning("r1"), message("Looking.", phase="commentary"), function_call("search", '{"q": "lyon"}', "c1")
        ),
        response(reasoning("r2")),
        text_response("Lyon: 522,250."),
    )

    with checked_sdk(proxy.base_url) as (client, _):
        _, _, reply, history = run_agent(
            client, results(), TASK, stream=stream, include=["reasoning.encrypted_content"],
            extra_headers={"session_id": f"codex-{stream}"}, **REQUEST,
        )  # fmt: skip

    assert reply.output_text == "Lyon: 522,250."
    assert fake.rejections == []
    sent = json.dumps(fake.agent_payloads[-1]["input"])
    assert "r1" in sent
    assert history[2]["phase"] == "commentary"


def test_a_stream_continued_from_the_id_it_opened_with_chains_to_the_reply_that_replaced_it(proxy, fake):
    fake.script(
        response(message("Let me search."), function_call("search", '{"q": 3}', "c1")),  # streams text, then a bad call
        response(function_call("search", '{"q": "lyon"}', "c2")),
        text_response("Lyon: 522,250."),
    )
    with checked_sdk(proxy.base_url) as (client, _):
        _, first = create(client, True, input=TASK, **REQUEST)
        calls = [item.call_id for item in first.output if item.type == "function_call"]
        _, second = create(
            client,
            False,
            input=[{"type": "function_call_output", "call_id": "c2", "output": "522,250"}],
            previous_response_id=first.id,
            **REQUEST,
        )

    assert calls == ["c2"]
    assert first.id == fake.served[0].response["id"]  # the stream kept the id it opened with
    assert fake.agent_payloads[2]["previous_response_id"] == fake.served[1].response["id"]  # the server's own chain
    assert second.output_text == "Lyon: 522,250."
    assert fake.rejections == []


def test_after_a_reset_the_proxys_own_ending_is_resolved_where_the_client_refers_to_it(
    make_proxy, fake, write_policies
):
    policy = "empty_response_max_strikes: 1\nfinalize: {use_upstream: false}\n"
    proxy = make_proxy(upstream=fake.url, policies_dir=str(write_policies(default=policy)))
    fake.script(response(message("")), text_response("Picking up again."))
    client = openai.OpenAI(
        base_url=proxy.base_url, api_key="sk-p", max_retries=0, default_headers={"X-Session-Id": "ended-once"}
    )
    ending = client.responses.create(input=TASK, **REQUEST)
    httpx.delete(f"{proxy.base_url}/loopwarden/sessions/ended-once", headers={"Authorization": "Bearer sk-p"})

    reply = client.responses.create(
        input=[{"type": "item_reference", "id": ending.output[0].id}, {"role": "user", "content": "Go on."}],
        previous_response_id=ending.id,
        **REQUEST,
    )

    assert ending.id.startswith("resp_lw")
    assert reply.output_text == "Picking up again."
    sent = fake.agent_payloads[-1]
    assert "previous_response_id" not in sent
    assert sent["input"][0] == TASK[0]  # the ended request's input, carried: the upstream holds none of it
    assert sent["input"][1]["content"][0]["text"] == ending.output_text
    assert len(sent["input"]) == 3
    assert fake.rejections == []


def test_the_judge_of_a_chained_continuation_reads_the_task_its_run_began_with(proxy, fake):
    from tests.support.fake_responses import verdict

    fake.judge = lambda request: verdict(request, True)
    fake.script(calling("c1"), text_response("522,250."))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    first = client.responses.create(input=TASK, **REQUEST)

    client.responses.create(
        input=[{"type": "function_call_output", "call_id": "c1", "output": "Lyon: 522,250"}],
        previous_response_id=first.id,
        **REQUEST,
    )

    assert len(fake.judge_requests) == 1
    assert "How many people live in Lyon?" in fake.judge_requests[0].body.decode()
