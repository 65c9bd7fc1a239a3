"""Ids that many runs share by design never make them one session: a ``prompt_cache_key``
(one per app is common) or an end user's ``metadata.user_id``; and a session id a client's
format carries (Claude Code's, Codex's) names a session only within its tenant. Runs in one
session share its stored ending, which quotes the run's task: one user's text would reach
another."""

from __future__ import annotations

import json

import httpx

from tests.support.fake_messages import said, text
from tests.support.fake_responses import message, response, text_response

POLICY = "empty_response_max_strikes: 1\nfinalize: {use_upstream: false}\n"
KEY = {"Authorization": "Bearer sk-one-tenant-key-" + "0" * 12}


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


def test_one_client_session_id_in_two_tenants_is_two_sessions(
    make_proxy, anthropic_upstream, write_policies, write_tenants
):
    keys = {"alpha": "lw-alpha-" + "1" * 24, "beta": "lw-beta-" + "2" * 24}
    tenants = write_tenants(keys, provider_key="sk-ant-provider-" + "7" * 20)
    policies = write_policies(default=POLICY)
    proxy = make_proxy(upstream=anthropic_upstream.url, tenants_file=tenants, policies_dir=str(policies))
    anthropic_upstream.script(said(text("")), said(text("Beta's answer.")))
    claude_code = json.dumps({"device_id": "d", "account_uuid": "", "session_id": "0fe37a73-3e74"})

    def run(tenant: str, task: str) -> httpx.Response:
        body = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": task}]}
        body["metadata"] = {"user_id": claude_code}
        return httpx.post(f"{proxy.base_url}/messages", json=body, headers={"x-api-key": keys[tenant]})

    alpha = run("alpha", "Alpha's private task")
    beta = run("beta", "Beta's task")

    assert alpha.headers["x-loopwarden-terminated"] == "empty_response"
    assert beta.headers["x-loopwarden-session"] == alpha.headers["x-loopwarden-session"] == "0fe37a73-3e74"
    assert "x-loopwarden-terminated" not in beta.headers
    assert "Alpha" not in beta.text
