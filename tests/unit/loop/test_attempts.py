"""One streamed attempt against the scripted fake upstream (a real HTTP server): what it asks the
upstream, what it assembles, what reaches the client, and what a stream that does not finish costs."""

from __future__ import annotations

import asyncio
import json

import pytest

from proxy.books.ledger import Ledger
from proxy.books.pricing import PriceTable
from proxy.errors import UpstreamDisconnected, UpstreamMalformed
from proxy.exchange import Note, Reply, Usage
from proxy.guards import GuardContext, OutputContractGuard
from proxy.loop.attempts import Attempts
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy
from proxy.session.base import SessionDelta, SessionState
from proxy.session.memory import MemoryStore
from proxy.settings import Settings
from proxy.streaming.client import ClientStream
from proxy.upstream.client import UpstreamClient
from tests.support.agent_request import TASK, agent_request
from tests.support.fake_upstream import Json, Sse, chat_completion, streamed

STREAM = {**TASK, "stream": True}
SCHEMA = {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]}
ANSWER = "Hello there, all done."


class Client:
    """What the ASGI server would have sent the agent."""

    def __init__(self) -> None:
        self.messages: list[dict] = []

    async def __call__(self, message: dict) -> None:
        self.messages.append(message)

    def text(self) -> str:
        """The text of every content delta the agent received."""
        body = b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body")
        events = [json.loads(line[6:]) for line in body.split(b"\n") if line.startswith(b"data: {")]
        return "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))


class Attempt:
    """A streamed attempt's parts: the attempts, the agent's stream, the session's delta, the metrics."""

    def __init__(self, upstream_url: str, payload: dict, policy: Policy | None = None) -> None:
        self.metrics = Metrics()
        self.upstream = UpstreamClient(Settings(upstream=upstream_url, retry_attempts=1))
        ledger = Ledger(MemoryStore(), self.metrics, PriceTable({}), lambda: 0.0)
        self.attempts = Attempts(self.upstream, ledger, self.metrics, [OutputContractGuard()])
        self.call = agent_request(payload, policy, url=f"{upstream_url}/chat/completions")
        self.client = Client()
        self.stream = ClientStream(
            self.client, list, include_usage=self.call.include_usage(), keepalive=0, stream=self.call.wire.stream
        )
        self.delta = SessionDelta()

    async def run(self, extra=()):
        context = GuardContext(self.call.policy, SessionState(), self.call.conversation)
        try:
            return await self.attempts.attempt(
                self.call, self.call.payload, list(extra), self.stream, context, self.delta
            )
        finally:
            await self.stream.flush()  # what the attempt let through (the next write would carry it)
            self.stream.close()
            await self.upstream.aclose()


@pytest.fixture
def attempt(upstream):
    def make(payload: dict = STREAM, policy: Policy | None = None) -> Attempt:
        return Attempt(upstream.url, payload, policy)

    return make


async def test_a_streamed_reply_is_assembled_with_the_usage_the_upstream_reported(upstream, attempt):
    upstream.script(streamed(chat_completion(ANSWER, model="m-1")))

    reply_from, reply, assembler = await attempt().run()

    assert reply == Reply(ANSWER, None, (), "stop", Usage(11, 7), model="m-1")
    assert reply_from.response.status_code == 200
    assert assembler is not None


async def test_the_upstream_is_asked_for_usage_even_when_the_agent_did_not(upstream, attempt):
    upstream.script(streamed(chat_completion(ANSWER)))

    await attempt().run()

    assert upstream.requests[0].json() == {**STREAM, "stream_options": {"include_usage": True}}


async def test_a_request_that_asks_for_usage_goes_upstream_as_it_came(upstream, attempt):
    upstream.script(streamed(chat_completion(ANSWER)))
    run = attempt({**STREAM, "stream_options": {"include_usage": True}})

    await run.run()

    assert upstream.requests[0].body == run.call.body


async def test_the_turns_of_a_nudge_go_upstream_with_the_request(upstream, attempt):
    upstream.script(streamed(chat_completion(ANSWER)))

    await attempt().run([Note("Continue the task.")])

    sent = upstream.requests[0].json()
    assert sent["messages"] == [*TASK["messages"], {"role": "user", "content": "Continue the task."}]
    assert sent["stream_options"] == {"include_usage": True}


async def test_text_no_guard_holds_reaches_the_agent_while_it_streams(upstream, attempt):
    upstream.script(streamed(chat_completion(ANSWER)))
    run = attempt()

    await run.run()

    assert run.client.text() == ANSWER


@pytest.mark.parametrize(
    ("mode", "received", "holding"),
    [("enforce", "", True), ("shadow", '{"n": "x"}', False)],
    ids=["held-when-enforced", "shadow-mode-holds-nothing"],
)
async def test_text_a_guard_holds_waits_for_the_verdict(upstream, attempt, mode, received, holding):
    upstream.script(streamed(chat_completion('{"n": "x"}')))
    payload = {**STREAM, "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}}
    run = attempt(payload, Policy(mode=mode))

    await run.run()

    assert (run.client.text(), run.stream.holding) == (received, holding)


async def test_a_reply_without_a_usage_chunk_is_estimated_and_counted(upstream, attempt):
    upstream.script(streamed(chat_completion(ANSWER), usage=False))
    run = attempt()

    _, reply, assembler = await run.run()

    sent = len(upstream.requests[0].body)
    assert reply.usage == Usage(sent // 4, assembler.produced_chars // 4 + 1)
    assert run.metrics.usage_estimated.labels(run.call.tenant, "default", "no_usage_chunk")._value.get() == 1


async def test_an_upstream_that_ignores_stream_is_read_as_one_reply(upstream, attempt):
    upstream.script(Json(chat_completion("Whole, not streamed.")))

    _, reply, assembler = await attempt().run()

    assert reply == Reply("Whole, not streamed.", None, (), "stop", Usage(11, 7), model="fake-model")
    assert assembler is None


async def test_an_upstream_error_comes_back_read_and_unparsed(upstream, attempt):
    error = {"error": {"message": "bad request", "type": "invalid_request_error"}}
    upstream.script(Json(error, status=400))

    reply_from, reply, assembler = await attempt().run()

    assert (reply_from.response.status_code, reply, assembler) == (400, None, None)
    assert json.loads(reply_from.response.content) == error


@pytest.mark.parametrize(
    ("script", "error", "reason"),
    [
        pytest.param(
            lambda events: Sse(events[:3], done=False), UpstreamDisconnected, "upstream_disconnected", id="cut-short"
        ),
        pytest.param(
            lambda events: Sse([*events[:3], "not json"]), UpstreamMalformed, "upstream_malformed", id="malformed"
        ),
    ],
)
async def test_a_stream_that_does_not_finish_fails_and_still_costs_its_step_and_tokens(
    upstream, attempt, script, error, reason
):
    upstream.script(script(streamed(chat_completion(ANSWER)).events))
    run = attempt()

    with pytest.raises(error):
        await run.run()

    sent = len(upstream.requests[0].body)
    assert run.delta.increments["steps"] == 1
    assert run.delta.increments["tokens_in"] == sent // 4  # estimated: no usage came
    assert run.metrics.stream_failures.labels(run.call.tenant, "default", reason)._value.get() == 1


async def test_an_agent_that_leaves_mid_stream_still_pays_for_the_step(upstream, attempt):
    events = streamed(chat_completion(ANSWER)).events
    upstream.script(Sse(events, delay=0.2))
    run = attempt()
    running = asyncio.ensure_future(run.run())
    while not run.client.text():  # the first words reached the agent
        await asyncio.sleep(0.01)

    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running

    assert run.delta.increments["steps"] == 1
    assert run.metrics.stream_failures.labels(run.call.tenant, "default", "client_disconnected")._value.get() == 1
