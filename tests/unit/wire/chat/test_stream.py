"""Assembling streamed chunks: the guards see a streamed reply exactly as a complete one."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from proxy.exchange import Channel, ToolCall, Usage
from proxy.wire.chat.parse import parse_reply
from proxy.wire.chat.stream import ChatAssembler, split_chunk


def chunk(delta: dict, finish: str | None = None, **extra) -> dict:
    return {
        "id": "c",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    } | extra


def assembled(*chunks: dict) -> ChatAssembler:
    assembler = ChatAssembler()
    for each in chunks:
        assembler.add(each)
    return assembler


def pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c for c in cuts if 0 < c < len(text)})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)] if text else []


def test_tool_call_arguments_are_joined_by_index():
    reply = assembled(
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "a", "type": "function", "function": {"name": "search", "arguments": ""}}
                ]
            }
        ),
        chunk(
            {
                "tool_calls": [
                    {"index": 1, "id": "b", "type": "function", "function": {"name": "fetch", "arguments": '{"u'}}
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q":'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '":1}'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}),
        chunk({}, "tool_calls"),
    ).reply()

    assert reply.tool_calls == (ToolCall("a", "search", '{"q":"x"}'), ToolCall("b", "fetch", '{"u":1}'))
    assert reply.finish_reason == "tool_calls"


def test_content_reasoning_and_usage_are_collected():
    assembler = assembled(
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "think"}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}, "stop"),
        {"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
    )

    reply = assembler.reply()
    assert (reply.content, reply.reasoning, reply.usage) == ("Hello", "think", Usage(5, 2))
    assert assembler.text_length == 5


def test_whitespace_alone_is_not_text():
    assembler = assembled(chunk({"content": "  \n"}))

    assert not assembler.has_text
    assert assembler.text_length == 3


def test_a_streamed_refusal_is_assembled_and_makes_the_reply_not_empty():
    assembler = assembled(
        chunk({"role": "assistant", "content": None, "refusal": None}),
        chunk({"refusal": "I can't "}),
        chunk({"refusal": "help."}, "stop"),
    )

    reply = assembler.reply()
    assert (reply.refusal, reply.content, reply.is_empty) == ("I can't help.", None, False)
    assert assembler.has_text
    assert assembler.completion()["choices"][0]["message"]["refusal"] == "I can't help."


def test_a_role_chunk_carries_no_channel():
    assert ChatAssembler().add(chunk({"role": "assistant", "content": ""})) == Channel.NONE


def test_add_names_the_channels_a_chunk_carries():
    both = chunk({"content": "x", "tool_calls": [{"index": 0}]})

    assert ChatAssembler().add(both) == Channel.TEXT | Channel.TOOL_CALLS
    assert ChatAssembler().add(chunk({"reasoning": "r"})) == Channel.REASONING


def test_a_finish_chunk_and_a_usage_chunk_are_marked():
    assert ChatAssembler().add(chunk({"content": "x"}, "stop")) == Channel.TEXT | Channel.FINISH
    assert ChatAssembler().add({"id": "c", "choices": [], "usage": {"prompt_tokens": 1}}) == Channel.BARE


def test_split_chunk_separates_released_from_held_deltas():
    both = chunk({"role": "assistant", "content": "x", "tool_calls": [{"index": 0}]})

    going, staying = split_chunk(both, Channel.TEXT)

    assert going is not None
    assert staying is not None
    assert going["choices"][0]["delta"] == {"content": "x"}
    assert staying["choices"][0]["delta"] == {"role": "assistant", "tool_calls": [{"index": 0}]}
    assert going["id"] == staying["id"] == "c"


def test_split_chunk_with_nothing_released_keeps_it_whole():
    going, staying = split_chunk(chunk({"tool_calls": [{"index": 0}]}), Channel.TEXT)

    assert going is None
    assert staying is not None


def _completion(content: str | None, reasoning: str | None, calls: list[tuple[str, str]]) -> dict:
    message: dict = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(calls)
        ]
    return {
        "id": "c",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }


@given(
    content=st.one_of(st.none(), st.text(min_size=1, max_size=40)),
    reasoning=st.one_of(st.none(), st.text(min_size=1, max_size=40)),
    calls=st.lists(
        st.tuples(
            st.from_regex(r"[a-z_]{1,10}", fullmatch=True),
            st.dictionaries(st.text(max_size=4), st.integers(), max_size=3).map(json.dumps),
        ),
        max_size=3,
    ),
    cuts=st.lists(st.integers(min_value=1, max_value=60), max_size=6),
)
def test_any_chunking_assembles_to_the_complete_reply(content, reasoning, calls, cuts):
    completion = _completion(content, reasoning, calls)
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"reasoning_content": p}) for p in pieces(reasoning or "", cuts)]
    chunks += [chunk({"content": p}) for p in pieces(content or "", cuts)]
    for index, (name, args) in enumerate(calls):
        head = {"index": index, "id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": ""}}
        chunks.append(chunk({"tool_calls": [head]}))
        chunks += [chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}) for p in pieces(args, cuts)]
    chunks.append(chunk({}, completion["choices"][0]["finish_reason"]))
    chunks.append({"id": "c", "choices": [], "usage": completion["usage"]})

    assembler = assembled(*chunks)

    assert assembler.reply() == parse_reply(json.dumps(completion).encode())
    assert parse_reply(json.dumps(assembler.completion()).encode()) == assembler.reply()
