"""Loop, progress, tool-argument and failing-tool guards, as tables."""

from __future__ import annotations

import json

import pytest

from proxy.exchange import Reply, ReturnCalls, ToolCall, Usage
from proxy.fingerprint import canonical_arguments, fingerprint, remember_calls
from proxy.guards import GuardContext, NoProgressGuard, ToolArgsGuard, ToolFailuresGuard, ToolLoopGuard
from proxy.guards.no_progress import trailing_run
from proxy.guards.tool_args import argument_errors
from proxy.guards.tool_loop import cycle_run
from proxy.policy.models import Policy
from proxy.session.base import SessionDelta, SessionState
from proxy.verdict import Amend, Finalize, Nudge, Pass
from proxy.wire.chat_parse import parse_conversation

POLICY = Policy()

# -- canonical arguments and fingerprints ------------------------------------------------

SAME_CALLS = [
    ('{"city": "Paris", "days": 3}', '{"days":3,"city":"Paris"}'),
    ('{"days": 3.0}', '{"days": 3}'),
    ('{"q": "  new   york "}', '{"q": "new york"}'),
    ('{"a": {"y": 1, "x": [1, 2.0]}}', '{"a":{"x":[1,2],"y":1}}'),
    ("", "{}"),
    ("  not json  at all ", "not json at all"),
]
DIFFERENT_CALLS = [
    ('{"city": "Paris"}', '{"city": "paris"}'),
    ('{"days": 3}', '{"days": 3.5}'),
    ('{"days": 3}', '{"days": "3"}'),
    ('{"a": [1, 2]}', '{"a": [2, 1]}'),
    ('{"a": 1, "a": 2}', '{"a": 2}'),  # a key given twice is not "the last one"
]


@pytest.mark.parametrize(("one", "other"), SAME_CALLS)
def test_equivalent_arguments_share_a_fingerprint(one, other):
    assert fingerprint("search", one) == fingerprint("search", other)


@pytest.mark.parametrize(("one", "other"), DIFFERENT_CALLS)
def test_different_arguments_get_different_fingerprints(one, other):
    assert fingerprint("search", one) != fingerprint("search", other)


def test_tool_name_is_part_of_the_fingerprint():
    assert fingerprint("search", "{}") != fingerprint("fetch", "{}")


def test_canonical_arguments_are_sorted_compact_json():
    assert canonical_arguments('{"b": 1, "a": [1.0, " x "]}') == '{"a":[1,"x"],"b":1}'


# -- cycles and runs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sequence", "max_period", "expected"),
    [
        (list("AB"), 3, (0, 0)),  # nothing repeats yet
        (list("ABA"), 3, (3, 2)),  # counted in calls, once a call repeats
        (list("ABAB"), 3, (4, 2)),
        (list("ABABAB"), 3, (6, 2)),  # the shortest period wins (not 4)
        (list("ABCA"), 3, (4, 3)),
        (list("ABCABC"), 3, (6, 3)),
        (list("ABCABC"), 2, (0, 0)),  # period beyond the limit is not a cycle
        (list("XABAB"), 3, (4, 2)),  # the run starts after X
        (list("ABACA"), 3, (3, 2)),  # A C A: only the run at the end counts
        (list("AAAA"), 3, (0, 0)),  # plain repetition is counted per call, not as a cycle
        (list("ABCD"), 3, (0, 0)),
        ([], 3, (0, 0)),
    ],
)
def test_cycle_run(sequence, max_period, expected):
    assert cycle_run(sequence, max_period) == expected


@pytest.mark.parametrize(
    ("items", "run"), [([], 0), (["a"], 1), (["a", "b", "b"], 2), (["b", "b", "b"], 3), (["b ", " b"], 2)]
)
def test_trailing_run(items, run):
    assert trailing_run(items) == run


# -- tool-loop guard ---------------------------------------------------------------------

CALL = ToolCall("c9", "search", '{"q": "lyon"}')
MARK = fingerprint(CALL.name, CALL.arguments)


def reply_with(*calls: ToolCall, content: str | None = None) -> Reply:
    return Reply(content, None, tuple(calls), "tool_calls" if calls else "stop", Usage())


def context(values=None, messages=(), retries=None, policy=POLICY):
    conversation = parse_conversation({"messages": list(messages), "tools": TOOLS})
    return GuardContext(policy, SessionState(values or {}), conversation, retries or {})


@pytest.mark.parametrize(
    ("delivered", "retried", "expected"),
    [
        (0, False, Pass),
        (1, False, Pass),
        (2, False, Nudge),  # third identical call: warn
        (2, True, Pass),  # warned once in this request and it insists: let it through
        (3, False, Nudge),
        (4, False, Finalize),  # fifth: end with reason loop
    ],
)
def test_tool_loop_thresholds(delivered, retried, expected):
    verdict = ToolLoopGuard().check_reply(
        reply_with(CALL), context({f"fp:{MARK}": str(delivered)}, retries={"loop_warning": 1} if retried else {})
    )

    assert isinstance(verdict, expected)
    if isinstance(verdict, Finalize):
        assert verdict.reason == "loop"


def test_delivered_calls_are_counted_and_remembered_in_order():
    delta = SessionDelta()
    other = ToolCall("c2", "fetch", '{"url": "x"}')

    remember_calls(delta, [CALL, other, CALL], keep=60)
    state = delta.applied_to(SessionState())

    assert state.counter(f"fp:{MARK}") == 2
    assert state.items("fp_seq") == [MARK, fingerprint("fetch", '{"url": "x"}'), MARK]


def test_loop_warning_names_the_call_and_the_count():
    verdict = ToolLoopGuard().check_reply(reply_with(CALL), context({f"fp:{MARK}": "2"}))

    assert 'search({"q":"lyon"})' in verdict.turns[0].text
    assert "2 times" in verdict.turns[0].text


def test_a_cycle_counts_as_repetition():
    other = ToolCall("c8", "fetch", '{"url": "x"}')
    other_mark = fingerprint(other.name, other.arguments)
    values = {"fp_seq": ",".join([MARK, other_mark, MARK]), f"fp:{MARK}": "2", f"fp:{other_mark}": "1"}

    verdict = ToolLoopGuard().check_reply(reply_with(other), context(values))

    assert isinstance(verdict, Nudge)
    assert "cycle of 2 calls" in verdict.reason


def test_same_tool_with_new_arguments_is_never_a_loop():
    marks = [fingerprint("search", json.dumps({"q": f"q{n}"})) for n in range(10)]
    values = {f"fp:{mark}": "1" for mark in marks}

    verdict = ToolLoopGuard().check_reply(reply_with(ToolCall("c", "search", '{"q": "q10"}')), context(values))

    assert isinstance(verdict, Pass)


def _history(call: ToolCall, result: str):
    return [
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": result},
    ]


def test_result_of_a_warned_call_carries_the_warning_upstream():
    verdict = ToolLoopGuard().check_request(context({f"fp:{MARK}": "3"}, _history(CALL, "Lyon: 522,250")))

    assert isinstance(verdict, Amend)
    assert "3 times" in verdict.tool_notes["c9"]


def test_result_of_an_ordinary_call_is_left_alone():
    assert isinstance(ToolLoopGuard().check_request(context({f"fp:{MARK}": "1"}, _history(CALL, "x"))), Pass)


# -- no progress -------------------------------------------------------------------------


def _results(*contents: str):
    messages = [{"role": "user", "content": "task"}]
    for n, content in enumerate(contents):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"c{n}", "type": "function", "function": {"name": "poll", "arguments": "{}"}}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": content})
    return messages


@pytest.mark.parametrize(
    ("results", "strikes", "expected"),
    [
        (["pending", "pending"], 0, Pass),
        (["pending", "pending", "pending"], 0, Nudge),
        (["pending", " pending ", "pending\n"], 0, Nudge),  # whitespace does not make it new
        (["pending", "pending", "pending", "pending"], 1, Finalize),
        (["pending", "pending", "done"], 1, Pass),
    ],
)
def test_identical_tool_results(results, strikes, expected):
    verdict = NoProgressGuard().check_request(context({"strike:no_progress_results": str(strikes)}, _results(*results)))

    assert isinstance(verdict, expected)
    if isinstance(verdict, Finalize):
        assert verdict.reason == "no_progress"


def test_same_assistant_text_again_is_no_progress():
    history = [{"role": "user", "content": "task"}] + [
        m
        for _ in range(2)
        for m in ({"role": "assistant", "content": "I am checking."}, {"role": "user", "content": "ok?"})
    ]

    verdict = NoProgressGuard().check_reply(reply_with(content="I am  checking."), context(messages=history))

    assert isinstance(verdict, Nudge)


# -- tool arguments ----------------------------------------------------------------------

TOOLS = [
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "fetch", "parameters": {"type": "object"}}},
    {
        "type": "function",
        "function": {
            "name": "weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "score": {"type": "number"},
                    "filters": {"type": "object", "properties": {"limit": {"type": "integer", "maximum": 10}}},
                },
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {"type": "function", "function": {"name": "noargs"}},
    {"type": "function", "function": {"name": "broken", "parameters": {"type": "not-a-type"}}},
]
OFFERED = GuardContext(POLICY, SessionState({}), parse_conversation({"messages": [], "tools": TOOLS})).tool_schemas()


@pytest.mark.parametrize(
    ("name", "arguments", "errors"),
    [
        ("weather", '{"city": "Paris"}', []),
        ("weather", "{}", ["$.city: 'city' is a required property"]),
        ("weather", '{"city": "Paris", "score": "high"}', ["$.score: 'high' is not of type 'number'"]),
        (
            "weather",
            '{"city": "P", "filters": {"limit": 50}}',
            ["$.filters.limit: 50 is greater than the maximum of 10"],
        ),
        (
            "weather",
            '{"city": "P", "colour": 1}',
            ["$: Additional properties are not allowed ('colour' was unexpected)"],
        ),
        (
            "weather",
            '{"city": "Par',
            ["arguments are not valid JSON: Unterminated string starting at: line 1 column 10 (char 9)"],
        ),
        ("teleport", "{}", ["tool 'teleport' does not exist (available: broken, fetch, noargs, search, weather)"]),
        ("noargs", "", []),
        ("broken", '{"x": 1}', []),  # a schema the upstream accepted but that does not compile is not ours to police
        ("weather", '{"city": "Paris", "city": "Lyon"}', ["arguments give the key 'city' more than once"]),
        ("search", '{"q": {"page": 1, "page": 2}}', ["arguments give the key 'page' more than once"]),
        ("search", '{"q": "caf\\u00e9", "n": 1e3}', []),  # spelled otherwise than msgspec would: still fine
    ],
)
def test_argument_errors(name, arguments, errors):
    assert argument_errors(ToolCall("c", name, arguments), OFFERED) == errors


def test_bad_call_goes_back_to_the_model_with_its_errors():
    bad = ToolCall("c1", "weather", '{"city": 3}')
    good = ToolCall("c2", "search", "{}")

    verdict = ToolArgsGuard().check_reply(reply_with(bad, good), context())

    assert isinstance(verdict, Nudge)
    (returned,) = verdict.turns
    assert isinstance(returned, ReturnCalls)
    assert [c.id for c in returned.reply.tool_calls] == ["c1", "c2"]
    assert "$.city: 3 is not of type 'string'" in returned.results["c1"]
    assert returned.results["c2"].startswith("Not executed")


def test_a_call_giving_a_key_twice_goes_back_to_the_model_as_invalid():
    twice = ToolCall("c1", "search", '{"q": "rm -rf /", "q": "ls"}')

    verdict = ToolArgsGuard().check_reply(reply_with(twice), context())

    assert isinstance(verdict, Nudge)
    assert "arguments give the key 'q' more than once" in verdict.turns[0].results["c1"]


def test_bad_call_ends_the_session_once_retries_are_spent():
    verdict = ToolArgsGuard().check_reply(
        reply_with(ToolCall("c1", "weather", "{}")), context(retries={"tool_args_retry": 2})
    )

    assert isinstance(verdict, Finalize)
    assert verdict.reason == "invalid_tool_args"
    assert "weather" in verdict.detail


def test_bad_call_passes_flagged_once_retries_are_spent_when_the_policy_says_pass():
    policy = Policy.model_validate({"tool_args": {"after_max_retries": "pass"}})

    verdict = ToolArgsGuard().check_reply(
        reply_with(ToolCall("c1", "weather", "{}")), context(retries={"tool_args_retry": 2}, policy=policy)
    )

    assert verdict == Pass(flags=("tool_args_invalid",))


# -- failing tools -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("results", "ends"),
    [
        (["Error: timeout", "error: 500", "Traceback (most recent call last):\n  ..."], True),
        (['{"error": "bad"}', "ERROR x", "Exception: boom"], True),
        (["Error: timeout", "ok", "Error: again"], False),
        (["Error: timeout", "Error: timeout"], False),
        (["no errors here", "the word error inside", "fine"], False),
    ],
)
def test_consecutive_failing_tools_end_the_session(results, ends):
    verdict = ToolFailuresGuard().check_request(context(messages=_results(*results)))

    assert isinstance(verdict, Finalize) is ends


def test_trailing_run_stops_at_the_limit():
    assert trailing_run(["same"] * 500, limit=3) == 3
