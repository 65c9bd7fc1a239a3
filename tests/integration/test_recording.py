"""Opt-in recording: one redacted record per upstream step, to a JSON Lines file or a Redis stream."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import httpx
import pytest
import redis

from proxy.edge.app import create_app
from proxy.policy.loader import PolicyError
from proxy.settings import Settings
from tests.support.fake_upstream import Json, Sse, chat_completion, stream_chunks
from tests.support.waiting import wait_for

TASK = {"model": "m", "messages": [{"role": "user", "content": "Say hello."}]}


def recorded_lines(path: Path, count: int) -> list[dict]:
    """The file's records once it holds ``count`` of them (the recorder writes in the background)."""

    def lines() -> list[dict]:
        text = path.read_text() if path.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    if not wait_for(lambda: len(lines()) >= count):
        raise AssertionError(f"{path} did not reach {count} records")
    return lines()


def post(proxy, body=TASK, **headers):
    return httpx.post(
        f"{proxy.base_url}/chat/completions",
        json=body,
        headers={"Authorization": "Bearer sk-client-key-123456", **headers},
        timeout=10,
    )


@pytest.fixture
def recording_proxy(make_proxy, write_policies, tmp_path):
    path = tmp_path / "steps.jsonl"
    directory = write_policies(default=f"recording: {{enabled: true, jsonl_path: '{path}'}}\n")
    return make_proxy(policies_dir=directory), path


def test_recording_is_off_unless_the_policy_opts_in(make_proxy, upstream, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proxy = make_proxy(policies_dir=tmp_path)
    upstream.script(Json(chat_completion("hi")))

    assert post(proxy).status_code == 200
    time.sleep(0.2)
    assert list(tmp_path.iterdir()) == []


def test_each_upstream_step_is_recorded_with_its_verdict(recording_proxy, upstream):
    proxy, path = recording_proxy
    upstream.script(Json(chat_completion(None)), Json(chat_completion("Hello.")))

    assert post(proxy, **{"X-Session-Id": "rec-1"}).status_code == 200
    first, second = recorded_lines(path, 2)

    assert (first["session"], first["attempt"], first["verdict"]) == ("rec-1", 1, "empty_nudge")
    assert first["request"]["messages"] == TASK["messages"]
    assert first["messages"][0]["role"] == "user"  # the nudge the model got
    assert (second["attempt"], second["verdict"], second["reply"]["content"]) == (2, "pass", "Hello.")
    assert "request" not in second
    assert first["request_id"] == second["request_id"]


def test_keys_are_redacted_and_headers_never_recorded(recording_proxy, upstream):
    proxy, path = recording_proxy
    upstream.script(Json(chat_completion("Your key sk-abcdefghijklmnop is noted.")))
    body = {"model": "m", "messages": [{"role": "user", "content": "my key is sk-live1234567890abcd"}]}

    assert post(proxy, body).status_code == 200
    (record,) = recorded_lines(path, 1)
    text = json.dumps(record)

    assert "sk-live1234567890abcd" not in text
    assert "sk-abcdefghijklmnop" not in text
    assert "sk-client-key-123456" not in text
    assert "[REDACTED]" in record["request"]["messages"][0]["content"]


def test_shadow_mode_records_what_it_would_have_done(make_proxy, write_policies, upstream, tmp_path):
    path = tmp_path / "shadow.jsonl"
    directory = write_policies(default=f"mode: shadow\nrecording: {{enabled: true, jsonl_path: '{path}'}}\n")
    proxy = make_proxy(policies_dir=directory)
    upstream.script(Json(chat_completion(None)))

    assert post(proxy).status_code == 200
    (record,) = recorded_lines(path, 1)

    assert (record["mode"], record["verdict"], record["shadow"]) == ("shadow", "pass", ["empty_nudge"])


def test_steps_are_added_to_a_redis_stream(make_proxy, write_policies, upstream, redis_url):
    stream = f"lw-test-recording-{secrets.token_hex(4)}"
    directory = write_policies(default=f"recording: {{enabled: true, redis_stream: {stream}}}\n")
    proxy = make_proxy(policies_dir=directory, redis_url=redis_url)
    client = redis.Redis.from_url(redis_url)
    upstream.script(Json(chat_completion("Hello.")))
    try:
        assert post(proxy, **{"X-Session-Id": "rec-redis"}).status_code == 200
        wait_for(lambda: client.xlen(stream) >= 1)
        ((_, fields),) = client.xrange(stream)
        record = json.loads(fields[b"record"])
    finally:
        client.delete(stream)
        client.close()

    assert (record["session"], record["verdict"], record["reply"]["content"]) == ("rec-redis", "pass", "Hello.")


def test_a_redis_stream_target_without_redis_fails_at_start(write_policies, upstream):
    directory = write_policies(default="recording: {enabled: true, redis_stream: steps}\n")

    with pytest.raises(PolicyError, match="no --redis-url"):
        create_app(Settings(upstream=upstream.url, policies_dir=directory))


def test_a_streamed_reply_is_recorded_assembled(recording_proxy, upstream):
    proxy, path = recording_proxy
    upstream.script(Sse(stream_chunks("Hello from a stream.")))

    with httpx.stream(
        "POST",
        f"{proxy.base_url}/chat/completions",
        json={**TASK, "stream": True},
        headers={"Authorization": "Bearer sk-client-key-123456"},
        timeout=10,
    ) as response:
        assert response.status_code == 200
        response.read()
    (record,) = recorded_lines(path, 1)

    assert (record["stream"], record["reply"]["content"]) == (True, "Hello from a stream.")


def test_a_request_nested_too_deeply_to_record_is_served_and_its_step_dropped(recording_proxy, upstream):
    proxy, path = recording_proxy
    deep = "[" * 900 + "]" * 900
    body = json.dumps({**TASK, "extra": "DEEP"}).replace('"DEEP"', deep)

    response = httpx.post(
        f"{proxy.base_url}/chat/completions",
        content=body.encode(),
        headers={"Authorization": "Bearer sk-client-key-123456", "Content-Type": "application/json"},
        timeout=10,
    )

    assert response.status_code == 200, response.text[:300]
    assert post(proxy).status_code == 200  # and the recorder goes on
    assert [line["request"]["messages"][0]["content"] for line in recorded_lines(path, 1)] == ["Say hello."]
