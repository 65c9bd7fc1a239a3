"""Codex CLI's built-in provider over a WebSocket to the proxy, and the proxy over a WebSocket
of its own to the scripted upstream that speaks the API's WebSocket mode: guarded as over HTTP,
every call of the run on the upstream socket, no ``failed to connect`` line."""

from __future__ import annotations

import json

import pytest

from tests.support.codex_runs import CODEX, codex, exec_call
from tests.support.fake_responses import message, response, text_response
from tests.support.fake_responses_socket import FakeResponsesSocket
from tests.support.responses_fixtures import socket_fake, socket_server  # noqa: F401 (fixtures)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CODEX is None, reason="Codex CLI not installed: npm ci --prefix tests/agents"),
]


@pytest.fixture
def fake(socket_fake: FakeResponsesSocket) -> FakeResponsesSocket:
    return socket_fake


@pytest.fixture
def proxy(make_proxy, fake):
    return make_proxy(upstream=fake.url)


def run(proxy, tmp_path, **options):
    done = codex(proxy.base_url, tmp_path, builtin=True, **options)
    assert done.returncode == 0, done.stderr
    assert "failed to connect" not in done.stderr + done.stdout
    return done


def test_a_well_behaved_run_passes_untouched_over_the_upstream_socket(proxy, fake, tmp_path):
    fake.script(exec_call("c1"), text_response("Lyon has 522,250 inhabitants."))

    done = run(proxy, tmp_path)

    assert done.stdout.strip().endswith("Lyon has 522,250 inhabitants.")
    assert [r.method for r in fake.requests] == ["WEBSOCKET", "WEBSOCKET"]
    assert "[LoopWarden]" not in json.dumps(fake.socket_payloads())
    assert fake.rejections == []


def test_an_empty_reply_is_nudged_on_the_upstream_socket(proxy, fake, tmp_path):
    fake.script(response(message("")), text_response("Lyon has 522,250 inhabitants."))

    done = run(proxy, tmp_path)

    assert done.stdout.strip() == "Lyon has 522,250 inhabitants."
    assert [r.method for r in fake.requests] == ["WEBSOCKET", "WEBSOCKET"]
    assert "Your last reply was empty" in json.dumps(fake.socket_payloads()[1]["input"])
    assert fake.rejections == []


def test_a_loop_is_ended_over_the_upstream_socket(proxy, fake, tmp_path):
    fake.script(*[exec_call(f"c{n}") for n in range(7)], text_response("Lyon: 522,250."))

    done = run(proxy, tmp_path)

    assert "LoopWarden stopped this run (loop)" in done.stdout
    assert {r.method for r in fake.requests} == {"WEBSOCKET"}
    assert "_lw" not in json.dumps([payload.get("previous_response_id") for payload in fake.socket_payloads()])
    assert fake.rejections == []


def test_a_budget_ends_the_run_with_a_summary_made_over_the_upstream_socket(make_proxy, fake, write_policies, tmp_path):
    proxy = make_proxy(upstream=fake.url, policies_dir=str(write_policies(default="budgets: {max_tokens: 40000}\n")))
    fake.script(
        response(exec_call("c1")["output"][1], usage=(30000, 100)),
        text_response("Found: 522,250. Missing: a source. Next: cite INSEE."),
    )

    done = run(proxy, tmp_path)

    assert done.stdout.strip().endswith("Found: 522,250. Missing: a source. Next: cite INSEE.")
    summary = fake.socket_payloads()[-1]
    assert summary["tool_choice"] == "none"
    assert {r.method for r in fake.requests} == {"WEBSOCKET"}
    assert fake.rejections == []
