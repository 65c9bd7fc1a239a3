"""The tool-argument guard: a call to no offered tool, or with arguments that do not parse or fit the
tool's schema, goes back to the model with its errors; once retries are spent it ends, or passes flagged."""

from __future__ import annotations

import inspect

import pytest

from proxy.exchange import ReturnCalls, Tool, ToolCall
from proxy.guards import ToolArgsGuard
from proxy.guards.tool_args import argument_errors
from proxy.policy.models import Policy
from proxy.verdict import PASS, Finalize, Nudge, Pass
from tests.unit.guards.given import context, conversation, reply

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "score": {"type": "number"},
        "filters": {"type": "object", "properties": {"limit": {"type": "integer", "maximum": 10}}},
    },
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = (
    Tool("search", {"type": "object"}),
    Tool("fetch", {"type": "object"}),
    Tool("weather", WEATHER),
    Tool("noargs"),
    Tool("broken", {"type": "not-a-type"}),
    Tool("patch", kind="custom"),
)
TALK = conversation(tools=TOOLS)
POLICY = Policy()  # 2 retries per request, then the session ends
OFFERED = context(POLICY, talk=TALK).tool_schemas()
NOT_RUN = "Not executed: another call in this reply had invalid arguments. Send all the calls again."
AVAILABLE = "available: broken, fetch, noargs, search, weather"


@pytest.mark.parametrize(
    ("name", "arguments", "errors"),
    [
        pytest.param("weather", '{"city": "Paris"}', [], id="valid-arguments"),
        pytest.param("weather", "{}", ["$.city: 'city' is a required property"], id="a-required-key-missing"),
        pytest.param(
            "weather",
            '{"city": "Paris", "score": "high"}',
            ["$.score: 'high' is not of type 'number'"],
            id="a-value-of-the-wrong-type",
        ),
        pytest.param(
            "weather",
            '{"city": "P", "filters": {"limit": 50}}',
            ["$.filters.limit: 50 is greater than the maximum of 10"],
            id="a-nested-value-out-of-range",
        ),
        pytest.param(
            "weather",
            '{"city": "P", "colour": 1}',
            ["$: Additional properties are not allowed ('colour' was unexpected)"],
            id="a-key-the-schema-forbids",
        ),
        pytest.param(
            "weather",
            '{"city": 3, "score": "x"}',
            ["$.city: 3 is not of type 'string'", "$.score: 'x' is not of type 'number'"],
            id="every-error-by-path",
        ),
        pytest.param(
            "weather",
            '{"city": "Par',
            ["arguments are not valid JSON: Unterminated string starting at: line 1 column 10 (char 9)"],
            id="arguments-that-are-not-json",
        ),
        pytest.param("teleport", "{}", [f"tool 'teleport' does not exist ({AVAILABLE})"], id="a-tool-not-offered"),
        pytest.param("noargs", "", [], id="empty-arguments-for-a-tool-without-parameters"),
        pytest.param("broken", '{"x": 1}', [], id="a-schema-that-does-not-compile-is-not-ours-to-police"),
        pytest.param(
            "weather",
            '{"city": "Paris", "city": "Lyon"}',
            ["arguments give the key 'city' more than once"],
            id="a-key-given-twice",
        ),
        pytest.param(
            "search",
            '{"q": {"page": 1, "page": 2}}',
            ["arguments give the key 'page' more than once"],
            id="a-nested-key-given-twice",
        ),
        pytest.param("search", '{"q": "caf\\u00e9", "n": 1e3}', [], id="json-spelled-otherwise-is-fine"),
    ],
)
def test_argument_errors(name, arguments, errors):
    assert argument_errors(ToolCall("c", name, arguments), OFFERED) == errors


def test_a_custom_tools_free_text_input_is_not_checked():
    assert argument_errors(ToolCall("c", "patch", "*** Begin Patch", kind="custom"), OFFERED) == []


def fix(*errors: str) -> str:
    return POLICY.nudges.tool_args.format(errors="\n".join(errors))


BAD = ToolCall("c1", "weather", '{"city": 3}')
GOOD = ToolCall("c2", "search", "{}")
MISSING = ToolCall("c1", "weather", "{}")
PASS_AFTER = Policy(tool_args={"after_max_retries": "pass"})


def returned(calls: tuple[ToolCall, ...], results: dict[str, str], reason: str) -> Nudge:
    return Nudge("tool_args_retry", reason, (ReturnCalls(reply(None, *calls), results),))


CASES = [
    # the reply's calls, tool-argument retries so far in this request, policy, the verdict
    pytest.param((GOOD,), 0, POLICY, PASS, id="valid-calls-pass"),
    pytest.param(
        (BAD, GOOD),
        0,
        POLICY,
        returned(
            (BAD, GOOD),
            {"c1": fix("$.city: 3 is not of type 'string'"), "c2": NOT_RUN},
            "1 argument error(s) in 1 call(s)",
        ),
        id="a-bad-call-goes-back-with-its-errors-and-its-siblings-unrun",
    ),
    pytest.param(
        (ToolCall("c1", "weather", '{"city": 3, "score": "x"}'), ToolCall("c2", "teleport", "{}")),
        1,
        POLICY,
        returned(
            (ToolCall("c1", "weather", '{"city": 3, "score": "x"}'), ToolCall("c2", "teleport", "{}")),
            {
                "c1": fix("$.city: 3 is not of type 'string'", "$.score: 'x' is not of type 'number'"),
                "c2": fix(f"tool 'teleport' does not exist ({AVAILABLE})"),
            },
            "3 argument error(s) in 2 call(s)",
        ),
        id="every-bad-call-is-answered-while-retries-remain",
    ),
    pytest.param(
        (ToolCall("c1", "search", '{"q": "rm -rf /", "q": "ls"}'),),
        0,
        POLICY,
        returned(
            (ToolCall("c1", "search", '{"q": "rm -rf /", "q": "ls"}'),),
            {"c1": fix("arguments give the key 'q' more than once")},
            "1 argument error(s) in 1 call(s)",
        ),
        id="a-key-given-twice-goes-back-as-invalid",
    ),
    pytest.param(
        (MISSING,),
        2,
        POLICY,
        Finalize(
            "invalid_tool_args",
            "the model kept calling weather with invalid arguments: $.city: 'city' is a required property",
        ),
        id="a-bad-call-after-the-retries-ends-the-session",
    ),
    pytest.param(
        (MISSING,), 2, PASS_AFTER, Pass(flags=("tool_args_invalid",)), id="or-passes-flagged-when-the-policy-says-so"
    ),
    pytest.param((MISSING,), 2, Policy(tool_args={"enabled": False}), PASS, id="a-disabled-guard-passes-everything"),
    pytest.param(
        (ToolCall("c1", "patch", "anything", kind="custom"),), 0, POLICY, PASS, id="a-custom-tool-call-passes"
    ),
]


@pytest.mark.parametrize(("calls", "retries", "policy", "expected"), CASES)
def test_tool_args(calls, retries, policy, expected):
    verdict = ToolArgsGuard().check_reply(
        reply(None, *calls), context(policy, talk=TALK, retries={"tool_args_retry": retries})
    )

    assert verdict == expected


def test_a_reply_without_calls_passes():
    assert ToolArgsGuard().check_reply(reply("Done."), context(POLICY, talk=TALK)) is PASS


async def test_a_slow_check_runs_in_a_worker_thread_and_decides_alike():
    talk = conversation(
        tools=(Tool("lookup", {"type": "object", "properties": {"q": {"type": "string", "maxLength": 3}}}),)
    )
    call = ToolCall("c1", "lookup", '{"q": "' + "x" * 40_000 + '"}')  # past the size checked on the loop

    given = ToolArgsGuard().check_reply(reply(None, call), context(POLICY, talk=talk))

    assert inspect.isawaitable(given)
    verdict = await given
    assert isinstance(verdict, Nudge)
    assert verdict.kind == "tool_args_retry"
    assert verdict.reason == "1 argument error(s) in 1 call(s)"
    intro = "Your tool call was not executed because its arguments are invalid:\n"
    assert verdict.turns[0].results["c1"].startswith(intro + "$.q: 'xxx")
