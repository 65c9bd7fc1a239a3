"""What a Messages session records of the transcript the upstream saw (annotated tool results,
nudges) survives hostile histories: a client that makes the proxy annotate a large tool result
at a new position on every request cannot grow the session's state without limit, and one
nested as deep as a body may be never costs a 5xx. Real Redis."""

from __future__ import annotations

import json

import httpx
import pytest
import redis

from proxy.edge.namespaces import caller_namespace
from proxy.loop.continuity import MAX_RECORDED_BYTES
from proxy.session.identity import session_key
from tests.support.fake_messages import said, text, tool_use

AUTH = "Bearer sk-ant-client-" + "5" * 20
HEADERS = {"Authorization": AUTH, "anthropic-version": "2023-06-01", "X-Session-Id": "grows"}
CALL = {"path": "/etc/motd"}
BIG = "x" * 400_000
TOOLS = [{"name": "read", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]


def _request(proxy, messages: list) -> httpx.Response:
    body = {"model": "claude-fake", "max_tokens": 100, "messages": messages, "tools": TOOLS}
    return httpx.post(f"{proxy.base_url}/messages", json=body, headers=HEADERS, timeout=30)


@pytest.fixture(autouse=True)
def _fresh_session(redis_url):
    """Each test starts the session ``grows`` empty: what one test recorded (megabytes of
    transcript, its runs) is no part of the next one's story."""
    with redis.Redis.from_url(redis_url) as client:
        client.delete(session_key(caller_namespace("default", AUTH), "grows"))


def _state_bytes(url: str) -> int:
    key = session_key(caller_namespace("default", AUTH), "grows")
    with redis.Redis.from_url(url) as client:
        return sum(len(name) + len(value) for name, value in client.hgetall(key).items())


TASK = {"role": "user", "content": "Read the motd."}


def _annotating(make_proxy, upstream, write_policies, redis_url):
    """A proxy whose session ``grows`` annotates every result of ``read(CALL)`` from now on (the
    model called it twice, and was warned once)."""
    policies = write_policies(default="loop: {warn_at: 2, block_at: 100}\n")
    proxy = make_proxy(upstream=upstream.url, policies_dir=str(policies), redis_url=redis_url)
    upstream.script(*[said(tool_use("read", CALL, f"t{n}")) for n in range(3)])
    _request(proxy, [TASK])
    _request(proxy, [TASK, {"role": "assistant", "content": [tool_use("read", CALL, "t1")]}, _result("t1", "hi")])
    return proxy


def test_annotated_tool_results_at_ever_new_positions_record_a_bounded_transcript(
    make_proxy, anthropic_upstream, write_policies, redis_url
):
    proxy = _annotating(make_proxy, anthropic_upstream, write_policies, redis_url)
    task = TASK
    filler = [task, {"role": "assistant", "content": [text("ok")]}]

    for turn in range(int(MAX_RECORDED_BYTES / len(BIG)) + 4):
        history = [*filler * (turn + 1), task]
        call_id = f"c{turn}"
        history += [{"role": "assistant", "content": [tool_use("read", CALL, call_id)]}, _result(call_id, BIG)]
        assert _request(proxy, history).status_code == 200

    assert "[LoopWarden]" in anthropic_upstream.requests[-1].body.decode()  # the result was annotated
    assert _state_bytes(redis_url) <= MAX_RECORDED_BYTES + len(BIG) + 10_000


def _result(call_id: str, content: str) -> dict:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": content}]}


def test_an_annotated_tool_result_nested_as_deep_as_a_body_may_be_is_no_5xx(
    make_proxy, anthropic_upstream, write_policies, redis_url
):
    proxy = _annotating(make_proxy, anthropic_upstream, write_policies, redis_url)
    called = {"role": "assistant", "content": [tool_use("read", CALL, "c")]}
    deep = "[" * 900 + "]" * 900
    history = json.dumps([TASK, called, "DEEP"]).replace('"DEEP"', json.dumps(_result("c", "DEEP")))
    raw = history.replace('"DEEP"', deep)

    for _ in range(2):  # annotated (not recorded), then the same history again
        body = f'{{"model": "claude-fake", "max_tokens": 100, "tools": {json.dumps(TOOLS)}, "messages": {raw}}}'
        response = httpx.post(
            f"{proxy.base_url}/messages",
            content=body.encode(),
            headers={**HEADERS, "Content-Type": "application/json"},
            timeout=30,
        )
        assert response.status_code == 200, response.text[:300]
    assert "[LoopWarden]" in anthropic_upstream.requests[-1].body.decode()
