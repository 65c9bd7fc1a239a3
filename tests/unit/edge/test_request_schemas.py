"""The request's schemas are measured and compiled at the edge: a refused one is a 400 naming it,
a tool schema that does not compile leaves its calls unchecked, a response format that does not
compile is a 400."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.edge.request_schemas import compile_request_schemas
from proxy.errors import InvalidRequest
from proxy.exchange import Conversation
from proxy.schemas.compiled import SchemaCache, SchemaLimits
from proxy.wire.chat.parse import declared_schemas, parse_conversation

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
BROKEN = {"type": "no-such-type"}
WIDE = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(20)}}


def tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def payload(*tools: dict[str, Any], answer: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": list(tools)}
    if answer is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "a", "schema": answer}}
    return body


async def compiled(body: dict[str, Any], cache: SchemaCache | None = None) -> Conversation:
    cache = cache or SchemaCache(1_000_000, SchemaLimits(max_properties=10))
    return await compile_request_schemas(declared_schemas(body), parse_conversation(body), cache)


async def test_a_request_without_schemas_is_handed_on_as_it_came():
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
    conversation = parse_conversation(body)

    assert await compile_request_schemas([], conversation, SchemaCache(1_000)) is conversation


async def test_every_tools_schema_is_compiled_under_its_name():
    conversation = await compiled(payload(tool("weather", CITY), tool("time", {"type": "object"})))

    assert conversation.tool_schemas is not None
    assert sorted(conversation.tool_schemas) == ["time", "weather"]
    assert conversation.tool_schemas["weather"].errors({}) == ["$.city: 'city' is a required property"]


async def test_a_tool_schema_that_does_not_compile_leaves_that_tools_calls_unchecked():
    conversation = await compiled(payload(tool("weather", CITY), tool("odd", BROKEN)))

    assert conversation.tool_schemas is not None
    assert conversation.tool_schemas["odd"] is None
    assert conversation.tool_schemas["weather"] is not None


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param(payload(tool("ok", CITY), tool("wide", WIDE)), "tools[1].function.parameters", id="a-tool"),
        pytest.param(
            {"model": "m", "messages": [], "functions": [{"name": "wide", "parameters": WIDE}]},
            "functions[0].parameters",
            id="a-legacy-function",
        ),
    ],
)
async def test_a_schema_past_the_limits_is_a_400_naming_where_it_sits(body, param):
    with pytest.raises(InvalidRequest) as refused:
        await compiled(body)

    assert (refused.value.status, refused.value.param) == (400, param)
    assert refused.value.message.startswith(f"{param}: ")


async def test_the_response_formats_schema_is_compiled_as_the_answers():
    conversation = await compiled(payload(answer=CITY))

    assert conversation.answer_schema is not None
    assert conversation.answer_schema.errors({"city": "Lyon"}) == []


async def test_a_response_format_schema_that_does_not_compile_is_a_400_naming_it():
    with pytest.raises(InvalidRequest) as refused:
        await compiled(payload(answer=BROKEN))

    assert refused.value.param == "response_format.json_schema.schema"


async def test_a_schema_seen_before_comes_from_the_cache():
    cache = SchemaCache(1_000_000)
    first = await compiled(payload(tool("weather", CITY)), cache)
    second = await compiled(payload(tool("weather", CITY)), cache)

    assert first.tool_schemas is not None
    assert second.tool_schemas is not None
    assert first.tool_schemas["weather"] is second.tool_schemas["weather"]


async def test_a_request_whose_schemas_were_all_seen_before_finds_them_at_once():
    cache = SchemaCache(1_000_000)
    body = payload(tool("weather", CITY), tool("odd", BROKEN), answer=CITY)
    first = await compile_request_schemas(declared_schemas(body), parse_conversation(body), cache, 1_000)
    second = await compile_request_schemas(declared_schemas(body), parse_conversation(body), cache, 1_000)

    assert first.tool_schemas == second.tool_schemas
    assert first.tool_schemas is not second.tool_schemas  # each request its own mapping
    assert second.tool_schemas is not None
    assert second.tool_schemas["odd"] is None
    assert second.answer_schema is first.answer_schema is not None
    assert len(cache.requests) == 1


async def test_a_request_with_a_refused_schema_is_refused_every_time():
    cache = SchemaCache(1_000_000, SchemaLimits(max_properties=10))
    body = payload(tool("ok", CITY), tool("wide", WIDE))
    for _ in range(2):
        with pytest.raises(InvalidRequest) as refused:
            await compile_request_schemas(declared_schemas(body), parse_conversation(body), cache, 1_000)
        assert refused.value.param == "tools[1].function.parameters"
    assert len(cache.requests) == 0
