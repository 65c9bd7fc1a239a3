"""Claude Code itself (``claude -p``) behind the proxy, offline against the fake Messages API.

The ``claude`` binary comes from the npm package ``@anthropic-ai/claude-code`` (see
:mod:`tests.support.agent_clis`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_clis import agent_cli
from tests.support.assertions import summary_of
from tests.support.fake_messages import judge_verdict, said, text, thinking, tool_use

CLAUDE = agent_cli("claude", "LOOPWARDEN_CLAUDE")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CLAUDE is None, reason="Claude Code not installed: npm ci --prefix tests/agents"),
]


def claude(proxy, tmp_path: Path, prompt: str, *extra: str, base_url: str | None = None) -> dict[str, Any]:
    """``claude -p`` pointed at the proxy, or at ``base_url`` (no network but that; its JSON result)."""
    assert CLAUDE is not None
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url or proxy.url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
    }
    done = subprocess.run(
        [CLAUDE, "-p", prompt, "--output-format", "json", *extra],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def shapes(request: Any) -> list[tuple[str, list[str]]]:
    return [
        (m["role"], [b["type"] for b in m["content"]] if isinstance(m["content"], list) else ["str"])
        for m in request.json()["messages"]
    ]


def test_claude_code_answers_through_the_proxy(messages_proxy, anthropic_upstream, tmp_path):
    anthropic_upstream.script(said(thinking("Greeting."), text("Hello from behind LoopWarden.")))

    result = claude(messages_proxy, tmp_path, "Say hi")

    assert result["result"] == "Hello from behind LoopWarden."
    sent = anthropic_upstream.requests[0]
    assert sent.json()["stream"] is True
    assert "claude-code" in (sent.header("anthropic-beta") or "")
    assert json.loads(sent.json()["metadata"]["user_id"])["session_id"] == result["session_id"]


def test_claude_codes_empty_reply_is_nudged_once_then_good(messages_proxy, anthropic_upstream, tmp_path):
    anthropic_upstream.script(said(), said(text("Here is the answer.")))

    result = claude(messages_proxy, tmp_path, "Answer me")

    assert result["result"] == "Here is the answer."
    assert len(anthropic_upstream.requests) == 2


def test_bad_tool_input_is_returned_and_claude_codes_thinking_stays_valid(messages_proxy, anthropic_upstream, tmp_path):
    anthropic_upstream.script(
        said(thinking("List files."), tool_use("Bash", {"cmd": "ls"}, "toolu_1")),  # no "command": returned
        said(
            thinking("Fixed."), tool_use("Bash", {"command": "echo hello-tool", "description": "Say hello"}, "toolu_2")
        ),
        said(thinking("Done."), text("The tool said hello.")),
    )

    result = claude(messages_proxy, tmp_path, "Run echo", "--allowedTools", "Bash")

    assert result["result"] == "The tool said hello."
    assert anthropic_upstream.rejected == []
    returned = anthropic_upstream.requests[1].json()["messages"][-1]["content"][0]
    assert returned["tool_use_id"] == "toolu_1"
    assert "'command' is a required property" in returned["content"]
    last = anthropic_upstream.requests[2]
    assert shapes(last)[-4:] == [
        ("assistant", ["thinking", "tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["thinking", "tool_use"]),
        ("user", ["tool_result"]),
    ]
    assert "hello-tool" in json.dumps(last.json()["messages"][-1])


def test_claude_code_repeating_a_call_is_ended_within_block_at(messages_proxy, anthropic_upstream, tmp_path):
    same = {"command": "date +%s%N", "description": "The time"}  # a new result every time: no "no progress"
    anthropic_upstream.script(*[said(thinking(f"Again {n}."), tool_use("Bash", same, f"toolu_{n}")) for n in range(12)])
    anthropic_upstream.summary = said(text("Found: the time. Missing: nothing new. Next: stop repeating."))

    result = claude(messages_proxy, tmp_path, "Loop", "--allowedTools", "Bash")

    assert "Missing: nothing new" in result["result"]
    assert "LoopWarden stopped this run (loop): Bash was called 5 times with the same arguments." in result["result"]
    summary_call = anthropic_upstream.requests[-1].json()
    runs = [
        b for m in summary_call["messages"] if m["role"] == "user" for b in m["content"] if b["type"] == "tool_result"
    ]
    assert 3 <= len(runs) <= 5, runs  # warned at 3 runs of one call, ended by loop.block_at (5)
    assert anthropic_upstream.rejected == []


def test_claude_p_resume_with_a_new_question_after_an_ending_starts_a_new_run(
    messages_proxy, anthropic_upstream, tmp_path
):
    same = {"command": "date +%s%N", "description": "The time"}
    anthropic_upstream.script(*[said(thinking(f"Again {n}."), tool_use("Bash", same, f"toolu_{n}")) for n in range(12)])
    anthropic_upstream.summary = said(text("Found: the time. Next: stop repeating."))
    ended = claude(messages_proxy, tmp_path, "Loop", "--allowedTools", "Bash")
    assert "LoopWarden stopped this run (loop)" in ended["result"]
    anthropic_upstream.script(said(text("It is noon.")))
    calls = len(anthropic_upstream.requests)

    resumed = claude(
        messages_proxy, tmp_path, "What time is it now?", "--allowedTools", "Bash", "--resume", ended["session_id"]
    )

    assert resumed["result"] == "It is noon."
    assert "LoopWarden stopped this run" not in resumed["result"]
    assert len(anthropic_upstream.requests) > calls
    # A resumed Claude Code sends another system prompt and tool list, so the fake (like the API)
    # refuses the old thinking blocks once and Claude Code resends without them: its own doing,
    # the same without the proxy; the run's ending is not among the refusals.
    assert all("signature" in refusal for refusal in anthropic_upstream.rejected)


def test_claude_codes_session_ends_on_its_step_budget(make_proxy, anthropic_upstream, write_policies, tmp_path):
    proxy = make_proxy(upstream=anthropic_upstream.url, policies_dir=str(write_policies(default="max_steps: 3\n")))
    anthropic_upstream.script(
        *[
            said(thinking("More."), tool_use("Bash", {"command": f"echo {n}", "description": "n"}, f"toolu_{n}"))
            for n in range(5)
        ]
    )
    anthropic_upstream.summary = said(
        thinking("Summing up."), text("Found: 0 and 1. Missing: the rest. Next: continue later.")
    )

    result = claude(proxy, tmp_path, "Count", "--allowedTools", "Bash")

    assert summary_of(result["result"]) == "Found: 0 and 1. Missing: the rest. Next: continue later."
    assert len(anthropic_upstream.requests) == 3  # max_steps, the summary call included
    assert anthropic_upstream.requests[-1].json()["tool_choice"] == {"type": "none"}
    assert anthropic_upstream.rejected == []


def test_a_well_behaved_claude_code_run_reaches_the_model_byte_for_byte(messages_proxy, anthropic_upstream, tmp_path):
    def run(base_url: str | None) -> tuple[dict[str, Any], list[bytes]]:
        anthropic_upstream.reset()
        anthropic_upstream.script(
            said(thinking("Echo."), tool_use("Bash", {"command": "echo hi", "description": "Say hi"}, "toolu_1")),
            said(thinking("Done."), text("It said hi.")),
        )
        result = claude(messages_proxy, tmp_path, "Run echo", "--allowedTools", "Bash", base_url=base_url)
        sent = [r.body.replace(result["session_id"].encode(), b"SESSION") for r in anthropic_upstream.requests]
        return result, [
            body for body, r in zip(sent, anthropic_upstream.requests, strict=True) if r.path == "/v1/messages"
        ]

    direct, straight = run(anthropic_upstream.url.removesuffix("/v1"))
    guarded, through = run(None)

    assert direct["result"] == guarded["result"] == "It said hi."
    assert len(straight) == len(through) == 2
    assert through == straight  # every request, as Claude Code wrote it (its session id aside)


DENY = r"""
permissions:
  rules:
    - id: no-forbidden
      tool: Bash
      when: [{path: $.command, regex: 'forbidden'}]
      action: deny
      message: That command is not allowed here.
"""


def test_claude_code_never_runs_a_denied_call(make_proxy, anthropic_upstream, write_policies, tmp_path):
    proxy = make_proxy(upstream=anthropic_upstream.url, policies_dir=str(write_policies(default=DENY)))
    anthropic_upstream.script(
        said(
            thinking("Try it."), tool_use("Bash", {"command": "echo forbidden > marker", "description": "x"}, "toolu_1")
        ),
        said(thinking("Safer."), tool_use("Bash", {"command": "echo allowed", "description": "y"}, "toolu_2")),
        said(thinking("Done."), text("Ran the allowed command.")),
    )

    result = claude(proxy, tmp_path, "Run it", "--allowedTools", "Bash")

    assert result["result"] == "Ran the allowed command."
    assert not (tmp_path / "marker").exists()
    refused = anthropic_upstream.requests[1].json()["messages"][-1]["content"][0]
    assert refused["tool_use_id"] == "toolu_1"
    assert "not allowed here" in refused["content"]
    assert "allowed" in json.dumps(anthropic_upstream.requests[2].json()["messages"][-1])
    assert anthropic_upstream.rejected == []


def test_claude_codes_premature_done_is_judged_and_continued(messages_proxy, anthropic_upstream, tmp_path):
    verdicts = iter([False])
    anthropic_upstream.judge = lambda request: judge_verdict(request, next(verdicts, True), "no evidence yet")
    anthropic_upstream.script(
        said(thinking("Check."), tool_use("Bash", {"command": "echo 42", "description": "n"}, "toolu_1")),
        said(thinking("Enough."), text("Done.")),
        said(thinking("Properly."), text("The command printed 42, which answers the question.")),
    )

    result = claude(messages_proxy, tmp_path, "What does echo 42 print?", "--allowedTools", "Bash")

    assert result["result"] == "The command printed 42, which answers the question."
    continued = anthropic_upstream.requests[2].json()["messages"]
    assert continued[-2]["content"][-1] == text("Done.")
    assert "no evidence yet" in json.dumps(continued[-1])
    assert anthropic_upstream.rejected == []


def test_the_judge_checks_the_question_claude_code_was_given_not_its_reminders(
    messages_proxy, anthropic_upstream, tmp_path
):
    anthropic_upstream.judge = lambda request: judge_verdict(request, True)
    anthropic_upstream.script(
        said(thinking("Check."), tool_use("Bash", {"command": "echo 42", "description": "n"}, "toolu_1")),
        said(thinking("Enough."), text("It prints 42.")),
    )

    result = claude(messages_proxy, tmp_path, "What does echo 42 print?", "--allowedTools", "Bash")

    assert result["result"] == "It prints 42."
    assert "<system-reminder>" in json.dumps(anthropic_upstream.requests[0].json()["messages"][0])  # what it wraps
    asked = json.dumps(anthropic_upstream.judge_requests[0].json()["messages"])
    found = re.search(r"<task-[0-9a-f]+>\\n(.*?)\\n</task-", asked, re.DOTALL)
    assert found is not None, asked[:400]
    assert found.group(1) == "What does echo 42 print?"
