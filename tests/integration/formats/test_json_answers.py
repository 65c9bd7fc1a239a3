"""Bare JSON answers in every wire format (issue 31, item 2): when the request asks for a JSON
schema (chat's ``response_format``, the Responses API's ``text.format``, Messages'
``output_config.format``, Gemini's ``responseJsonSchema``), a valid answer the model wrapped in
a fence or a sentence reaches the client as the bare JSON the output contract checked."""

from __future__ import annotations

import pytest

from tests.support.answer_shapes import JSON_REPLIES
from tests.support.turns import turn

SCHEMA = {
    "type": "object",
    "properties": {"paris_c": {"type": "number"}, "berlin_c": {"type": "number"}},
    "required": ["paris_c", "berlin_c"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize(("wrapped", "bare"), list(JSON_REPLIES.values()), ids=list(JSON_REPLIES))
def test_a_wrapped_json_answer_reaches_the_client_bare(wire_format, proxy, fake, stream, wrapped, bare):
    fake.script(turn(wrapped))

    answer = wire_format.ask(proxy, stream=stream, fields=wire_format.asking_json(SCHEMA))

    assert answer.text == bare
    assert answer.headers["x-loopwarden-interventions"] == "json_unwrapped"
    assert len(fake.requests) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_bare_json_answer_passes_untouched(wire_format, proxy, fake, stream):
    fake.script(turn('{"paris_c": 18, "berlin_c": 11}'))

    answer = wire_format.ask(proxy, stream=stream, fields=wire_format.asking_json(SCHEMA))

    assert answer.text == '{"paris_c": 18, "berlin_c": 11}'
    assert answer.headers["x-loopwarden-interventions"] == "none"
