"""The pipeline's decisions, with a scripted transport and the in-memory store (no HTTP)."""

from __future__ import annotations

import asyncio
import json

import httpx
import msgspec
import pytest

from proxy.books.pricing import Price, PriceTable
from proxy.errors import RateLimited
from proxy.exchange import Reply
from proxy.guards.base import ResponseGuard
from proxy.loop.build import build_pipeline
from proxy.loop.pipeline import Pipeline
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy
from proxy.request import AgentRequest
from proxy.session.base import SessionDelta
from proxy.session.identity import identify
from proxy.session.memory import MemoryStore
from proxy.settings import Settings
from proxy.upstream.client import UpstreamClient
from proxy.verdict import Pass, Rewrite
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.chat.parse import parse_conversation
from proxy.wire.registry import format_named
from tests.support.fake_upstream import chat_completion
from tests.support.waiting import PATIENCE_SECS

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


def make(
    script: Script,
    policy: Policy | None = None,
    session: str | None = "s1",
    clock=None,
    prices=None,
    ending_wait_secs: float = 1.0,
):
    store = MemoryStore()
    upstream = UpstreamClient(Settings(upstream="http://up/v1", retry_attempts=1), httpx.MockTransport(script))
    pipeline = build_pipeline(
        upstream,
        store,
        Metrics(),
        formats=format_named,
        clock=clock or (lambda: 1_800_000_000.0),
        prices=prices,
        ending_wait_secs=ending_wait_secs,
    )
    policy = policy or Policy()
    conversation = parse_conversation(PAYLOAD)

    def new_request(payload=PAYLOAD, **extra):
        return AgentRequest(
            tenant="t",
            policy=policy,
            session=identify("t", conversation, session, None),
            payload=payload,
            body=msgspec.json.encode(payload),
            conversation=parse_conversation(payload),
            url="http://up/v1/chat/completions",
            headers=[],
            stream=False,
            wire=CHAT_COMPLETIONS,
            **extra,
        )

    return pipeline, store, new_request


def header(outcome, name: str) -> str | None:
    return next((v.decode() for k, v in outcome.headers if k == name.encode()), None)


EMPTY = (200, chat_completion(None))
GOOD = (200, chat_completion("Done properly."))


async def test_running_out_of_attempts_ends_with_the_strike_reason():
    script = Script(EMPTY, EMPTY, GOOD)
    pipeline, _, new_request = make(script, Policy(max_attempts=2, empty_response_max_strikes=5))

    outcome = await pipeline.run(new_request())

    assert header(outcome, "x-loopwarden-terminated") == "empty_response"
    assert len(script.bodies) == 3  # two attempts, then the summary call


async def test_running_out_of_attempts_on_other_corrections_ends_as_max_attempts():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    payload = {**PAYLOAD, "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}}
    script = Script((200, chat_completion('{"n": "x"}')), (200, chat_completion('{"n": "y"}')), GOOD)
    pipeline, _, new_request = make(script, Policy(max_attempts=2))

    outcome = await pipeline.run(new_request(payload))

    assert header(outcome, "x-loopwarden-terminated") == "max_attempts"


async def test_nudges_accumulate_in_the_retried_request():
    script = Script(EMPTY, EMPTY, GOOD)
    pipeline, _, new_request = make(script)

    await pipeline.run(new_request())

    assert [m["role"] for m in script.bodies[2]["messages"]] == ["user", "user", "user"]
    assert script.bodies[2]["messages"][1] == script.bodies[2]["messages"][2]


async def test_upstream_error_is_returned_unguarded_and_costs_no_step():
    error = {"error": {"message": "no", "type": "invalid_request_error", "param": None, "code": None}}
    script = Script((400, error))
    pipeline, store, new_request = make(script)

    outcome = await pipeline.run(new_request())

    assert outcome.upstream is not None
    assert outcome.upstream.response.status_code == 400
    assert (await store.load(new_request().session.key)).steps == 0


async def test_a_reply_that_is_not_a_chat_completion_passes_through():
    script = Script((200, b"not json at all"))
    pipeline, _, new_request = make(script)

    outcome = await pipeline.run(new_request())

    assert outcome.upstream.response.content == b"not json at all"
    assert header(outcome, "x-loopwarden-interventions") == "none"


async def test_usage_and_steps_are_committed():
    script = Script(EMPTY, GOOD)
    pipeline, store, new_request = make(script)

    await pipeline.run(new_request())
    state = await store.load(new_request().session.key)

    assert (state.steps, state.turns) == (2, 1)
    assert (state.counter("tokens_in"), state.counter("tokens_out")) == (22, 14)


async def test_shadow_mode_does_not_end_a_session_over_its_step_limit():
    script = Script(GOOD, GOOD, GOOD)
    pipeline, _, new_request = make(script, Policy(mode="shadow", max_steps=1))

    outcomes = [await pipeline.run(new_request()) for _ in range(3)]

    assert [header(o, "x-loopwarden-terminated") for o in outcomes] == [None, None, None]
    assert header(outcomes[2], "x-loopwarden-shadow") == "finalize_budget_steps"


async def test_local_summary_when_policy_says_so():
    script = Script(EMPTY, EMPTY, EMPTY)
    pipeline, _, new_request = make(script, Policy(finalize={"use_upstream": False}))

    outcome = await pipeline.run(new_request())

    assert len(script.bodies) == 3
    assert "What was found" in json.loads(outcome.body)["choices"][0]["message"]["content"]


@pytest.mark.parametrize("steps", [1, 2])
async def test_step_limit_is_checked_before_each_nudge(steps):
    script = Script(EMPTY, EMPTY, EMPTY, GOOD)
    pipeline, _, new_request = make(script, Policy(max_steps=steps))

    outcome = await pipeline.run(new_request())

    assert header(outcome, "x-loopwarden-terminated") == "budget_steps"
    assert len(script.bodies) == steps  # the summary call is the last step


# -- budgets -------------------------------------------------------------------------------


class Clock:
    """An injectable clock: tests move time, nothing sleeps."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def reply_using(prompt: int, completion: int, text: str = "Working on it.", model: str = "gpt-4o"):
    body = chat_completion(text, model=model)
    body["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return (200, body)


async def test_token_budget_ends_the_session_gracefully():
    script = Script(reply_using(600, 400), reply_using(0, 0, "Summary of what was found."))
    policy = Policy(budgets={"max_tokens": 1000, "reserve_tokens": 50}, finalize={"max_tokens": 16})
    pipeline, _, new_request = make(script, policy)

    first = await pipeline.run(new_request({**PAYLOAD, "max_tokens": 50}))
    second = await pipeline.run(new_request({**PAYLOAD, "max_tokens": 50}))

    assert header(first, "x-loopwarden-budget-remaining") == "steps=49;tokens=0"
    assert header(second, "x-loopwarden-terminated") == "budget_tokens"
    told = json.loads(second.body)["choices"][0]["message"]["content"]
    assert told.startswith("LoopWarden stopped this run (budget_tokens)")
    assert told.endswith("\n\nSummary of what was found.")


async def test_a_call_that_would_not_fit_is_not_made():
    script = Script(reply_using(100, 100), reply_using(0, 0, "Summary."))
    pipeline, _, new_request = make(script, Policy(budgets={"max_tokens": 1000}, finalize={"max_tokens": 500}))
    await pipeline.run(new_request({**PAYLOAD, "max_tokens": 100}))

    outcome = await pipeline.run(new_request({**PAYLOAD, "max_tokens": 900}))  # 800 left, 900 + prompt needed

    assert header(outcome, "x-loopwarden-terminated") == "budget_tokens"
    assert len(script.bodies) == 2  # the refused call never went upstream: only the summary did
    assert script.bodies[-1]["max_tokens"] == 500  # the summary call is capped at finalize.max_tokens


async def test_reservations_are_settled_whatever_the_outcome():
    script = Script(reply_using(10, 10))
    pipeline, store, new_request = make(script, Policy(budgets={"max_tokens": 10_000}))

    await pipeline.run(new_request())

    assert (await store.load(new_request().session.key)).counter("reserved_tokens") == 0


async def test_cost_budget_uses_the_price_table_and_a_hard_cap_summarizes_locally():
    prices = PriceTable({"gpt-4o": Price(prompt=2.5, completion=10.0)})
    policy = Policy(budgets={"max_cost_usd": 0.01, "hard_cost_cap": True})
    script = Script(reply_using(2000, 600))  # 2000*2.5 + 600*10 = 11,000 micro-dollars
    pipeline, store, new_request = make(script, policy, prices=prices)
    payload = {**PAYLOAD, "model": "gpt-4o", "max_tokens": 10}

    await pipeline.run(new_request(payload))
    ending = await pipeline.run(new_request(payload))

    assert (await store.load(new_request().session.key)).counter("cost_micros") == 11_000
    assert header(ending, "x-loopwarden-terminated") == "budget_cost"
    assert len(script.bodies) == 1  # the hard cap forbade even the summary call
    assert "What was found" in json.loads(ending.body)["choices"][0]["message"]["content"]


async def test_unpriced_model_is_counted_as_unknown():
    pipeline, store, new_request = make(Script(reply_using(10, 10, model="my-llama")), prices=PriceTable({}))

    await pipeline.run(new_request())

    state = await store.load(new_request().session.key)
    assert (state.counter("unpriced_calls"), state.counter("cost_micros")) == (1, 0)


async def test_active_time_does_not_count_a_human_pause():
    clock = Clock()
    policy = Policy(budgets={"max_active_secs": 100, "idle_gap_secs": 120})
    script = Script(reply_using(1, 1), reply_using(1, 1), reply_using(1, 1), reply_using(0, 0, "Time is up."))
    pipeline, _store, new_request = make(script, policy, clock=clock)

    await pipeline.run(new_request())
    clock.now += 20  # the agent thinks for 20 s: counted
    await pipeline.run(new_request())
    clock.now += 3600  # a human approves after an hour: not counted
    third = await pipeline.run(new_request())
    clock.now += 60  # 80 of 100 s used, and a step takes about 27 s: the next would not fit
    fourth = await pipeline.run(new_request())

    assert header(third, "x-loopwarden-budget-remaining") == "steps=47;seconds=80"
    assert header(fourth, "x-loopwarden-terminated") == "budget_time"


async def test_low_budget_adds_a_converge_note_to_the_request():
    script = Script(reply_using(850, 0), reply_using(10, 10, "Final answer."))
    policy = Policy(budgets={"max_tokens": 1000, "reserve_tokens": 10}, finalize={"max_tokens": 16})
    pipeline, _, new_request = make(script, policy)
    await pipeline.run(new_request({**PAYLOAD, "max_tokens": 10}))

    outcome = await pipeline.run(new_request({**PAYLOAD, "max_tokens": 10}))

    assert header(outcome, "x-loopwarden-interventions") == "budget_note"
    note = script.bodies[1]["messages"][-1]
    assert note["role"] == "user"
    assert "150 of 1000 tokens left" in note["content"]


async def test_a_budget_ending_caps_the_summary_call_even_without_a_client_limit():
    script = Script(reply_using(900, 100), reply_using(0, 0, "Summary."))
    pipeline, _, new_request = make(script, Policy(budgets={"max_tokens": 2000, "reserve_tokens": 10}))
    await pipeline.run(new_request())

    await pipeline.run(new_request())

    assert script.bodies[-1]["max_tokens"] == Policy().finalize.max_tokens


async def test_tenant_cost_cap_refuses_with_a_retry_after_and_releases_the_session_reservation():
    prices = PriceTable({"gpt-4o": Price(prompt=2.5, completion=10.0)})
    script = Script(reply_using(2000, 600))  # 11,000 micro-dollars
    pipeline, store, new_request = make(script, Policy(budgets={"max_tokens": 100_000}), prices=prices)
    payload = {**PAYLOAD, "model": "gpt-4o", "max_tokens": 100}

    await pipeline.run(new_request(payload, daily_cost_usd=0.012))
    with pytest.raises(RateLimited) as refused:
        await pipeline.run(new_request(payload, daily_cost_usd=0.012))

    assert 0 < int(refused.value.headers["Retry-After"]) <= 86_400
    assert (await store.load(new_request().session.key)).counter("reserved_tokens") == 0
    assert len(script.bodies) == 1


# -- one ending per session -----------------------------------------------------------------

NOW_MS = 1_800_000_000_000


async def _ended_budget(store, key: str, steps: int) -> None:
    from proxy.session.base import SessionDelta

    spent = SessionDelta()
    spent.incr("steps", steps)
    await store.commit(key, spent, 3600)


async def test_when_another_requests_ending_does_not_come_in_time_a_request_answers_locally_without_a_call():
    from proxy.session.base import Claim

    script = Script()
    pipeline, store, new_request = make(script, Policy(max_steps=2), ending_wait_secs=0.2)
    key = new_request().session.key
    await _ended_budget(store, key, 2)
    assert (await store.claim_ending(key, Claim(NOW_MS, 60_000), 3600)).claimed  # another request's claim

    outcome = await pipeline.run(new_request())

    assert script.bodies == []
    assert header(outcome, "x-loopwarden-terminated") == "budget_steps"
    assert "What was found" in json.loads(outcome.body)["choices"][0]["message"]["content"]
    assert (await store.load(key)).ending is None  # the claimer stores the ending, not this request


async def test_a_claimer_cancelled_mid_summary_gives_the_claim_back():
    import asyncio

    entered = asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        entered.set()
        await asyncio.sleep(30)
        return httpx.Response(200, json=chat_completion("never"))

    pipeline, store, new_request = make(hang, Policy(max_steps=1))
    key = new_request().session.key
    await _ended_budget(store, key, 1)

    running = asyncio.create_task(pipeline.run(new_request()))
    await asyncio.wait_for(entered.wait(), PATIENCE_SECS)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running

    state = await store.load(key)
    assert state.counter("ending_claim") == 0
    assert state.ending is None


async def _later(seconds: float, action) -> None:
    import asyncio

    await asyncio.sleep(seconds)
    await action


async def test_a_request_waits_for_the_ending_another_request_is_making_and_answers_with_it():
    import asyncio

    from proxy.session.base import Claim, SessionDelta

    script = Script()
    pipeline, store, new_request = make(script, Policy(max_steps=2))
    key = new_request().session.key
    await _ended_budget(store, key, 2)
    await store.claim_ending(key, Claim(NOW_MS, 60_000), 3600)
    stored = SessionDelta()
    stored.assign("termination", "budget_steps")
    stored.assign("ending", json.dumps(chat_completion("The ending the claimer made.")))

    outcome, _ = await asyncio.gather(pipeline.run(new_request()), _later(0.1, store.commit(key, stored, 3600)))

    assert script.bodies == []
    assert json.loads(outcome.body)["choices"][0]["message"]["content"] == "The ending the claimer made."
    assert header(outcome, "x-loopwarden-terminated") == "budget_steps"


async def test_a_waiting_request_takes_a_claim_given_back_and_makes_the_ending_itself():
    import asyncio

    from proxy.session.base import Claim, SessionDelta

    script = Script((200, chat_completion("Summary made by the second request.")))
    pipeline, store, new_request = make(script, Policy(max_steps=2))
    key = new_request().session.key
    await _ended_budget(store, key, 2)
    await store.claim_ending(key, Claim(NOW_MS, 60_000), 3600)
    given_back = SessionDelta()
    given_back.assign("ending_claim", 0)

    outcome, _ = await asyncio.gather(pipeline.run(new_request()), _later(0.1, store.commit(key, given_back, 3600)))

    assert len(script.bodies) == 1
    assert json.loads(outcome.body)["choices"][0]["message"]["content"].endswith("Summary made by the second request.")
    assert (await store.load(key)).ending is not None


async def test_an_output_limit_that_alone_costs_more_than_the_cost_budget_is_a_400():
    from proxy.errors import InvalidRequest

    prices = PriceTable({"gpt-4o": Price(prompt=2.5, completion=10.0)})  # $0.01 buys 1,000 output tokens
    script = Script()
    pipeline, store, new_request = make(script, Policy(budgets={"max_cost_usd": 0.01}), prices=prices)

    with pytest.raises(InvalidRequest) as refused:
        await pipeline.run(new_request({**PAYLOAD, "model": "gpt-4o", "max_completion_tokens": 2000}))

    assert refused.value.param == "max_completion_tokens"
    assert "at most 1000" in refused.value.message
    assert script.bodies == []
    assert (await store.load(new_request().session.key)).is_new


class _Redacting(ResponseGuard):
    """A reply guard that replaces every text reply with a neutral one of its own."""

    def check_reply(self, reply, context):
        if not reply.has_text:
            return Pass()
        return Rewrite("redacted", "a secret in the answer", Reply("[redacted]", None, (), "stop", reply.usage))


async def test_a_rewrite_reaches_the_agent_in_its_wire_format():
    script = Script(GOOD)
    upstream = UpstreamClient(Settings(upstream="http://up/v1", retry_attempts=1), httpx.MockTransport(script))
    pipeline = Pipeline(
        upstream, MemoryStore(), Metrics(), [], [_Redacting()], format_named, clock=lambda: 1_800_000_000.0
    )
    _, _, new_request = make(Script())

    outcome = await pipeline.run(new_request())

    body = json.loads(outcome.body)
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "[redacted]"}
    assert header(outcome, "x-loopwarden-interventions") == "redacted"


# -- a request cancelled because its client left still writes what it used, whole -------------


class SlowCommits(MemoryStore):
    """Commits that take a while (a Redis round trip), saying when one has begun."""

    in_process = False  # its commits suspend, as a remote store's do

    def __init__(self) -> None:
        super().__init__()
        self.writing = asyncio.Event()

    async def commit(self, key: str, delta: SessionDelta, ttl_seconds: int):
        self.writing.set()
        await asyncio.sleep(0.05)
        return await super().commit(key, delta, ttl_seconds)


def completion(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=msgspec.json.encode(chat_completion("Done properly.")))


async def test_a_request_cancelled_while_it_commits_still_writes_its_usage():
    store = SlowCommits()
    upstream = UpstreamClient(Settings(upstream="http://up/v1"), httpx.MockTransport(completion))
    pipeline = build_pipeline(upstream, store, Metrics(), formats=format_named)
    conversation = parse_conversation(PAYLOAD)
    request = AgentRequest(
        tenant="t",
        policy=Policy(),
        session=identify("t", conversation, "s1", None),
        payload=PAYLOAD,
        body=msgspec.json.encode(PAYLOAD),
        conversation=conversation,
        url="http://up/v1/chat/completions",
        headers=[],
        stream=False,
        wire=CHAT_COMPLETIONS,
    )

    running = asyncio.ensure_future(pipeline.run(request))
    await store.writing.wait()
    running.cancel()  # the client left just as the reply was being booked
    await asyncio.gather(running, return_exceptions=True)
    await asyncio.sleep(0.1)

    state = await MemoryStore.load(store, request.session.key)
    assert state.steps == 1
    assert state.counter("tokens_in") == 11


# -- who decided ------------------------------------------------------------------------------


async def timeline_of(store: MemoryStore, key: str) -> list[tuple[str, dict]]:
    page = await store.timeline(key, 0, 100)
    return [(event.kind, dict(event.fields)) for _, event in page.events]


async def test_an_intervention_names_the_guard_that_decided_and_what_it_did():
    pipeline, store, new_request = make(Script(EMPTY, GOOD))

    await pipeline.run(new_request())

    [intervention] = [f for kind, f in await timeline_of(store, new_request().session.key) if kind == "intervention"]
    assert (intervention["guard"], intervention["action"]) == ("empty_reply", "empty_nudge")


async def test_an_ending_names_the_guard_whose_verdict_ended_the_run():
    policy = Policy(max_attempts=2, empty_response_max_strikes=5)
    pipeline, store, new_request = make(Script(EMPTY, EMPTY, GOOD), policy)

    await pipeline.run(new_request())

    [ending] = [f for kind, f in await timeline_of(store, new_request().session.key) if kind == "ending"]
    assert (ending["reason"], ending["guard"]) == ("empty_response", "empty_reply")


async def test_a_spent_budget_ending_is_the_budget_guards():
    pipeline, store, new_request = make(Script(GOOD, GOOD, GOOD), Policy(max_steps=1))

    await pipeline.run(new_request())
    await pipeline.run(new_request())

    endings = [f for kind, f in await timeline_of(store, new_request().session.key) if kind == "ending"]
    assert [(f["reason"], f["guard"]) for f in endings] == [("budget_steps", "budget")]
