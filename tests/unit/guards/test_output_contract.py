"""The output contract: a final text answer satisfies the requested schema, or is sent back, then ends."""

from __future__ import annotations

import inspect

import pytest

from proxy.exchange import Echo, Note, ToolCall
from proxy.guards import OutputContractGuard
from proxy.policy.models import Policy
from proxy.verdict import PASS, Finalize, Nudge, Pass, Rewrite
from tests.support.answer_shapes import JSON_REPLIES
from tests.unit.guards.given import context, conversation, reply

SCHEMA = {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"], "additionalProperties": False}
ASKED = conversation(output_schema=SCHEMA)
JSON_MODE = conversation(json_answer=True)
POLICY = Policy()  # 2 retries per request, then the session ends
PASS_AFTER = Policy.model_validate({"output_contract": {"after_max_retries": "pass"}})
POLICY_SCHEMA = Policy.model_validate({"output_contract": {"schema": {"type": "object", "required": ["answer"]}}})
NOT_JSON = "the answer is not valid JSON: Expecting value: line 1 column 1 (char 0)"
EXTRA_KEY = "$: Additional properties are not allowed ('m' was unexpected)"


def sent_back(answer: str, *errors: str) -> Nudge:
    text = POLICY.nudges.output_contract.format(errors="\n".join(errors))
    return Nudge("schema_retry", f"{len(errors)} schema error(s): {errors[0]}", (Echo(reply(answer)), Note(text)))


def bare(json_text: str) -> Rewrite:
    return Rewrite("json_unwrapped", "the valid JSON answer came wrapped: sent bare", reply(json_text))


def check(answer: str, retries: int = 0, policy: Policy = POLICY, talk=ASKED, *calls: ToolCall):
    verdict = OutputContractGuard().check_reply(
        reply(answer, *calls), context(policy, talk=talk, retries={"schema_retry": retries})
    )
    assert not inspect.isawaitable(verdict)  # a short answer is checked on the loop
    return verdict


CASES = [
    # the answer, schema retries so far in this request, policy, the conversation, the verdict
    pytest.param('{"n": 3}', 0, POLICY, ASKED, PASS, id="a-valid-answer-passes-unflagged"),
    pytest.param(
        'Here:\n```json\n{"n": 2}\n```', 0, POLICY, ASKED, bare('{"n": 2}'), id="json-in-a-fenced-block-is-sent-bare"
    ),
    pytest.param(
        'The answer is {"n": 1}.', 0, POLICY, ASKED, bare('{"n": 1}'), id="the-outermost-object-in-prose-is-sent-bare"
    ),
    pytest.param('  {"n": 3}\n', 0, POLICY, ASKED, PASS, id="whitespace-around-valid-json-is-no-wrapping"),
    pytest.param(
        '{"n": "three"}',
        0,
        POLICY,
        ASKED,
        sent_back('{"n": "three"}', "$.n: 'three' is not of type 'number'"),
        id="an-answer-off-the-schema-goes-back-with-its-errors",
    ),
    pytest.param("three", 0, POLICY, ASKED, sent_back("three", NOT_JSON), id="an-answer-that-is-not-json-goes-back"),
    pytest.param(
        '{"m": 3}',
        1,
        POLICY,
        ASKED,
        sent_back('{"m": 3}', EXTRA_KEY, "$.n: 'n' is a required property"),
        id="every-error-goes-back-while-retries-remain",
    ),
    pytest.param(
        '{"m": 3}',
        2,
        POLICY,
        ASKED,
        Finalize("invalid_output", f"the answer kept failing the required JSON schema: {EXTRA_KEY}"),
        id="an-answer-still-invalid-after-the-retries-ends-the-session",
    ),
    pytest.param(
        '{"m": 3}',
        2,
        PASS_AFTER,
        ASKED,
        Pass(flags=("output_schema_invalid",)),
        id="or-passes-flagged-when-the-policy-says-so",
    ),
    pytest.param("three", 0, POLICY, conversation(), PASS, id="no-schema-asked-nothing-checked"),
    pytest.param(
        '{"n": 1}',
        0,
        POLICY_SCHEMA,
        conversation(),
        sent_back('{"n": 1}', "$.answer: 'answer' is a required property"),
        id="the-policys-schema-applies-when-the-request-asks-none",
    ),
    pytest.param('{"n": 1}', 0, POLICY_SCHEMA, ASKED, PASS, id="the-requests-schema-wins-over-the-policys"),
    pytest.param(
        '```json\n{"m": 2}\n```', 0, POLICY, JSON_MODE, bare('{"m": 2}'), id="json-mode-without-a-schema-is-sent-bare"
    ),
    pytest.param(
        "three", 0, POLICY, JSON_MODE, sent_back("three", NOT_JSON), id="json-mode-sends-back-what-is-not-json"
    ),
    pytest.param(
        '{"n": 1}',
        0,
        POLICY_SCHEMA,
        JSON_MODE,
        sent_back('{"n": 1}', "$.answer: 'answer' is a required property"),
        id="json-mode-answers-the-policys-schema-when-it-has-one",
    ),
]


@pytest.mark.parametrize(("answer", "retries", "policy", "talk", "expected"), CASES)
def test_output_contract(answer, retries, policy, talk, expected):
    assert check(answer, retries, policy, talk) == expected


def test_a_reply_that_calls_a_tool_is_no_final_answer():
    assert check("three", 0, POLICY, ASKED, ToolCall("c1", "search", "{}")) is PASS


async def test_a_long_answer_is_checked_in_a_worker_thread_and_decided_alike():
    answer = '{"n": "' + "x" * 40_000 + '"}'

    given = OutputContractGuard().check_reply(reply(answer), context(POLICY, talk=ASKED))

    assert inspect.isawaitable(given)
    verdict = await given
    assert isinstance(verdict, Nudge)
    assert verdict.kind == "schema_retry"
    assert verdict.turns[0] == Echo(reply(answer))


async def test_an_error_quoting_a_huge_answer_is_clipped():
    given = OutputContractGuard().check_reply(reply('{"n": "' + "x" * 5000 + '"}'), context(POLICY, talk=ASKED))
    verdict = await given if inspect.isawaitable(given) else given

    assert isinstance(verdict, Nudge)
    assert len(verdict.reason) < 400


@pytest.mark.parametrize(("wrapped", "json_text"), list(JSON_REPLIES.values()), ids=list(JSON_REPLIES))
def test_a_wrapped_valid_answer_reaches_the_client_as_the_bare_json(wrapped, json_text):
    schema = {"type": "object", "required": ["paris_c", "berlin_c"]}

    assert check(wrapped, talk=conversation(output_schema=schema)) == bare(json_text)
