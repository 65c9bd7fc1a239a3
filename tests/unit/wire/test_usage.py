"""UsageTap: the usage a pass-through reply reports, read from a bounded tail in any format."""

from __future__ import annotations

import json

import pytest

from proxy.exchange import Usage
from proxy.wire.usage import TAIL_BYTES, UsageTap, named_model


def tapped(*chunks: bytes) -> tuple[Usage, str | None]:
    tap = UsageTap()
    for chunk in chunks:
        tap.feed(chunk)
    return tap.usage()


@pytest.mark.parametrize(
    ("body", "usage", "model"),
    [
        (
            {
                "object": "text_completion",
                "model": "gpt-3.5-turbo-instruct",
                "choices": [{"text": "hi"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
            },
            Usage(5, 7),
            "gpt-3.5-turbo-instruct",
        ),
        (
            {
                "object": "list",
                "data": [{"embedding": [0.1, 0.2]}],
                "model": "text-embedding-3-small",
                "usage": {"prompt_tokens": 8, "total_tokens": 8},
            },
            Usage(8, 0),
            "text-embedding-3-small",
        ),
        (
            {
                "object": "response.compaction",
                "output": [],
                "model": "gpt-5",
                "usage": {"input_tokens": 900, "output_tokens": 100, "input_tokens_details": {"cached_tokens": 50}},
            },
            Usage(900, 100, cached_tokens=50),
            "gpt-5",
        ),
        (
            {"id": "batch_1", "object": "batch", "usage": {"input_tokens": 4000, "output_tokens": 4000}},
            Usage(4000, 4000),
            None,
        ),
        (
            {
                "type": "message",
                "model": "claude-x",
                "usage": {"input_tokens": 10, "cache_read_input_tokens": 30, "output_tokens": 2},
            },
            Usage(40, 2, cached_tokens=30),
            "claude-x",
        ),
        ({"data": [], "usage": {"total_tokens": 6}}, Usage(6, 0), None),
        ({"id": "batch_1", "object": "batch", "status": "validating"}, Usage(), None),
    ],
    ids=["completion", "embeddings", "compact", "batch", "anthropic", "total-only", "no-usage"],
)
def test_a_whole_reply_reports_its_usage_and_model(body, usage, model):
    assert tapped(json.dumps(body).encode()) == (usage, model)


def test_a_stream_reports_the_usage_of_its_last_chunk_that_has_one():
    chunks = [
        b'data: {"model": "gpt-3.5-turbo-instruct", "choices": [{"text": "a"}], "usage": null}\n\n',
        b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}\n\n',
        b"data: [DONE]\n\n",
    ]

    assert tapped(*chunks) == (Usage(3, 4), "gpt-3.5-turbo-instruct")


def test_the_usage_at_the_end_of_a_body_larger_than_the_tail_is_found_and_only_the_tail_kept():
    tap = UsageTap()
    tap.feed(b'{"object": "list", "data": [')
    for _ in range(100):
        tap.feed(b'{"embedding": [' + b"0.123456789," * 400 + b"0.1]},")
    tap.feed(b'{"embedding": [0.1]}], "model": "emb", "usage": {"prompt_tokens": 8000, "total_tokens": 8000}}')

    assert tap.usage() == (Usage(8000, 0), "emb")
    assert len(tap._tail) <= 2 * TAIL_BYTES


def test_a_usage_named_inside_a_string_is_not_read_as_the_replys():
    body = {"choices": [{"text": 'say "usage": {"prompt_tokens": 999}'}], "usage": {"prompt_tokens": 1}}

    assert tapped(json.dumps(body).encode())[0] == Usage(1, 0)


def test_a_request_names_its_model_for_pricing():
    assert named_model(b'{"input": "x", "model": "text-embedding-3-small"}') == "text-embedding-3-small"
    assert named_model(b"--boundary\r\nContent-Disposition: form-data") is None
