"""The graceful ending: a summary from the model when it can give one, a summary built here when it
cannot, and, when another request of the session makes the ending, the stored one replayed."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from proxy.books.ledger import Ledger
from proxy.books.pricing import Price, PriceTable
from proxy.exchange import Conversation, Message, Note, ToolCall, Usage
from proxy.loop.finalize import Endings, Finalizer, local_summary
from proxy.observe.metrics import Metrics
from proxy.observe.tracing import Tracing
from proxy.policy.models import Policy
from proxy.request import RequestNotes
from proxy.session.base import Claim, SessionDelta, SessionState
from proxy.session.memory import MemoryStore
from proxy.settings import Settings
from proxy.upstream.client import UpstreamClient
from proxy.verdict import Finalize
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.registry import format_named
from tests.support.agent_request import agent_request
from tests.support.fake_upstream import chat_completion

T0 = 1_800_000_000.0
TASK = "Find the cheapest flight from Lyon to Oslo."
PAYLOAD = {
    "model": "m",
    "messages": [
        {"role": "user", "content": TASK},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "LYS-OSL 129 EUR"},
    ],
    "tools": [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}],
    "response_format": {"type": "json_object"},
}
LOOP = Finalize(
    "loop", "the model repeated search({}) 5 times", evidence="search was called 5 times with the same arguments"
)
LOOP_NOTICE = (
    "LoopWarden stopped this run (loop): search was called 5 times with the same arguments. "
    "Send a new instruction to continue."
)
SUMMARY = "Found LYS-OSL at 129 EUR; not yet checked other dates."


class Upstream:
    """The model API: answers each request from a script (a status and a body, or an exception)."""

    def __init__(self, *answers: tuple[int, Any] | Exception) -> None:
        self.answers = list(answers)
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, body = answer
        return httpx.Response(status, json=body)

    def client(self) -> UpstreamClient:
        return UpstreamClient(Settings(upstream="http://up/v1", retry_attempts=1), httpx.MockTransport(self))


def content(body: dict[str, Any]) -> str:
    return body["choices"][0]["message"]["content"]


def without_identity(body: dict[str, Any]) -> dict[str, Any]:
    """An ending as a client reads it: its id and creation time left out (they are new each time)."""
    return {key: value for key, value in body.items() if key not in ("id", "created")}


def local(detail: str, notice: str | None = None) -> dict[str, Any]:
    """The summary built here, with the ending's notice first (the default policy's place)."""
    conversation = agent_request(PAYLOAD).conversation
    summary = local_summary(conversation, detail)
    summary = f"{notice}\n\n{summary}" if notice else summary
    return without_identity(CHAT_COMPLETIONS.codec.ending(summary, model="m"))


async def end(upstream: Upstream, policy: Policy | None = None, **options: bool):
    request = agent_request(PAYLOAD, policy)
    return await Finalizer(upstream.client()).end(
        LOOP,
        request.policy,
        request.wire.codec,
        request.payload,
        [],
        request.conversation,
        request.url,
        request.headers,
        **options,
    )


# -- the ending reply -----------------------------------------------------------------------


async def test_the_model_summarizes_when_it_can():
    upstream = Upstream((200, chat_completion(SUMMARY, model="m-2025")))

    ending = await end(upstream)

    usage = Usage(11, 7)
    expected = without_identity(CHAT_COMPLETIONS.codec.ending(SUMMARY, model="m-2025", usage=usage))
    assert (without_identity(ending.body), ending.via, ending.usage, ending.upstream_called) == (
        expected,
        "upstream",
        usage,
        True,
    )


async def test_the_summary_call_forbids_tools_drops_the_answer_format_and_says_why():
    upstream = Upstream((200, chat_completion(SUMMARY)))

    await end(upstream)

    (sent,) = upstream.bodies
    assert sent["tool_choice"] == "none"
    assert "response_format" not in sent
    instruction = f"{Policy().finalize.instruction} (The session is ending because {LOOP.detail}.)"
    assert sent["messages"][-1] == {"role": "user", "content": instruction}
    assert sent["messages"][:-1] == PAYLOAD["messages"]


@pytest.mark.parametrize(("cap", "sent_cap"), [(True, 1024), (False, None)], ids=["capped", "as-the-client-asked"])
async def test_a_budget_ending_caps_the_summary_calls_output(cap, sent_cap):
    upstream = Upstream((200, chat_completion(SUMMARY)))

    await end(upstream, cap_output=cap)

    assert upstream.bodies[0].get("max_tokens", upstream.bodies[0].get("max_completion_tokens")) == sent_cap


SPENT = Usage(11, 7)  # what chat_completion() reports: the unusable summary's tokens, booked all the same


@pytest.mark.parametrize(
    ("answer", "usage"),
    [
        pytest.param((500, {"error": {"message": "down"}}), Usage(), id="the-upstream-errs"),
        pytest.param((200, chat_completion(None)), SPENT, id="the-summary-is-empty"),
        pytest.param((200, chat_completion("   ")), SPENT, id="the-summary-is-blank"),
        pytest.param(httpx.ConnectError("refused"), Usage(), id="the-upstream-cannot-be-reached"),
    ],
)
async def test_when_the_model_cannot_summarize_the_summary_is_built_here(answer, usage):
    upstream = Upstream(answer)

    ending = await end(upstream)

    assert (without_identity(ending.body), ending.via, ending.usage, ending.upstream_called) == (
        local(LOOP.detail),
        "local",
        usage,
        True,
    )


@pytest.mark.parametrize(
    ("policy", "options"),
    [
        pytest.param(Policy(finalize={"use_upstream": False}), {}, id="the-policy-says-so"),
        pytest.param(None, {"local_only": True}, id="a-hard-cost-cap-forbids-the-call"),
    ],
)
async def test_the_summary_is_built_here_without_a_call_when(policy, options):
    upstream = Upstream()

    ending = await end(upstream, policy, **options)

    assert (without_identity(ending.body), ending.via, ending.upstream_called) == (local(LOOP.detail), "local", False)
    assert upstream.bodies == []


# -- the summary built here ---------------------------------------------------------------------


def calls(*results: tuple[str, str]) -> list[Message]:
    """An assistant call and its result per (tool name, result)."""
    messages = []
    for n, (name, result) in enumerate(results):
        messages += [
            Message("assistant", tool_calls=(ToolCall(f"c{n}", name, "{}"),)),
            Message("tool", result, call_id=f"c{n}"),
        ]
    return messages


NEXT = [
    "",
    "Suggested next step:",
    "- Review the findings above, then retry with a narrower request or hand the task to a person.",
]


@pytest.mark.parametrize(
    ("history", "found"),
    [
        pytest.param(
            calls(("search", "LYS-OSL 129 EUR")), ["- search returned: LYS-OSL 129 EUR"], id="each-result-by-its-tool"
        ),
        pytest.param([], ["- Nothing conclusive yet."], id="nothing-found-says-so"),
        pytest.param(calls(("search", "   ")), ["- Nothing conclusive yet."], id="blank-results-are-not-findings"),
        pytest.param(
            [Message("tool", "orphan", call_id="c9")], ["- a tool returned: orphan"], id="a-result-of-no-known-call"
        ),
        pytest.param(calls(("search", "a\n\n  b   c")), ["- search returned: a b c"], id="whitespace-is-collapsed"),
        pytest.param(calls(("fetch", "x" * 400)), [f"- fetch returned: {'x' * 299}…"], id="long-results-are-clipped"),
        pytest.param(
            calls(*[("step", f"r{n}") for n in range(7)]),
            [f"- step returned: r{n}" for n in range(2, 7)],
            id="only-the-last-five-results",
        ),
    ],
)
def test_local_summary(history, found):
    conversation = Conversation([Message("user", TASK), *history])

    lines = local_summary(conversation, "the model repeated itself").split("\n")

    assert lines == [
        "I have to stop here: the model repeated itself.",
        "",
        "What was found:",
        *found,
        "",
        "What is missing:",
        f"- A complete answer to: {TASK}",
        *NEXT,
    ]


def test_a_long_task_is_clipped_in_what_is_missing():
    summary = local_summary(Conversation([Message("user", "t" * 500)]), "it ended")

    assert f"- A complete answer to: {'t' * 199}…" in summary.split("\n")


# -- one ending per session -----------------------------------------------------------------------


def endings(upstream: Upstream, store: MemoryStore, metrics: Metrics | None = None) -> Endings:
    prices = PriceTable({"m": Price(prompt=2.0, completion=8.0)})
    ledger = Ledger(store, metrics or Metrics(), prices, lambda: T0, ending_wait_secs=0.2)
    return Endings(upstream.client(), ledger, metrics or Metrics(), Tracing(), format_named, lambda: T0)


def ended_session():
    return agent_request(PAYLOAD, session=uuid.uuid4().hex)


async def test_the_request_that_claims_the_ending_makes_it_and_stores_it():
    upstream, store, metrics = Upstream((200, chat_completion(SUMMARY, model="m"))), MemoryStore(), Metrics()
    request, delta, notes = ended_session(), SessionDelta(), RequestNotes(started=T0)

    body = await endings(upstream, store, metrics).make(request, LOOP, SessionState(), delta, notes, [])

    assert content(body) == f"{LOOP_NOTICE}\n\n{SUMMARY}"
    assert notes.terminated == "loop"
    assert delta.assignments["termination"] == "loop"
    assert json.loads(delta.assignments["ending"]) == body  # replayed to every later call
    assert (delta.increments["steps"], delta.increments["tokens_in"], delta.increments["tokens_out"]) == (1, 11, 7)
    assert metrics.terminations.labels(request.tenant, "default", "loop")._value.get() == 1


async def test_a_hard_cost_cap_ending_is_built_here_without_a_call():
    upstream, store = Upstream(), MemoryStore()
    request = agent_request(PAYLOAD, Policy(budgets={"max_cost_usd": 1.0, "hard_cost_cap": True}), session="cap")
    verdict = Finalize("budget_cost", "the session spent its budget of $1.00")
    delta = SessionDelta()

    body = await endings(upstream, store).make(request, verdict, SessionState(), delta, RequestNotes(started=T0), [])

    notice = (
        "LoopWarden stopped this run (budget_cost): the session's cost budget is spent ($0.0000 of $1.00 used). "
        "A new instruction cannot continue until the operator grants session cap more cost through the sessions "
        "API (PATCH /v1/loopwarden/sessions/cap)."
    )
    assert without_identity(body) == local(verdict.detail, notice)
    assert upstream.bodies == []
    assert "steps" not in delta.increments  # no call made, no step taken


async def test_the_turns_this_request_added_go_into_the_summary_call():
    upstream = Upstream((200, chat_completion(SUMMARY)))
    request = ended_session()

    await endings(upstream, MemoryStore()).make(
        request, LOOP, SessionState(), SessionDelta(), RequestNotes(started=T0), [Note("Do not repeat yourself.")]
    )

    assert upstream.bodies[0]["messages"][-2] == {"role": "user", "content": "Do not repeat yourself."}


async def test_a_request_that_finds_the_ending_made_replays_the_stored_one():
    upstream, store, metrics = Upstream(), MemoryStore(), Metrics()
    request = ended_session()
    stored = chat_completion("The ending the first request made.")
    await store.claim_ending(request.session.key, Claim(int(T0 * 1000), 60_000), 3600)
    made = SessionDelta()
    made.assign("termination", "budget_steps")
    made.assign("ending", json.dumps(stored))
    await store.commit(request.session.key, made, 3600)
    delta, notes = SessionDelta(), RequestNotes(started=T0)

    body = await endings(upstream, store, metrics).make(request, LOOP, SessionState(), delta, notes, [])

    assert body == stored
    assert notes.terminated == "budget_steps"  # the session's reason, not this request's
    assert upstream.bodies == []
    assert "ending" not in delta.assignments
    assert metrics.endings_shared.labels(request.tenant, "default", "stored")._value.get() == 1


async def test_a_request_whose_ending_another_is_still_making_answers_with_a_summary_built_here():
    upstream, store, metrics = Upstream(), MemoryStore(), Metrics()
    request = ended_session()
    await store.claim_ending(request.session.key, Claim(int(T0 * 1000), 60_000), 3600)  # a live claim, no ending yet
    delta, notes = SessionDelta(), RequestNotes(started=T0)

    body = await endings(upstream, store, metrics).make(request, LOOP, SessionState(), delta, notes, [])

    assert without_identity(body) == local(LOOP.detail, LOOP_NOTICE)
    assert (notes.terminated, notes.claim) == ("loop", False)
    assert upstream.bodies == []
    assert "ending" not in delta.assignments
    assert metrics.endings_shared.labels(request.tenant, "default", "local")._value.get() == 1
