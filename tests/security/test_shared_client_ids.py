"""Ids that many runs share by design never make them one session: a ``prompt_cache_key``
(one per app is common) or an end user's ``metadata.user_id``. Runs in one session share its
stored ending, which quotes the run's task: one user's text would reach another."""

from __future__ import annotations

import httpx
import pytest

from tests.support.fake_messages import said, text
from tests.support.fake_responses import FakeResponses, message, response, text_response

POLICY = "empty_response_max_strikes: 1\nfinalize: {use_upstream: false}\n"
KEY = {"Authorization": "Bearer sk-one-tenant-key-" + "0" * 12}


@pytest.fixture(scope="module")
def _responses_server():
    server = FakeResponses().start()
    yield server
    server.stop()


@pytest.fixture
def fake(_responses_server):
    _responses_server.reset()
    yield _responses_server
    _responses_server.reset()


def test_two_runs_with_one_prompt_cache_key_never_share_an_ending(make_proxy, fake, write_policies):
    proxy = make_proxy(upstream=fake.url, policies_dir=str(write_policies(default=POLICY)))
    fake.script(response(message("")), text_response("Bob's answer."))

    def run(task: str) -> httpx.Response:
        body = {"model": "m", "input": task, "prompt_cache_key": "app-v1"}
        return httpx.post(f"{proxy.base_url}/responses", json=body, headers=KEY)

    alice = run("Alice's private question")
    bob = run("Bob's unrelated question")

    assert alice.headers["x-loopwarden-terminated"] == "empty_response"
    assert "x-loopwarden-terminated" not in bob.headers
    assert "Alice" not in bob.text
    assert bob.headers["x-loopwarden-session"] != alice.headers["x-loopwarden-session"]


def test_two_runs_of_one_end_user_id_never_share_an_ending(make_proxy, anthropic_upstream, write_policies):
    proxy = make_proxy(upstream=anthropic_upstream.url, policies_dir=str(write_policies(default=POLICY)))
    anthropic_upstream.script(said(text("")), said(text("Bob's answer.")))

    def run(task: str) -> httpx.Response:
        body = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": task}]}
        body["metadata"] = {"user_id": "end-user-42"}
        return httpx.post(f"{proxy.base_url}/messages", json=body, headers=KEY)

    alice = run("Alice's private question")
    bob = run("Bob's unrelated question")

    assert alice.headers["x-loopwarden-terminated"] == "empty_response"
    assert "x-loopwarden-terminated" not in bob.headers
    assert "Alice" not in bob.text
