"""The tool-loop guard: the same call (or cycle of calls) again is warned about, then ends the session;
the result of a warned call carries the warning upstream."""

from __future__ import annotations

import json

import pytest

from proxy.exchange import Message, Note, Reply, ToolCall, Usage
from proxy.guards import GuardContext, ToolLoopGuard
from proxy.guards.fingerprint import canonical_arguments, fingerprint, near_fingerprint, remember_calls
from proxy.guards.tool_loop import cycle_runs
from proxy.policy.models import LoopSettings, Policy
from proxy.session.base import SessionDelta, SessionState
from proxy.verdict import PASS, Amend, Finalize, Nudge, Pass
from proxy.wire.chat.parse import parse_conversation
from tests.unit.guards.given import TASK, context, conversation, reply, session

POLICY = Policy()  # warned at the 3rd identical call, ended at the 5th, cycles up to 3 calls (counted in calls)
CALL = ToolCall("c9", "search", '{"q": "lyon"}')
SHOWN = 'search({"q":"lyon"})'
OTHER = ToolCall("c8", "fetch", '{"url": "x"}')
MARK, OTHER_MARK = fingerprint(CALL.name, CALL.arguments), fingerprint(OTHER.name, OTHER.arguments)
OFF = Policy(loop={"enabled": False})


def warned(what: str, count: int, *, cycle: bool = False) -> Nudge:
    text = POLICY.nudges.loop_warning.format(call=what, count=count - 1)
    often = f"({count} calls)" if cycle else f"{count} times"
    return Nudge(kind="loop_warning", reason=f"{what} repeated {often}", turns=(Note(text),))


CYCLE = 'a cycle of 2 calls ending with fetch({"url":"x"})'
CYCLE_AT_CALL = f"a cycle of 2 calls ending with {SHOWN}"


def delivered_in_turn(*marks: str):
    """Calls delivered one after the other (each once, as far as its own count goes)."""
    return session(**{"fp_seq": ",".join(marks), **{f"fp:{mark}": marks.count(mark) for mark in set(marks)}})


def delivered(times: int, mark: str = MARK):
    return session(**{f"fp:{mark}": times})


LONG = ToolCall("c7", "search", json.dumps({"q": "x" * 300}))
LONG_SHOWN = f"search({canonical_arguments(LONG.arguments)[:159]}…)"

REPLY_CASES = [
    # the reply's calls, the session so far, nudges of each kind sent in this request, policy, the verdict
    pytest.param((CALL,), delivered(0), {}, POLICY, PASS, id="a-first-call-passes"),
    pytest.param((CALL,), delivered(1), {}, POLICY, PASS, id="a-second-identical-call-passes"),
    pytest.param((CALL,), delivered(2), {}, POLICY, warned(SHOWN, 3), id="the-third-identical-call-is-warned"),
    pytest.param((CALL,), delivered(3), {}, POLICY, warned(SHOWN, 4), id="the-fourth-is-warned-again"),
    pytest.param((CALL,), delivered(2), {"loop_warning": 1}, POLICY, PASS, id="warned-once-in-this-request-it-passes"),
    pytest.param(
        (CALL,),
        delivered(4),
        {},
        POLICY,
        Finalize("loop", f"the model repeated {SHOWN} 5 times"),
        id="the-fifth-identical-call-ends-the-session",
    ),
    pytest.param(
        (CALL,),
        delivered(4),
        {"loop_warning": 1},
        POLICY,
        Finalize("loop", f"the model repeated {SHOWN} 5 times"),
        id="an-earlier-warning-does-not-spare-the-ending",
    ),
    pytest.param((CALL, CALL), delivered(1), {}, POLICY, warned(SHOWN, 3), id="repeats-within-one-reply-count-too"),
    pytest.param(
        (ToolCall("c9", "search", '{"q":"lyon"}'),),
        delivered(2),
        {},
        POLICY,
        warned(SHOWN, 3),
        id="the-same-arguments-spelled-otherwise-are-the-same-call",
    ),
    pytest.param(
        (ToolCall("c9", "search", '{"q": "paris"}'),), delivered(4), {}, POLICY, PASS, id="new-arguments-pass"
    ),
    pytest.param(
        (LONG,),
        delivered(4, fingerprint(LONG.name, LONG.arguments)),
        {},
        POLICY,
        Finalize("loop", f"the model repeated {LONG_SHOWN} 5 times"),
        id="long-arguments-are-clipped-in-the-words",
    ),
    pytest.param(
        (CALL,),
        delivered_in_turn(MARK, OTHER_MARK),
        {},
        POLICY,
        warned(CYCLE_AT_CALL, 3, cycle=True),
        id="a-b-a-is-a-cycle-of-3-calls-warned-like-a-third-identical-call",
    ),
    pytest.param(
        (OTHER,),
        delivered_in_turn(MARK, OTHER_MARK, MARK),
        {},
        POLICY,
        warned(CYCLE, 4, cycle=True),
        id="a-b-a-b-is-warned-again",
    ),
    pytest.param(
        (CALL,),
        delivered_in_turn(MARK, OTHER_MARK, MARK, OTHER_MARK),
        {"loop_warning": 1},
        POLICY,
        Finalize("loop", f"the model repeated {CYCLE_AT_CALL} (5 calls)"),
        id="the-fifth-call-of-a-cycle-ends-the-session-like-an-exact-repeat",
    ),
    pytest.param(
        (OTHER, CALL),
        delivered_in_turn(MARK, OTHER_MARK, MARK),
        {},
        POLICY,
        Finalize("loop", f"the model repeated {CYCLE_AT_CALL} (5 calls)"),
        id="parallel-calls-of-a-cycle-count-one-by-one",
    ),
    pytest.param((), delivered(4), {}, POLICY, PASS, id="a-reply-without-calls-passes"),
    pytest.param((CALL,), delivered(4), {}, OFF, PASS, id="a-disabled-guard-passes-everything"),
]


@pytest.mark.parametrize(("calls", "state", "retries", "policy", "expected"), REPLY_CASES)
def test_tool_loop_reply(calls, state, retries, policy, expected):
    given = reply("Searching.", *calls) if calls else reply("Done.")

    assert ToolLoopGuard().check_reply(given, context(policy, state, retries=retries)) == expected


def test_the_same_tool_with_ever_new_arguments_is_never_a_loop():
    marks = [fingerprint("search", json.dumps({"q": f"q{n}"})) for n in range(10)]
    state = session(**{f"fp:{mark}": 1 for mark in marks}, fp_seq=",".join(marks))

    verdict = ToolLoopGuard().check_reply(reply(None, ToolCall("c", "search", '{"q": "q10"}')), context(POLICY, state))

    assert verdict is PASS


def result_of(call: ToolCall, text: str = "Lyon: 522,250") -> tuple[Message, ...]:
    return (TASK, Message("assistant", tool_calls=(call,)), Message("tool", text, call_id=call.id))


REQUEST_CASES = [
    # the conversation, the session so far, policy, the verdict
    pytest.param(
        result_of(CALL),
        delivered(3),
        POLICY,
        Amend(
            kind="loop_warning_result",
            reason="1 repeated call result(s)",
            tool_notes={"c9": POLICY.nudges.loop_warning.format(call=SHOWN, count=3)},
        ),
        id="the-result-of-a-warned-call-carries-the-warning",
    ),
    pytest.param(result_of(CALL), delivered(1), POLICY, PASS, id="the-result-of-an-ordinary-call-is-left-alone"),
    pytest.param(
        result_of(CALL),
        delivered_in_turn(MARK, OTHER_MARK, MARK),
        POLICY,
        Amend(
            kind="loop_warning_result",
            reason="1 repeated call result(s)",
            tool_notes={"c9": POLICY.nudges.loop_warning.format(call=CYCLE_AT_CALL, count=3)},
        ),
        id="the-result-of-a-call-in-a-warned-cycle-carries-the-warning",
    ),
    pytest.param(
        (TASK, Message("tool", "orphan", call_id="nowhere")),
        delivered(3),
        POLICY,
        PASS,
        id="a-result-of-no-known-call-is-left-alone",
    ),
    pytest.param(
        (*result_of(CALL), Message("assistant", "Thinking.")),
        delivered(3),
        POLICY,
        PASS,
        id="only-results-after-the-last-assistant-turn-are-new",
    ),
    pytest.param(result_of(CALL), delivered(3), OFF, PASS, id="a-disabled-guard-amends-nothing"),
]


@pytest.mark.parametrize(("messages", "state", "policy", "expected"), REQUEST_CASES)
def test_tool_loop_request(messages, state, policy, expected):
    assert ToolLoopGuard().check_request(context(policy, state, conversation(*messages))) == expected


@pytest.mark.parametrize(
    ("sequence", "max_period", "expected"),
    [
        pytest.param(list("AB"), 3, [], id="nothing-repeats-yet"),
        pytest.param(list("ABA"), 3, [(3, 2)], id="a-repeated-call-makes-a-run-of-3"),
        pytest.param(list("ABAB"), 3, [(4, 2)], id="two-rounds-of-two"),
        pytest.param(list("ABABAB"), 3, [(6, 2)], id="three-rounds-of-two"),
        pytest.param(list("ABABAB"), 4, [(6, 2), (6, 4)], id="a-multiple-of-the-period-runs-as-long"),
        pytest.param(list("ABCA"), 3, [(4, 3)], id="a-cycle-of-three-shows-at-its-first-repeat"),
        pytest.param(list("ABCABC"), 3, [(6, 3)], id="two-rounds-of-three"),
        pytest.param(list("ABCABC"), 2, [], id="a-period-beyond-the-limit-is-no-cycle"),
        pytest.param(list("XABAB"), 3, [(4, 2)], id="what-came-before-the-cycle-does-not-matter"),
        pytest.param(list("ABACA"), 3, [(3, 2)], id="only-the-run-at-the-end-counts"),
        pytest.param(list("XACABABA"), 6, [(5, 2), (5, 4), (7, 6)], id="each-period-keeps-its-own-run"),
        pytest.param(list("AAAA"), 3, [], id="plain-repetition-is-counted-per-call-not-as-a-cycle"),
        pytest.param(list("ABCD"), 3, [], id="no-repetition-no-cycle"),
        pytest.param([], 3, [], id="nothing-yet"),
    ],
)
def test_cycle_runs(sequence, max_period, expected):
    assert cycle_runs(sequence, max_period) == expected


def test_a_short_cycle_that_reached_its_end_is_not_hidden_by_a_longer_period_still_warning():
    policy = Policy(loop={"max_period": 6})
    marks = {name: fingerprint("search", json.dumps({"q": name})) for name in "XCAB"}
    state = delivered_in_turn(*(marks[c] for c in "XACABAB"))  # the next A: A-B-A-B-A, and A-C-A-B-A-B-A

    verdict = ToolLoopGuard().check_reply(reply(None, ToolCall("a", "search", '{"q": "A"}')), context(policy, state))

    assert verdict == Finalize("loop", 'the model repeated a cycle of 2 calls ending with search({"q":"A"}) (5 calls)')


# -- cycles, as runs ------------------------------------------------------------------------
# Cycles end after as many tool runs as an exact repeat, counted in calls. Each case plays an agent
# against the guard the way the pipeline does: a reply's calls are checked against the calls
# delivered so far, a warned reply is asked again once (the model insists with the same calls), and
# what passes is delivered and remembered.


CALLS = {
    "A": ToolCall("a", "search", '{"q": "lyon"}'),
    "B": ToolCall("b", "fetch", '{"url": "https://insee.fr"}'),
    "C": ToolCall("c", "read", '{"page": 2}'),
    "D": ToolCall("d", "list", "{}"),
    "E": ToolCall("e", "stat", "{}"),
    "P": ToolCall("p", "get_weather", '{"city": "Paris"}'),
    "p": ToolCall("p", "get_weather", '{"city": "paris"}'),
    "Q": ToolCall("p", "get_weather", '{"city": "PARIS "}'),
    "R": ToolCall("r", "get_weather", '{"city": "Pa ris"}'),
}


def _play(script: list[str], policy: Policy = Policy()) -> tuple[int, list[int], str | None]:
    """(tool runs before the end, the replies (1-based) that were warned, the end's reason).
    Each script item is one reply's calls, e.g. ``"A"`` or ``"AB"`` (parallel)."""
    state = SessionState()
    runs, warned = 0, []
    conversation = parse_conversation({"messages": [{"role": "user", "content": "task"}]})
    for number, calls in enumerate(script, 1):
        reply = Reply(None, None, tuple(CALLS[c] for c in calls), "tool_calls", Usage())
        verdict = ToolLoopGuard().check_reply(reply, GuardContext(policy, state, conversation, {}))
        if isinstance(verdict, Nudge):
            warned.append(number)
            verdict = ToolLoopGuard().check_reply(reply, GuardContext(policy, state, conversation, {"loop_warning": 1}))
        if isinstance(verdict, Finalize):
            return runs, warned, verdict.reason
        assert isinstance(verdict, Pass)
        delta = SessionDelta()
        remember_calls(delta, reply.tool_calls, policy.loop.history)
        state = delta.applied_to(state)
        runs += len(reply.tool_calls)
    return runs, warned, None


@pytest.mark.parametrize(
    ("script", "runs", "warned"),
    [
        ("AAAAAAAA", 4, [3, 4]),  # an exact repeat: warned at its 3rd call, ended at its 5th
        ("ABABABAB", 4, [3, 4]),  # A-B-A-B: the same tool runs and warnings
        ("ABCABCAB", 4, [4]),  # A-B-C-A-B-C: warned at its first repeated call, the same end
        ("CABABABA", 5, [4, 5]),  # a cycle after other work counts from where it starts
    ],
)
def test_a_cycle_ends_after_as_many_tool_runs_as_an_exact_repeat(script, runs, warned):
    assert _play(list(script)) == (runs, warned, "loop")


def test_a_repeated_pair_of_parallel_calls_is_counted_in_calls():
    # AB AB: a run of 4 calls (warned); AB again would be the 5th and 6th: ended.
    assert _play(["AB", "AB", "AB"]) == (4, [2], "loop")


def test_a_cycle_longer_than_the_warning_is_warned_at_its_first_repeat_and_ended_at_the_next():
    policy = Policy(loop=LoopSettings(max_period=5))

    assert _play(list("ABCDEABCDE"), policy) == (6, [6], "loop")


def test_a_cycle_beyond_max_period_is_left_to_the_exact_count():
    policy = Policy(loop=LoopSettings(max_period=2))
    # Only each call's own count: warned from its 3rd call on, A's 5th would end it.
    assert _play(list("ABCABCABCABCA"), policy) == (12, [7, 8, 9, 10, 11, 12], "loop")


def test_distinct_calls_are_never_disturbed():
    calls = [ToolCall(f"c{n}", "search" if n % 2 else "fetch", json.dumps({"q": f"page {n}"})) for n in range(30)]
    state = SessionState()
    conversation = parse_conversation({"messages": [{"role": "user", "content": "task"}]})
    for call in calls:
        reply = Reply(None, None, (call,), "tool_calls", Usage())
        verdict = ToolLoopGuard().check_reply(reply, GuardContext(Policy(), state, conversation, {}))
        assert isinstance(verdict, Pass)
        delta = SessionDelta()
        remember_calls(delta, [call], 60)
        state = delta.applied_to(state)


def test_the_result_of_a_warned_cycle_call_carries_the_warning_upstream():
    state = SessionState()
    delta = SessionDelta()
    remember_calls(delta, [CALLS["A"], CALLS["B"], CALLS["A"]], 60)
    state = delta.applied_to(state)
    conversation = parse_conversation(
        {
            "messages": [
                {"role": "user", "content": "task"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "search", "arguments": '{"q": "lyon"}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "Lyon: 522,250"},
            ]
        }
    )

    verdict = ToolLoopGuard().check_request(GuardContext(Policy(), state, conversation, {}))

    assert isinstance(verdict, Amend)
    assert "a cycle of 2 calls" in verdict.tool_notes["a"]


def test_the_endings_evidence_names_the_tool_and_the_count_never_the_arguments():
    verdict = ToolLoopGuard().check_reply(reply("Searching.", CALL), context(POLICY, delivered(4)))

    assert isinstance(verdict, Finalize)
    assert verdict.evidence == "search was called 5 times with the same arguments"


def test_a_cycles_evidence_names_its_period_and_last_tool():
    verdict = ToolLoopGuard().check_reply(
        reply("Fetching.", OTHER), context(POLICY, delivered_in_turn(MARK, OTHER_MARK, MARK, OTHER_MARK, MARK))
    )

    assert isinstance(verdict, Finalize)
    assert verdict.evidence == "a cycle of 2 tool calls ending with fetch repeated for 6 calls"


def test_a_near_repeat_is_warned_like_an_exact_one_and_ended_one_call_later():
    # Paris, paris, "PARIS ", "Pa ris" (no cycle of 2 or 3 calls among them): warned from the 3rd near
    # call, ended at the 6th (an exact repeat: at its 5th).
    assert _play(list("PpQRPpQR")) == (5, [3, 4, 5], "loop")


def test_near_repeats_are_not_counted_when_the_policy_turns_them_off():
    policy = Policy(loop=LoopSettings(near_block_at=0))
    # Only exact counts: each spelling twice.
    assert _play(list("PpQRPpQR"), policy) == (8, [], None)


def test_a_near_repeats_ending_says_so_in_its_evidence():
    state = session(**{"fpn:" + near_fingerprint("get_weather", '{"city": "Paris"}'): 5})

    verdict = ToolLoopGuard().check_reply(reply(None, CALLS["Q"]), context(POLICY, state))

    assert isinstance(verdict, Finalize)
    assert verdict.evidence == "get_weather was called 6 times with the same arguments but for case and spacing"


def test_near_repeat_warnings_ride_on_the_result_upstream():
    state = session(**{"fpn:" + near_fingerprint("get_weather", '{"city": "paris"}'): 3})

    verdict = ToolLoopGuard().check_request(context(POLICY, state, conversation(*result_of(CALLS["Q"]))))

    assert isinstance(verdict, Amend)
    assert "but for case and spacing" in verdict.tool_notes["p"]
