"""No cookie the upstream sets reaches a client.

The provider sets its cookies on the operator's account (the tenant's provider key), so a
relayed ``Set-Cookie`` would hand one account's cookie to every tenant's client. Dropped on
every relayed reply: guarded or pass-through, whole or streamed, success or error, all formats.
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.fake_messages import message_body, said, text
from tests.support.fake_messages import stream_events as messages_events
from tests.support.fake_responses import stream_events as responses_events
from tests.support.fake_responses import text_response
from tests.support.fake_upstream import Json, Sse, chat_completion, stream_chunks

pytestmark = pytest.mark.shared_proxy

COOKIES = {"Set-Cookie": "session=operator-secret; Path=/", "Set-Cookie2": "legacy=operator-secret"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "m", "input": "hi"}
MESSAGES = {**CHAT, "max_tokens": 50}
MESSAGE = message_body(said(text("Hello.")), {"model": "claude-fake"})
ERROR = {"error": {"message": "Bad request.", "type": "invalid_request_error", "code": None}}

CASES = {
    "chat": ("/chat/completions", CHAT, Json(chat_completion(), headers=COOKIES)),
    "chat-stream": ("/chat/completions", {**CHAT, "stream": True}, Sse(stream_chunks("Hello."), headers=COOKIES)),
    "chat-error": ("/chat/completions", CHAT, Json(ERROR, status=400, headers=COOKIES)),
    "responses": ("/responses", RESPONSES, Json(text_response(), headers=COOKIES)),
    "responses-stream": (
        "/responses",
        {**RESPONSES, "stream": True},
        Sse(responses_events(text_response()), done=False, headers=COOKIES),
    ),
    "messages": ("/messages", MESSAGES, Json(MESSAGE, headers=COOKIES)),
    "messages-stream": (
        "/messages",
        {**MESSAGES, "stream": True},
        Sse([data for _, data in messages_events(MESSAGE)], done=False, headers=COOKIES),
    ),
    "passthrough": ("/embeddings", {"model": "e", "input": "hi"}, Json({"data": []}, headers=COOKIES)),
    "passthrough-stream": (
        "/completions",
        {"model": "m", "prompt": "hi", "stream": True},
        Sse([{"choices": [{"text": "Hello."}]}], headers=COOKIES),
    ),
    "passthrough-error": ("/embeddings", {"model": "e", "input": "hi"}, Json(ERROR, status=400, headers=COOKIES)),
}


@pytest.mark.parametrize(("path", "body", "reply"), list(CASES.values()), ids=list(CASES))
def test_the_upstreams_cookies_never_reach_the_client(proxy, upstream, path, body, reply):
    upstream.script(reply)

    response = httpx.post(f"{proxy.base_url}{path}", json=body, headers={"Authorization": "Bearer sk-p"}, timeout=30)

    assert response.status_code == reply.status
    assert len(upstream.requests) == 1
    assert "set-cookie" not in response.headers
    assert "set-cookie2" not in response.headers
    assert "operator-secret" not in response.text
