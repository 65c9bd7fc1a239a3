"""Gemini's paths: which calls are guarded, what is passed through, and the key in the query."""

from __future__ import annotations

import pytest

from proxy.wire.gemini.address import ADDRESSING, keyed


@pytest.mark.parametrize(
    ("path", "model", "stream"),
    [
        (b"/v1beta/models/gemini-2.5-flash:generateContent", "gemini-2.5-flash", False),
        (b"/v1beta/models/gemini-2.5-flash:streamGenerateContent", "gemini-2.5-flash", True),
        (b"/v1/models/gemini-2.5-pro:generateContent", "gemini-2.5-pro", False),
        (b"/v1beta/models/g%3AGenerateContent", "g", False),
    ],
)
def test_a_model_call_is_guarded_in_every_spelling(path, model, stream):
    address = ADDRESSING.guarded(path)

    assert address is not None
    assert (address.model, address.stream) == (model, stream)


@pytest.mark.parametrize("path", [b"/v1beta/models/g:countTokens", b"/v1beta/models", b"/v1/models"])
def test_other_calls_are_passed_through(path):
    assert ADDRESSING.guarded(path) is None


def test_the_openai_model_list_stays_openais():
    assert not ADDRESSING.claims("/v1/models", lambda name: None)
    assert ADDRESSING.claims("/v1/models", lambda name: "k" if name == b"x-goog-api-key" else None)
    assert ADDRESSING.claims("/v1/models/g:countTokens", lambda name: None)


def test_a_stream_always_asks_for_server_sent_events():
    assert ADDRESSING.upstream_query(b"", True) == b"alt=sse"
    assert ADDRESSING.upstream_query(b"alt=json&x=1", True) == b"x=1&alt=sse"
    assert ADDRESSING.upstream_query(b"x=1", False) == b"x=1"


def test_the_passed_through_path_takes_the_bases_version():
    assert ADDRESSING.passthrough_path(b"/v1beta/models/g:countTokens") == b"/v1/models/g:countTokens"


def test_a_key_in_the_query_moves_into_the_header():
    query, headers = keyed(b"alt=sse&key=gk-1", [(b"accept", b"*/*")])

    assert query == b"alt=sse"
    assert headers == [(b"accept", b"*/*"), (b"x-goog-api-key", b"gk-1")]


def test_a_key_already_in_the_header_wins():
    query, headers = keyed(b"key=gk-query", [(b"x-goog-api-key", b"gk-header")])

    assert query == b""
    assert headers == [(b"x-goog-api-key", b"gk-header")]


def test_paths_read_before_are_kept_in_a_bounded_table():
    from proxy.wire.gemini import address

    for n in range(address._KNOWN_PATHS * 3):
        assert ADDRESSING.guarded(f"/v1beta/models/m{n}:generateContent".encode()) is not None
    assert len(address._addresses) <= address._KNOWN_PATHS
    long = b"/v1beta/models/" + b"m" * 600 + b":streamGenerateContent"
    assert ADDRESSING.guarded(long) == ADDRESSING.guarded(long)
    assert long not in address._addresses


def test_a_stream_without_a_query_of_its_own_asks_for_events_and_a_call_keeps_its_own():
    assert ADDRESSING.upstream_query(b"alt=sse", True) == b"alt=sse"
    assert ADDRESSING.upstream_query(b"alt=sse", False) == b"alt=sse"
    assert ADDRESSING.upstream_query(b"", False) == b""
