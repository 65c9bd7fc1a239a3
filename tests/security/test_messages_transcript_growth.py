"""What a Messages session records of the transcript the upstream saw (annotated tool results,
nudges) is bounded: a client that makes the proxy annotate a large tool result at a new
position on every request cannot grow the session's state without limit. Real Redis."""

from __future__ import annotations

import httpx
import redis

from proxy.continuity import MAX_RECORDED_BYTES
from proxy.session.identity import session_key
from proxy.tenants import caller_namespace
from tests.support.fake_messages import said, text, tool_use

AUTH = "Bearer sk-ant-client-" + "5" * 20
HEADERS = {"Authorization": AUTH, "anthropic-version": "2023-06-01", "X-Session-Id": "grows"}
CALL = {"path": "/etc/motd"}
BIG = "x" * 400_000
TOOLS = [{"name": "read", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]


def _request(proxy, messages: list) -> httpx.Response:
    body = {"model": "claude-fake", "max_tokens": 100, "messages": messages, "tools": TOOLS}
    return httpx.post(f"{proxy.base_url}/messages", json=body, headers=HEADERS, timeout=30)


def _state_bytes(url: str) -> int:
    key = session_key(caller_namespace("default", AUTH), "grows")
    with redis.Redis.from_url(url) as client:
        return sum(len(name) + len(value) for name, value in client.hgetall(key).items())


def test_annotated_tool_results_at_ever_new_positions_record_a_bounded_transcript(
    make_proxy, anthropic_upstream, write_policies, redis_url
):
    policies = write_policies(default="loop: {warn_at: 2, block_at: 100}\n")
    proxy = make_proxy(upstream=anthropic_upstream.url, policies_dir=str(policies), redis_url=redis_url)
    anthropic_upstream.script(*[said(tool_use("read", CALL, f"t{n}")) for n in range(3)])
    task = {"role": "user", "content": "Read the motd."}
    _request(proxy, [task])
    _request(proxy, [task, {"role": "assistant", "content": [tool_use("read", CALL, "t1")]}, _result("t1", "hi")])
    # The model called read(CALL) twice (warned once): every result of that call is annotated from now on.
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
