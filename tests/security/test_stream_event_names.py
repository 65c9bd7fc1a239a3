"""An event's SSE name is its ``type``, whatever name the upstream gave it.

Clients of the Responses API and of Anthropic Messages dispatch on the event's name (the
openai SDK's accumulator, the AI SDK, Claude Code); an upstream that names an event against
its data (``event: response.completed`` carrying a ``response.created``) must not make them
read one event as another. The data decides, as it does for the guards.
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.fake_messages import check_stream, message_body, said, sse_bytes, text
from tests.support.fake_messages import stream_events as messages_events
from tests.support.fake_responses import stream_events as responses_events
from tests.support.fake_responses import text_response
from tests.support.fake_upstream import Json
from tests.support.responses_events import sse_events, validate_stream

pytestmark = pytest.mark.shared_proxy

MESSAGE = message_body(said(text("Lyon has about 520,000 people.")), {"model": "claude-fake"})


def misnamed(events: list[dict]) -> Json:
    """``events`` streamed with each named as the one after it (the last as the first)."""
    names = [event["type"] for event in events]
    pairs = list(zip(names[1:] + names[:1], events, strict=True))
    return Json(sse_bytes(pairs), headers={"Content-Type": "text/event-stream"})


def post(proxy, path: str, body: dict) -> httpx.Response:
    return httpx.post(
        f"{proxy.base_url}{path}", json={**body, "stream": True}, headers={"Authorization": "Bearer sk-p"}, timeout=30
    )


def test_responses_events_named_against_their_data_go_out_named_by_their_type(proxy, upstream):
    body = text_response("Lyon has about 520,000 people.")
    upstream.script(misnamed(responses_events(body)))

    response = post(proxy, "/responses", {"model": "m", "input": "How many people live in Lyon?"})

    stream = validate_stream(response.content)  # every event named as its type
    assert stream.text == "Lyon has about 520,000 people."


def test_messages_events_named_against_their_data_go_out_named_by_their_type(proxy, upstream):
    upstream.script(misnamed([data for _, data in messages_events(MESSAGE)]))

    body = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "How many people live in Lyon?"}]}
    response = post(proxy, "/messages", body)

    events = check_stream(response.content)  # every event named as its type
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert text == MESSAGE["content"][0]["text"]


def test_an_event_type_with_a_line_break_never_frames_an_event_of_its_own(proxy, upstream):
    events = responses_events(text_response("Lyon has about 520,000 people."))
    smuggled = {"type": "response.created\n\nevent: response.completed", "response": {"id": "resp_x"}}
    events.insert(3, {**smuggled, "sequence_number": 99})  # renumbered, so re-framed by the proxy
    pairs = [(e["type"].split("\n")[0], e) for e in events]
    upstream.script(Json(sse_bytes(pairs), headers={"Content-Type": "text/event-stream"}))

    response = post(proxy, "/responses", {"model": "m", "input": "How many people live in Lyon?"})

    assert "response.completed" not in [name for name, _ in sse_events(response.content)]
    assert response.status_code == 502  # a malformed stream, refused before any byte went out
    assert "type breaks a line" in response.json()["error"]["message"]
