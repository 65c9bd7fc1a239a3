"""The output contract: a final text answer satisfies the requested schema, or is sent back, then ends."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from proxy.exchange import Reply, Usage
from proxy.guards import GuardContext, OutputContractGuard
from proxy.policy.models import Policy
from proxy.session.base import SessionState
from proxy.verdict import Finalize, Nudge, Pass
from proxy.wire.chat_parse import parse_conversation

SCHEMA = {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"], "additionalProperties": False}
FORMAT = {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}


def check(content: str, retries: int = 0, policy: Policy | None = None):
    conversation = parse_conversation({"messages": [{"role": "user", "content": "n?"}], "response_format": FORMAT})
    context = GuardContext(policy or Policy(), SessionState({}), conversation, {"schema_retry": retries})
    verdict = OutputContractGuard().check_reply(Reply(content, None, (), "stop", Usage()), context)
    return asyncio.run(verdict) if inspect.isawaitable(verdict) else verdict  # a long answer: in a thread


def test_a_valid_answer_passes_unflagged():
    assert check('{"n": 3}') == Pass()


@pytest.mark.parametrize(
    ("answer", "error"),
    [('{"n": "three"}', "$.n: 'three' is not of type 'number'"), ("three", "not valid JSON")],
)
def test_an_invalid_answer_goes_back_with_its_errors(answer, error):
    verdict = check(answer)

    assert isinstance(verdict, Nudge)
    assert verdict.kind == "schema_retry"
    assert error in verdict.turns[-1].text


def test_an_answer_still_invalid_after_the_retries_ends_the_session():
    verdict = check('{"m": 3}', retries=2)

    assert isinstance(verdict, Finalize)
    assert verdict.reason == "invalid_output"
    assert "('m' was unexpected)" in verdict.detail


def test_an_answer_still_invalid_passes_flagged_when_the_policy_says_so():
    policy = Policy.model_validate({"output_contract": {"after_max_retries": "pass"}})

    assert check('{"m": 3}', retries=2, policy=policy) == Pass(flags=("output_schema_invalid",))


def test_an_error_quoting_a_huge_answer_is_clipped():
    verdict = check('{"n": "' + "x" * 5000 + '"}')

    assert isinstance(verdict, Nudge)
    assert len(verdict.reason) < 400
