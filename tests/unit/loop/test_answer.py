"""What a request answers is written in one place: the upstream's reply copied, a body the proxy
wrote (an ending in the request's answer channel), or, once a stream reached the client, an
error event; and the reply the client gets, as the guards read it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from proxy.errors import UpstreamDisconnected
from proxy.exchange import Channel, Reply, Usage
from proxy.loop.answer import Failed, Passed, Tried, Unusable, Written, delivered_reply, render
from proxy.request import SSE
from proxy.streaming.client import ClientStream
from proxy.upstream.client import UpstreamReply
from proxy.wire.chat.format import CHAT_COMPLETIONS
from tests.support.agent_request import agent_request
from tests.support.fake_upstream import chat_completion
from tests.unit.streaming.test_client import Client, chunk, raw

HEADERS = [(b"x-loopwarden-step", b"1")]
TASK = [{"role": "user", "content": "Do the task."}]
PLAIN = agent_request({"model": "m", "messages": TASK})
STREAMED = agent_request({"model": "m", "messages": TASK, "stream": True})
JSON_MODE = agent_request({"model": "m", "messages": TASK, "response_format": {"type": "json_object"}})
ENDING = chat_completion("Found X. Missing Y.")


def upstream(status: int = 200, body: dict[str, Any] | None = None) -> UpstreamReply:
    return UpstreamReply(httpx.Response(status, json=body if body is not None else chat_completion("Hi.")), 1, 0.0)


def relayed(streamed: bool = False) -> Passed:
    reply = Reply("Hi.", None, (), "stop", Usage())
    return Passed(Tried(upstream(), reply, (lambda: chat_completion("Hi.")) if streamed else None, 0.1))


def headers() -> list[tuple[bytes, bytes]]:
    return list(HEADERS)


def client_stream() -> tuple[ClientStream, Client]:
    client = Client()
    return ClientStream(client, headers, include_usage=False, keepalive=0, stream=CHAT_COMPLETIONS.stream), client


async def test_a_passed_reply_is_the_upstreams_copied_with_the_proxys_headers():
    answer = relayed()

    outcome = await render(PLAIN, None, answer, headers)

    assert (outcome.status, outcome.headers, outcome.body) == (200, HEADERS, None)
    assert outcome.upstream is answer.tried.upstream


async def test_an_unusable_reply_before_anything_streamed_is_passed_on_with_its_status():
    failed = upstream(503, {"error": {"message": "overloaded"}})

    outcome = await render(STREAMED, None, Unusable(failed), headers)

    assert (outcome.status, outcome.upstream) == (503, failed)


async def test_a_written_body_is_json_for_a_plain_request():
    outcome = await render(PLAIN, None, Written(ENDING), headers)

    assert (outcome.status, outcome.headers) == (200, HEADERS)
    assert outcome.body is not None
    assert json.loads(outcome.body) == ENDING


async def test_a_written_body_for_a_streaming_request_without_a_client_stream_is_sse():
    outcome = await render(STREAMED, None, Written(ENDING), headers)

    assert (outcome.status, outcome.content_type) == (200, SSE)
    assert outcome.body is not None
    assert outcome.body.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize(
    ("request_", "channel"),
    [(PLAIN, "content"), (JSON_MODE, "refusal")],
    ids=["text-for-a-text-request", "refusal-for-a-json-request"],
)
async def test_an_ending_is_shaped_for_the_channel_the_request_reads(request_, channel):
    outcome = await render(request_, None, Written(ENDING, shaped=True), headers)

    assert outcome.body is not None
    assert json.loads(outcome.body)["choices"][0]["message"][channel] == "Found X. Missing Y."


async def test_a_streamed_reply_that_passed_is_finished_on_the_client_stream():
    sink, client = client_stream()

    outcome = await render(STREAMED, sink, relayed(streamed=True), headers)

    assert (outcome.status, outcome.delivered) == (200, True)
    assert client.body.endswith(b"data: [DONE]\n\n")


async def test_a_written_body_replaces_the_held_attempt_on_the_client_stream():
    sink, client = client_stream()

    outcome = await render(STREAMED, sink, Written(ENDING), headers)

    assert outcome.delivered
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in client.events()) == "Found X. Missing Y."


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        pytest.param(Unusable(upstream(500, {})), "The upstream model API answered 500.", id="an-upstream-error"),
        pytest.param(Failed(UpstreamDisconnected("broke off")), "broke off", id="a-failed-stream"),
    ],
)
async def test_once_a_stream_started_a_failure_is_an_error_event_that_ends_it(answer, message):
    sink, client = client_stream()
    sink.release(Channel.TEXT)
    sink.push(raw(chunk(content="Partial.")), chunk(content="Partial."), Channel.TEXT)
    await sink.flush()  # the client already has part of the stream

    outcome = await render(STREAMED, sink, answer, headers)

    assert outcome.delivered
    assert client.events()[-1]["error"]["message"] == message


DELIVERED = [
    pytest.param(relayed(), "Hi.", id="the-upstreams-reply"),
    pytest.param(Written(ENDING), "Found X. Missing Y.", id="a-written-body-read-back"),
    pytest.param(Unusable(upstream(500, {})), None, id="no-reply-for-an-error"),
    pytest.param(Failed(UpstreamDisconnected("x")), None, id="no-reply-for-a-failure"),
]


@pytest.mark.parametrize(("answer", "content"), DELIVERED)
def test_the_reply_the_client_gets_is_read_as_the_guards_read_it(answer, content):
    reply = delivered_reply(PLAIN, answer)

    assert (reply.content if reply is not None else None) == content


def test_a_shaped_ending_is_read_in_the_channel_it_goes_out_in():
    reply = delivered_reply(JSON_MODE, Written(ENDING, shaped=True))

    assert reply is not None
    assert (reply.content, reply.refusal) == (None, "Found X. Missing Y.")
