"""What a guard reads from its context: the offered tools' schemas and the schema a final answer
must satisfy (the request's, else the policy's), compiled once."""

from __future__ import annotations

import pytest

from proxy.exchange import Tool, ToolCall
from proxy.guards.base import guard_name
from proxy.guards.empty_reply import EmptyReplyGuard
from proxy.guards.output_contract import OutputContractGuard
from proxy.guards.tool_loop import ToolLoopGuard
from proxy.policy.models import Policy
from proxy.schemas.compiled import compiled
from tests.unit.guards.given import context, conversation, reply

CITY = {"type": "object", "required": ["city"]}
ANSWER = {"type": "object", "required": ["fixed"]}
CONTRACT = Policy.model_validate({"output_contract": {"schema": {"type": "object", "required": ["summary"]}}})


def test_every_offered_function_has_its_schema_or_none_when_it_declares_no_parameters():
    talk = conversation(tools=(Tool("weather", CITY), Tool("now"), Tool("patch", kind="custom")))

    schemas = context(talk=talk).tool_schemas()

    assert sorted(schemas) == ["now", "weather"]
    assert schemas["now"] is None
    assert schemas["weather"] is compiled(CITY)


def test_schemas_compiled_at_the_edge_are_used_as_they_are():
    prepared = compiled({"type": "object"})
    talk = conversation(tools=(Tool("weather", CITY),), tool_schemas={"weather": prepared})

    assert context(talk=talk).tool_schemas() == {"weather": prepared}


def test_a_tool_the_edge_could_not_compile_goes_unchecked():
    talk = conversation(tools=(Tool("weather", CITY),), tool_schemas={})

    assert context(talk=talk).tool_schemas() == {"weather": None}


ANSWER_CASES = [
    # policy, the request's own schema, the reply, the schema its answer must satisfy
    pytest.param(Policy(), None, reply("Done."), None, id="no-schema-anywhere"),
    pytest.param(CONTRACT, None, reply('{"summary": 1}'), CONTRACT.output_contract.schema_, id="the-policys"),
    pytest.param(CONTRACT, ANSWER, reply('{"fixed": 1}'), ANSWER, id="the-requests-before-the-policys"),
    pytest.param(CONTRACT, ANSWER, reply(None, ToolCall("c1", "f", "{}")), None, id="a-tool-call-is-no-answer"),
    pytest.param(CONTRACT, ANSWER, reply("  "), None, id="blank-text-is-no-answer"),
    pytest.param(CONTRACT, ANSWER, reply("Go.", ToolCall("c1", "f", "{}")), None, id="text-beside-calls-is-no-answer"),
]


@pytest.mark.parametrize(("policy", "requested", "answer", "schema"), ANSWER_CASES)
def test_a_final_text_answer_is_held_to_the_requests_schema_else_the_policys(policy, requested, answer, schema):
    found = context(policy, talk=conversation(output_schema=requested)).answer_schema(answer)

    assert found is (compiled(schema) if schema is not None else None)


def test_the_requests_schema_compiled_at_the_edge_is_used_as_it_is():
    prepared = compiled({"type": "object"})
    talk = conversation(output_schema=ANSWER, answer_schema=prepared)

    assert context(talk=talk).answer_schema(reply("{}")) is prepared


class Named:
    name = "house_rules"


@pytest.mark.parametrize(
    ("guard", "name"),
    [
        pytest.param(ToolLoopGuard(), "tool_loop", id="class-name-in-snake-case-without-guard"),
        pytest.param(EmptyReplyGuard(), "empty_reply", id="two-words"),
        pytest.param(OutputContractGuard(), "output_contract", id="the-output-contract"),
        pytest.param(Named(), "house_rules", id="a-name-of-its-own-wins"),
    ],
)
def test_a_guard_is_named_as_metrics_and_the_timeline_name_it(guard, name):
    assert guard_name(guard) == name
