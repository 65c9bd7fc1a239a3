"""The SSE parser: the same events whatever the network's splits and line endings."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.wire.sse import SSEEvent, SSEParser, frame
from tests.support.timed import Stopwatch

EVENTS = [
    b'{"id":"c1","choices":[{"index":0,"delta":{"content":"Hel"}}]}',
    b'{"id":"c1","choices":[{"index":0,"delta":{"content":"lo \\u00e9"}}]}',
    b"[DONE]",
]


def wire(events: list[bytes], newline: bytes = b"\n") -> bytes:
    return b"".join(b"data: " + e + newline + newline for e in events)


def parse_in_pieces(data: bytes, cuts: list[int]) -> list[SSEEvent]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    previous = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        events += parser.feed(data[previous:cut])
        previous = cut
    return events + parser.close()


def datas(events: list[SSEEvent]) -> list[bytes]:
    return [e.data for e in events]


def test_split_at_every_byte_gives_the_same_events():
    data = wire(EVENTS)

    for cut in range(len(data) + 1):
        assert datas(parse_in_pieces(data, [cut])) == EVENTS


def test_one_byte_at_a_time_gives_the_same_events():
    data = wire(EVENTS, b"\r\n")

    assert datas(parse_in_pieces(data, list(range(len(data))))) == EVENTS


@given(
    newline=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_any_line_ending_and_any_splits_give_the_same_events(newline, cuts):
    data = wire(EVENTS, newline)

    assert datas(parse_in_pieces(data, [c for c in cuts if c <= len(data)])) == EVENTS


@given(
    payloads=st.lists(
        st.dictionaries(st.text(max_size=5), st.text(max_size=20), max_size=3).map(
            lambda d: json.dumps(d, ensure_ascii=False).encode()
        ),
        min_size=1,
        max_size=6,
    ),
    newline=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=10),
)
def test_arbitrary_json_payloads_survive_any_split(payloads, newline, cuts):
    data = wire(payloads, newline)

    assert datas(parse_in_pieces(data, [c for c in cuts if c <= len(data)])) == payloads


def test_comment_lines_are_skipped():
    data = b": keep-alive\n\n" + b": note\ndata: " + EVENTS[0] + b"\n\n"

    assert datas(parse_in_pieces(data, [3])) == [EVENTS[0]]


@given(cut=st.integers(min_value=0, max_value=5))
def test_a_leading_byte_order_mark_is_dropped_even_when_split(cut):
    data = b"\xef\xbb\xbf" + wire(EVENTS)

    assert datas(parse_in_pieces(data, [cut])) == EVENTS


def test_a_byte_order_mark_later_in_the_stream_is_not_stripped():
    data = wire([b"a"]) + b"\xef\xbb\xbfdata: b\n\n"

    assert datas(parse_in_pieces(data, [])) == [b"a"]  # the BOM makes the field name unknown


def test_multi_line_data_is_joined_with_newlines():
    data = b'data: {"a":\ndata: 1}\n\n'

    assert datas(parse_in_pieces(data, [])) == [b'{"a":\n1}']


def test_the_event_name_is_kept():
    data = b'event: error\ndata: {"error":{"message":"overloaded"}}\n\n'

    (event,) = parse_in_pieces(data, [])

    assert event.name == b"error"


def test_invalid_json_is_passed_on_as_data_for_the_reader_to_refuse():
    data = b"data: {not json\n\n"

    assert datas(parse_in_pieces(data, [4])) == [b"{not json"]


def test_an_event_without_its_blank_line_is_pending_not_delivered():
    parser = SSEParser()

    assert parser.feed(b"data: " + EVENTS[0] + b"\n") == []
    assert parser.pending
    assert parser.close() == []


def test_a_trailing_carriage_return_completes_at_close():
    parser = SSEParser()

    assert parser.feed(b"data: x\r\r") == []  # the last CR might be the start of a CRLF
    assert datas(parser.close()) == [b"x"]


def test_field_without_space_after_colon_is_read():
    assert datas(parse_in_pieces(b"data:x\n\n", [])) == [b"x"]


def test_frame_keeps_multi_line_data_one_event():
    data = b'{"a":\n1}'

    assert datas(parse_in_pieces(frame(data), [])) == [data]


def test_frame_names_the_event_when_given_a_name():
    framed = frame(b'{"type":"message_stop"}', b"message_stop")

    assert framed == b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    assert SSEParser().feed(framed) == [SSEEvent(b'{"type":"message_stop"}', b"message_stop")]


BLOCKS = [
    b'data: {"a":1}',
    b'event: response.created\ndata: {"type":"response.created"}',
    b"event: named\ndata: one\ndata: two",
    b"data:tight",
    b"event:tight\ndata: x",
    b": a comment\ndata: after",
    b"id: 7\nevent: e\ndata: with an id",
    b"event: no data",
    b"retry: 10",
    b"",
    b"event: \ndata: empty name",
    b"data: a\ndata:",
    b"event: a\nevent: b\ndata: the last name wins",
    b"xevent: an unknown field\ndata: unnamed",
    b"data: ",
]


@given(
    blocks=st.lists(st.sampled_from(BLOCKS), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=4),
)
def test_whole_events_read_at_once_are_the_events_read_a_byte_at_a_time(blocks, cuts):
    data = b"".join(block + b"\n\n" for block in blocks)

    at_once = parse_in_pieces(data, [c for c in cuts if c <= len(data)])

    assert at_once == parse_in_pieces(data, list(range(len(data))))
    assert all(type(event) is SSEEvent for event in at_once)


def test_an_event_after_a_split_one_is_read_whole():
    parser = SSEParser()

    assert parser.feed(b"event: a\n") == []
    assert parser.feed(b"data: 1\n\nevent: b\ndata: 2\n\ndata: 3\n\n") == [
        SSEEvent(b"1", b"a"),
        SSEEvent(b"2", b"b"),
        SSEEvent(b"3", b""),
    ]


def test_a_read_of_named_blocks_alone_is_each_block_an_event():
    read = b"event: a\ndata: 1\n\nevent: b\ndata: 2\n\n"

    assert SSEParser().feed(read) == [SSEEvent(b"1", b"a"), SSEEvent(b"2", b"b")]


def test_a_read_of_data_blocks_alone_is_each_block_an_unnamed_event():
    read = b"data: 1\n\ndata: [DONE]\n\n"

    assert SSEParser().feed(read) == [SSEEvent(b"1", b""), SSEEvent(b"[DONE]", b"")]


def test_text_between_named_blocks_is_read_as_the_lines_it_is():
    read = b"event: a\ndata: 1\n\nxyzevent: b\ndata: 2\n\n"

    assert SSEParser().feed(read) == [SSEEvent(b"1", b"a"), SSEEvent(b"2", b"")]


@pytest.mark.parametrize("prefix", [b"event: ", b"data: "])
def test_a_read_of_one_long_line_full_of_block_openings_is_read_in_linear_time(prefix):
    read = prefix * 150_000 + b"\n\n"  # a search from every opening to the line's end: minutes

    with Stopwatch() as watch:
        events = SSEParser().feed(read)

    assert watch.elapsed < watch.scaled(2)
    assert events == ([] if prefix == b"event: " else [SSEEvent(read[6:-2], b"")])  # a name alone is no event
