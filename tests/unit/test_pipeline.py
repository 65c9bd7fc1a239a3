"""The pipeline's decisions, with a scripted transport and the in-memory store (no HTTP)."""

from __future__ import annotations

import json

import httpx
import msgspec
import pytest

from proxy.guards import default_request_guards, default_response_guards
from proxy.metrics import Metrics
from proxy.pipeline import ChatCall, Pipeline
from proxy.policy.models import Policy
from proxy.session.identity import identify
from proxy.session.memory import MemoryStore
from proxy.settings import Settings
from proxy.upstream import UpstreamClient
from proxy.wire.chat_completions import parse_conversation
from tests.support.fake_upstream import chat_completion

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "Do the task."}]}


class Script:
    """A transport answering from a list of (status, body) and recording request bodies."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.bodies: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        status, body = self.replies.pop(0)
        return httpx.Response(status, content=body if isinstance(body, bytes) else json.dumps(body).encode())


def make(script: Script, policy: Policy | None = None, session: str | None = "s1"):
    store = MemoryStore()
    upstream = UpstreamClient(Settings(upstream="http://up/v1", retry_attempts=1), httpx.MockTransport(script))
    pipeline = Pipeline(upstream, store, Metrics(), default_request_guards(), default_response_guards())
    policy = policy or Policy()
    conversation = parse_conversation(PAYLOAD)

    def call(payload=PAYLOAD):
        return ChatCall(
            tenant="t",
            policy=policy,
            session=identify("t", conversation, session, None),
            payload=payload,
            body=msgspec.json.encode(payload),
            conversation=conversation,
            url="http://up/v1/chat/completions",
            headers=[],
            stream=False,
        )

    return pipeline, store, call


def header(outcome, name: str) -> str | None:
    return next((v.decode() for k, v in outcome.headers if k == name.encode()), None)


EMPTY = (200, chat_completion(None))
GOOD = (200, chat_completion("Done properly."))


async def test_running_out_of_attempts_ends_with_the_strike_reason():
    script = Script(EMPTY, EMPTY, GOOD)
    pipeline, _, call = make(script, Policy(max_attempts=2, empty_response_max_strikes=5))

    outcome = await pipeline.run(call())

    assert header(outcome, "x-loopwarden-terminated") == "empty_response"
    assert len(script.bodies) == 3  # two attempts, then the summary call


async def test_nudges_accumulate_in_the_retried_request():
    script = Script(EMPTY, EMPTY, GOOD)
    pipeline, _, call = make(script)

    await pipeline.run(call())

    assert [m["role"] for m in script.bodies[2]["messages"]] == ["user", "user", "user"]
    assert script.bodies[2]["messages"][1] == script.bodies[2]["messages"][2]


async def test_upstream_error_is_returned_unguarded_and_costs_no_step():
    error = {"error": {"message": "no", "type": "invalid_request_error", "param": None, "code": None}}
    script = Script((400, error))
    pipeline, store, call = make(script)

    outcome = await pipeline.run(call())

    assert outcome.upstream is not None
    assert outcome.upstream.response.status_code == 400
    assert (await store.load(call().session.key)).steps == 0


async def test_a_reply_that_is_not_a_chat_completion_passes_through():
    script = Script((200, b"not json at all"))
    pipeline, _, call = make(script)

    outcome = await pipeline.run(call())

    assert outcome.upstream.response.content == b"not json at all"
    assert header(outcome, "x-loopwarden-interventions") == "none"


async def test_usage_and_steps_are_committed():
    script = Script(EMPTY, GOOD)
    pipeline, store, call = make(script)

    await pipeline.run(call())
    state = await store.load(call().session.key)

    assert (state.steps, state.turns) == (2, 1)
    assert (state.counter("tokens_in"), state.counter("tokens_out")) == (22, 14)


async def test_shadow_mode_does_not_end_a_session_over_its_step_limit():
    script = Script(GOOD, GOOD, GOOD)
    pipeline, _, call = make(script, Policy(mode="shadow", max_steps=1))

    outcomes = [await pipeline.run(call()) for _ in range(3)]

    assert [header(o, "x-loopwarden-terminated") for o in outcomes] == [None, None, None]
    assert header(outcomes[2], "x-loopwarden-shadow") == "finalize_budget_steps"


async def test_local_summary_when_policy_says_so():
    script = Script(EMPTY, EMPTY, EMPTY)
    pipeline, _, call = make(script, Policy(finalize={"use_upstream": False}))

    outcome = await pipeline.run(call())

    assert len(script.bodies) == 3
    assert "What was found" in json.loads(outcome.body)["choices"][0]["message"]["content"]


@pytest.mark.parametrize("steps", [1, 2])
async def test_step_limit_is_checked_before_each_nudge(steps):
    script = Script(EMPTY, EMPTY, EMPTY, GOOD)
    pipeline, _, call = make(script, Policy(max_steps=steps))

    outcome = await pipeline.run(call())

    assert header(outcome, "x-loopwarden-terminated") == "budget_steps"
    assert len(script.bodies) == steps + 1
