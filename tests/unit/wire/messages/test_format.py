"""The Messages format object: what it binds (its route, key header and roles: a transcript, no
chains) and its own methods, the streamed request and the judge's call. The behaviour every
format shares is in tests/unit/wire/test_contract.py."""

from __future__ import annotations

import json

from proxy.exchange import Note, Tool
from proxy.wire.messages.format import ANTHROPIC_VERSION, MESSAGES
from proxy.wire.messages.stream import PING

PAYLOAD = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}


def test_messages_has_a_transcript_and_no_chains_and_takes_its_key_in_x_api_key():
    assert (MESSAGES.name, MESSAGES.route, MESSAGES.upstream_path) == ("messages", "/v1/messages", "/messages")
    assert MESSAGES.key_header == "x-api-key"
    assert MESSAGES.chains is None
    assert MESSAGES.transcript is not None


def test_a_stream_keeps_alive_with_pings_and_needs_no_trailer():
    assert MESSAGES.stream.keepalive == PING
    assert MESSAGES.stream.trailer == b""
    assert MESSAGES.stream.include_usage(PAYLOAD) is True


def test_an_untouched_streamed_request_goes_upstream_as_the_client_sent_it():
    body = json.dumps({**PAYLOAD, "stream": True}).encode()

    assert MESSAGES.stream.render_request(body, {**PAYLOAD, "stream": True}, (), True) is body


def test_a_request_the_proxy_changed_or_did_not_stream_is_rendered_streamed():
    sent = json.loads(MESSAGES.stream.render_request(b"{}", PAYLOAD, (Note("Go on."),), False))

    assert sent["stream"] is True
    assert sent["messages"][-1]["role"] == "user"


def test_an_offered_tool_carries_its_schema_as_input_schema():
    tool = Tool("final_answer", {"type": "object"}, description="Give the answer.")

    assert MESSAGES.codec.offered_tool(tool) == {
        "name": "final_answer",
        "description": "Give the answer.",
        "input_schema": {"type": "object"},
    }


def test_the_judge_asks_deterministically_with_its_shape_in_output_config():
    schema = {"type": "object"}

    sent = json.loads(MESSAGES.judge.request("Judge.", "Done?", model="m", max_tokens=50, schema=schema))

    assert sent == {
        "max_tokens": 50,
        "temperature": 0,
        "system": "Judge.",
        "messages": [{"role": "user", "content": "Done?"}],
        "model": "m",
        "output_config": {"format": {"type": "json_schema", "schema": schema}},
    }


def test_the_judge_without_a_model_or_schema_names_neither():
    sent = json.loads(MESSAGES.judge.request("Judge.", "Done?", model=None, max_tokens=50, schema=None))

    assert "model" not in sent
    assert "output_config" not in sent


def test_the_judge_sends_its_key_in_x_api_key_with_the_api_version():
    assert MESSAGES.judge.headers("sk") == [
        ("content-type", "application/json"),
        ("x-api-key", "sk"),
        ("anthropic-version", ANTHROPIC_VERSION),
    ]
    assert MESSAGES.judge.path == "/messages"
