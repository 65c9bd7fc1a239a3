"""The Responses format object: what it binds (its route, key header and roles: chains, no
transcript) and its own methods, the streamed request, the ending as a stream and the judge's
call. The behaviour every format shares is in tests/unit/wire/test_contract.py."""

from __future__ import annotations

import json

from proxy.errors import UpstreamError
from proxy.exchange import Note
from proxy.wire.responses.format import RESPONSES
from proxy.wire.responses.relay import ResponsesRelay

PAYLOAD = {"model": "m", "input": "hi"}


def test_responses_has_chains_and_no_transcript_and_takes_its_key_in_authorization():
    assert (RESPONSES.name, RESPONSES.route, RESPONSES.upstream_path) == ("responses", "/v1/responses", "/responses")
    assert RESPONSES.key_header == "authorization"
    assert RESPONSES.chains is not None
    assert RESPONSES.transcript is None


def test_a_stream_keeps_alive_with_a_comment_and_needs_no_trailer():
    assert RESPONSES.stream.keepalive.startswith(b":")
    assert RESPONSES.stream.trailer == b""
    assert RESPONSES.stream.include_usage(PAYLOAD) is True


def test_an_untouched_streamed_request_goes_upstream_as_the_client_sent_it():
    body = json.dumps({**PAYLOAD, "stream": True}).encode()

    assert RESPONSES.stream.render_request(body, {**PAYLOAD, "stream": True}, (), True) is body


def test_a_request_the_proxy_changed_or_did_not_stream_is_rendered_streamed():
    sent = json.loads(RESPONSES.stream.render_request(b"{}", PAYLOAD, (Note("Go on."),), False))

    assert sent["stream"] is True


def test_an_ending_streams_and_errors_as_a_fresh_relay_would_send_them():
    body = RESPONSES.codec.ending("Stopping.", model="m")

    assert RESPONSES.stream.streamed(body, include_usage=True) == ResponsesRelay().ending(body)
    assert RESPONSES.stream.error_event(UpstreamError("gone")) == ResponsesRelay().error(UpstreamError("gone"))


def test_the_judge_asks_without_storing_its_call_with_its_shape_in_text_format():
    schema = {"type": "object"}

    sent = json.loads(RESPONSES.judge.request("Judge.", "Done?", model="m", max_tokens=50, schema=schema))

    assert sent == {
        "model": "m",
        "instructions": "Judge.",
        "input": [{"role": "user", "content": "Done?"}],
        "max_output_tokens": 50,
        "store": False,
        "text": {"format": {"type": "json_schema", "name": "verdict", "schema": schema}},
    }
    assert RESPONSES.judge.path == "/responses"
