"""Reading chat completions: what a request asks for and what a reply says (the adapter's reading: test_adapter.py)."""

from __future__ import annotations

import json

from proxy.wire.chat.parse import parse_reply, wants_structured_output


def test_a_json_schema_or_json_object_request_wants_structured_output():
    assert wants_structured_output({"response_format": {"type": "json_schema", "json_schema": {}}})
    assert wants_structured_output({"response_format": {"type": "json_object"}})
    assert not wants_structured_output({"response_format": {"type": "text"}})
    assert not wants_structured_output({"response_format": "json"})
    assert not wants_structured_output({})


def test_a_refusal_in_a_reply_is_read_and_is_no_empty_reply():
    body = {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "No."}}]}

    reply = parse_reply(json.dumps(body).encode())

    assert reply is not None
    assert (reply.refusal, reply.is_empty, reply.is_reasoning_only) == ("No.", False, False)
