"""Codex CLI itself (``codex exec``) through the proxy, against misbehaving models.

Codex speaks only the Responses API: a custom provider with ``wire_api = "responses"``
(HTTP, streamed, ``store: false``, the whole input every turn), or the built-in provider
with ``openai_base_url``, which first tries a WebSocket on ``/v1/responses``. The binary
comes from the npm package ``@openai/codex`` (see :mod:`tests.support.agent_clis`).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.codex_runs import CODEX, codex, exec_call
from tests.support.fake_responses import function_call, message, reasoning, response, text_response, verdict
from tests.support.responses_fixtures import fake, proxy, responses_server  # noqa: F401 (fixtures)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CODEX is None, reason="Codex CLI not installed: npm ci --prefix tests/agents"),
]


TRANSPORTS = pytest.mark.parametrize("builtin", [False, True], ids=["http", "websocket"])
"""The recommended custom provider (HTTP), and the built-in one (a WebSocket to the proxy)."""


def outputs(payload: dict) -> list[dict]:
    return [item for item in payload["input"] if item.get("type") == "function_call_output"]


@TRANSPORTS
def test_a_well_behaved_run_passes_untouched(proxy, fake, tmp_path, builtin):
    fake.script(exec_call("c1"), text_response("Lyon has 522,250 inhabitants."))

    done = codex(proxy.base_url, tmp_path, builtin=builtin)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("Lyon has 522,250 inhabitants.")
    assert len(fake.requests) == 2
    assert b"[LoopWarden]" not in fake.requests[1].body
    assert fake.rejections == []


@TRANSPORTS
def test_an_empty_reply_is_nudged_once_and_codex_sees_only_the_good_one(proxy, fake, tmp_path, builtin):
    fake.script(response(message("")), text_response("Lyon has 522,250 inhabitants."))

    done = codex(proxy.base_url, tmp_path, builtin=builtin)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Lyon has 522,250 inhabitants."
    assert len(fake.requests) == 2


def test_a_reasoning_only_model_is_ended_gracefully(proxy, fake, tmp_path):
    fake.script(*[response(reasoning("Hmm.")) for _ in range(3)], text_response("Found: nothing. Next: ask a person."))

    done = codex(proxy.base_url, tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("Found: nothing. Next: ask a person.")
    assert fake.rejections == []


@TRANSPORTS
def test_codex_prints_the_notice_of_why_loopwarden_stopped_the_run(proxy, fake, tmp_path, builtin):
    fake.script(*[exec_call(f"c{n}") for n in range(7)], text_response("Lyon: 522,250."))

    done = codex(proxy.base_url, tmp_path, builtin=builtin)

    assert done.returncode == 0, done.stderr
    assert (
        "LoopWarden stopped this run (loop): exec_command was called 5 times with the same arguments. "
        "Send a new instruction to continue."
    ) in done.stdout


def test_a_command_repeated_forever_is_ended_within_block_at(proxy, fake, tmp_path):
    fake.script(
        *[exec_call(f"c{n}") for n in range(7)], text_response("Lyon: 522,250. I stopped repeating the command.")
    )

    done = codex(proxy.base_url, tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("I stopped repeating the command.")
    executed = [item for item in outputs(fake.agent_payloads[-1]) if "[LoopWarden]" not in item["output"]]
    assert len({item["call_id"] for item in executed}) <= 4
    assert fake.rejections == []


def test_codex_exec_resume_with_a_new_question_after_an_ending_starts_a_new_run(proxy, fake, tmp_path):
    fake.script(*[exec_call(f"c{n}") for n in range(7)], text_response("Lyon: 522,250."))
    ended = codex(proxy.base_url, tmp_path)
    assert "LoopWarden stopped this run (loop)" in ended.stdout
    calls = len(fake.requests)
    fake.script(text_response("The source is INSEE, 2021 census."))

    done = codex(proxy.base_url, tmp_path, "Which source gives that number?", resume=True)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("The source is INSEE, 2021 census.")
    assert "LoopWarden stopped this run" not in done.stdout.split("Which source gives that number?")[-1]
    assert len(fake.requests) == calls + 1
    assert fake.rejections == []


def test_bad_arguments_go_back_to_the_model_with_their_path(proxy, fake, tmp_path):
    fake.script(exec_call("c1", '{"command": "echo x"}'), exec_call("c2"), text_response("Lyon: 522,250."))

    done = codex(proxy.base_url, tmp_path)

    assert done.returncode == 0, done.stderr
    feedback = outputs(fake.agent_payloads[1])[-1]
    assert feedback["call_id"] == "c1"
    assert "'cmd' is a required property" in feedback["output"]
    assert "Additional properties are not allowed" in feedback["output"]
    executed = outputs(fake.agent_payloads[2])
    assert [item["call_id"] for item in executed] == ["c2"]
    assert "lyon-522250" in executed[0]["output"]


def test_a_premature_done_is_judged_and_continued(proxy, fake, tmp_path):
    fake.judge = lambda request: verdict(request, False, "no source was cited")
    fake.script(
        exec_call("c1"),
        text_response("About 500k."),
        exec_call("c2", '{"cmd": "echo insee-2021"}'),
        text_response("Lyon has 522,250 inhabitants (INSEE, 2021 census), checked with two commands. " * 4),
    )

    done = codex(proxy.base_url, tmp_path)

    assert done.returncode == 0, done.stderr
    assert "INSEE, 2021 census" in done.stdout
    assert "About 500k." not in done.stdout
    assert len(fake.judge_requests) == 1


def judged_task(recorded) -> str:
    """The task a judge request asked about (the text inside its nonce-named task tags)."""
    asked = json.dumps(recorded.json()["input"])
    found = re.search(r"<task-[0-9a-f]+>\\n(.*?)\\n</task-", asked, re.DOTALL)
    assert found is not None, asked[:400]
    return found.group(1)


def test_the_judge_checks_the_question_codex_was_given_not_its_environment_context(proxy, fake, tmp_path):
    fake.judge = lambda request: verdict(request, True)
    fake.script(exec_call("c1"), text_response("About 522k."))

    done = codex(proxy.base_url, tmp_path, "How many people live in Lyon?")

    assert done.returncode == 0, done.stderr
    first_input = fake.agent_payloads[0]["input"]
    assert "<environment_context>" in json.dumps(first_input)  # what Codex sends before the question
    assert judged_task(fake.judge_requests[0]) == "How many people live in Lyon?"


@TRANSPORTS
def test_a_budget_ends_the_run_with_a_summary(make_proxy, fake, write_policies, tmp_path, builtin):
    proxy = make_proxy(upstream=fake.url, policies_dir=str(write_policies(default="budgets: {max_tokens: 40000}\n")))
    fake.script(
        response(function_call("exec_command", '{"cmd": "echo lyon-522250"}', "c1"), usage=(30000, 100)),
        text_response("Found: 522,250. Missing: a source. Next: cite INSEE."),
    )

    done = codex(proxy.base_url, tmp_path, builtin=builtin)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("Found: 522,250. Missing: a source. Next: cite INSEE.")
    summary = fake.agent_payloads[-1]
    assert summary["tool_choice"] == "none"
    assert "stream" not in summary


def test_the_built_in_provider_runs_over_the_websocket_without_a_failed_connect(proxy, fake, tmp_path):
    fake.script(text_response("Hello over the socket."))

    done = codex(proxy.base_url, tmp_path, "Say hello.", builtin=True)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Hello over the socket."
    assert "failed to connect" not in done.stderr + done.stdout
    assert "Reconnecting" not in done.stderr
    assert [(r.method, r.path) for r in fake.requests] == [("POST", "/v1/responses")]
    assert json.loads(fake.requests[0].body)["stream"] is True
