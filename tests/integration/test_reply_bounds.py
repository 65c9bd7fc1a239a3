"""A guarded reply is held until its verdict, so its size is bounded (``max_reply_bytes``): a
longer stream ends with an error event in its format's shape, a longer whole reply is a 502
in the API's shape; and a large stream that finished leaves nothing of itself behind."""

from __future__ import annotations

import gc
import json
import time
import tracemalloc

import httpx
import pytest

from tests.support.fake_upstream import Json, Sse, chat_completion
from tests.support.long_streams import ROUTES, long_stream, request_body

MiB = 1024 * 1024
KEYS = {"Authorization": "Bearer sk-client", "x-api-key": "sk-client", "anthropic-version": "2023-06-01"}


def _stream(proxy, fmt: str) -> tuple[int, bytes]:
    with httpx.stream("POST", proxy.base_url + ROUTES[fmt], json=request_body(fmt), headers=KEYS, timeout=60) as reply:
        return reply.status_code, b"".join(reply.iter_bytes())


def _last_event(raw: bytes) -> tuple[str | None, dict]:
    """The name and data of the stream's last event."""
    last = [block for block in raw.split(b"\n\n") if block.strip()][-1]
    name = None
    data = b""
    for line in last.split(b"\n"):
        if line.startswith(b"event:"):
            name = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data += line[5:].strip()
    return name, json.loads(data)


def _error_message(fmt: str, name: str | None, data: dict) -> str:
    """The message of a stream's error event, as each format's SDK reads it."""
    if fmt == "chat":
        return data["error"]["message"]
    assert name == "error"
    assert data["type"] == "error"
    return data["error"]["message"] if fmt == "messages" else data["message"]


@pytest.mark.parametrize("fmt", ["chat", "responses", "messages"])
def test_a_stream_longer_than_max_reply_bytes_ends_with_an_error_event(make_proxy, upstream, fmt):
    proxy = make_proxy(max_reply_bytes=MiB)
    upstream.script(long_stream(fmt, megabytes=4))

    status, raw = _stream(proxy, fmt)

    assert status == 200
    assert "max_reply_bytes" in _error_message(fmt, *_last_event(raw))
    assert b"[DONE]" not in raw
    assert len(raw) < 2 * MiB


def test_a_stream_cut_at_max_reply_bytes_is_not_read_further(make_proxy, upstream):
    proxy = make_proxy(max_reply_bytes=MiB)
    upstream.script(long_stream("chat", megabytes=50))

    _stream(proxy, "chat")

    deadline = time.monotonic() + 30  # the upstream notices at its next write
    while not upstream.stream_aborts and time.monotonic() < deadline:
        time.sleep(0.01)
    assert upstream.stream_aborts  # the proxy hung up on it, long before the 50 MB were sent


def test_a_whole_reply_longer_than_max_reply_bytes_is_a_502_in_the_apis_shape(make_proxy, upstream):
    proxy = make_proxy(max_reply_bytes=MiB)
    upstream.script(Json(chat_completion("x" * (2 * MiB))))

    reply = httpx.post(
        proxy.base_url + "/chat/completions",
        json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]},
        headers=KEYS,
        timeout=30,
    )

    assert reply.status_code == 502
    assert reply.json()["error"]["code"] == "upstream_reply_too_large"


def test_a_non_streamed_answer_to_a_stream_longer_than_max_reply_bytes_is_a_502(make_proxy, upstream):
    proxy = make_proxy(max_reply_bytes=MiB)
    upstream.script(Json(chat_completion("x" * (2 * MiB))))  # an upstream that ignores "stream"

    status, raw = _stream(proxy, "chat")

    assert status == 502
    assert json.loads(raw)["error"]["code"] == "upstream_reply_too_large"


def test_a_passthrough_relay_is_not_bounded(make_proxy, upstream):
    proxy = make_proxy(max_reply_bytes=MiB)
    upstream.script(Sse(["x" * 100_000] * 30))  # 3 MB relayed as it comes, nothing held

    reply = httpx.post(proxy.base_url + "/completions", json={"model": "m", "prompt": "p"}, headers=KEYS, timeout=30)

    assert reply.status_code == 200
    assert len(reply.content) > 3_000_000


@pytest.mark.parametrize(
    ("fmt", "text_megabytes", "state"),
    [  # Responses carries its text three times: 20 MB on the wire
        ("chat", 20, "memory"),
        ("responses", 7, "memory"),
        ("messages", 20, "memory"),
        ("responses", 7, "redis"),
        ("messages", 20, "redis"),
    ],
)
def test_nothing_of_a_finished_large_stream_survives_it(make_proxy, upstream, request, fmt, text_megabytes, state):
    proxy = make_proxy(**({"redis_url": request.getfixturevalue("redis_url")} if state == "redis" else {}))
    upstream.script(long_stream(fmt, megabytes=0.1))
    assert _stream(proxy, fmt)[0] == 200  # first use: imports, caches and pools are filled
    upstream.script(long_stream(fmt, megabytes=text_megabytes))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        status, raw = _stream(proxy, fmt)
        assert status == 200
        assert len(raw) > 20_000_000
        assert b"max_reply_bytes" not in raw[-1000:]  # the stream completed, not cut
        del raw
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 1_000_000  # of over 20 MB streamed through the proxy
