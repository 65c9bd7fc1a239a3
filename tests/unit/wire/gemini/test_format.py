"""The Gemini wire format: its registration, its errors in Google's shape, its judge."""

from __future__ import annotations

import json

from proxy.errors import InvalidRequest, ProxyError
from proxy.wire.gemini.format import GEMINI, status_name
from proxy.wire.registry import format_named, passthrough_format


def test_it_is_registered_under_its_name_and_mount():
    assert format_named("gemini") is GEMINI
    assert GEMINI.route == "/v1beta"
    assert GEMINI.key_header == "x-goog-api-key"


def test_an_error_is_in_googles_shape():
    body = json.loads(GEMINI.codec.error_body(InvalidRequest("Bad field.")))

    assert body == {"error": {"code": 400, "message": "Bad field.", "status": "INVALID_ARGUMENT"}}


def test_a_stream_error_is_a_data_event_of_the_same_shape():
    event = GEMINI.stream.error_event(ProxyError("Broke."))

    assert event.startswith(b"data: ")
    assert json.loads(event[6:])["error"]["status"] == "INTERNAL"


def test_statuses_map_to_googles_codes():
    assert [status_name(s) for s in (401, 403, 404, 429, 503, 418)] == [
        "UNAUTHENTICATED",
        "PERMISSION_DENIED",
        "NOT_FOUND",
        "RESOURCE_EXHAUSTED",
        "UNAVAILABLE",
        "FAILED_PRECONDITION",
    ]


def test_passed_through_calls_below_v1_are_geminis_when_they_are():
    assert passthrough_format("/v1beta/models", lambda name: None) is GEMINI
    assert passthrough_format("/v1/models/g:countTokens", lambda name: None) is GEMINI
    assert passthrough_format("/v1/models", lambda name: None) is None


def test_a_streamed_answer_read_whole_is_a_reply():
    body = b'data: {"candidates":[{"content":{"parts":[{"text":"Done"}]},"finishReason":"STOP"}]}\r\n\r\n'

    reply = GEMINI.codec.parse_reply(body)

    assert reply is not None
    assert reply.content == "Done"


def test_the_judge_asks_for_its_schema_in_the_generation_config():
    body = json.loads(GEMINI.judge.request("Judge.", "Done?", model=None, max_tokens=50, schema={"type": "object"}))

    assert body["generationConfig"] == {
        "temperature": 0,
        "maxOutputTokens": 50,
        "responseMimeType": "application/json",
        "responseJsonSchema": {"type": "object"},
    }
