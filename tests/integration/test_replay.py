"""``loopwarden replay``: recorded sessions through another policy's guards, offline."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys

import openai
import pytest
import redis

from proxy.cli import main
from tests.support.assertions import recorded_lines
from tests.support.fake_upstream import Json, chat_completion, tool_call
from tests.support.waiting import PATIENCE_SECS, wait_for

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
]
TASK = [{"role": "user", "content": "How many people live in Lyon?"}]


def searching(call_id: str) -> Json:
    return Json(chat_completion(None, tool_calls=[tool_call("search", '{"q": "lyon population"}', call_id)]))


def run_agent(proxy, session: str, max_turns: int = 10) -> int:
    """A hand-written openai SDK tool loop; returns the requests it made."""
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-test", max_retries=0)
    messages = list(TASK)
    for turn in range(1, max_turns + 1):
        message = (
            client.chat.completions.create(
                model="m", messages=messages, tools=TOOLS, extra_headers={"X-Session-Id": session}
            )
            .choices[0]
            .message
        )
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return turn
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "about 520,000"})
    return max_turns


@pytest.fixture
def looping_recording(make_proxy, write_policies, upstream, tmp_path):
    """A session recorded in shadow mode: the model searched the same thing 6 times, then answered."""
    path = tmp_path / "loop.jsonl"
    directory = write_policies(
        default=f"mode: shadow\nrecording: {{enabled: true, jsonl_path: '{path}'}}\n",
        enforcing="description: the defaults, enforced\n",
    )
    proxy = make_proxy(policies_dir=directory)
    upstream.script(*(searching(f"call_{n}") for n in range(6)), Json(chat_completion("About 520,000 people.")))

    assert run_agent(proxy, "looping", max_turns=10) == 7
    recorded_lines(path, 7)
    return path, directory


def test_replay_shows_where_an_enforcing_policy_would_have_ended(looping_recording, capsys):
    path, directory = looping_recording

    assert main(["replay", str(path), "--policy", "enforcing", "--policies-dir", str(directory)]) == 0
    out = capsys.readouterr().out

    assert "recorded with policy default, replayed with enforcing" in out
    assert "loop_warning" in out
    assert "=> enforcing would have ended the session at turn 4 (no_progress)" in out
    assert "the recording shows its policy (in shadow mode) would have ended it at turn 5 (no_progress) of 7" in out


def test_replay_with_a_higher_block_at_lets_the_session_finish(looping_recording, capsys, tmp_path):
    path, _ = looping_recording
    patient = tmp_path / "patient.yaml"
    patient.write_text("loop: {warn_at: 3, block_at: 10}\nno_progress: {enabled: false}\n")

    assert main(["replay", str(path), "--policy", str(patient)]) == 0
    out = capsys.readouterr().out

    assert "=> patient would not have ended the session" in out


def test_replaying_a_passing_session_with_its_own_policy_changes_nothing(
    make_proxy, write_policies, upstream, tmp_path, capsys
):
    path = tmp_path / "good.jsonl"
    directory = write_policies(default=f"recording: {{enabled: true, jsonl_path: '{path}'}}\n")
    proxy = make_proxy(policies_dir=directory)
    upstream.script(searching("call_a"), Json(chat_completion("About 520,000 people live in Lyon.")))
    run_agent(proxy, "good")
    recorded_lines(path, 2)

    assert main(["replay", str(path), "--policy", "default", "--policies-dir", str(directory)]) == 0
    out = capsys.readouterr().out

    rows = [line for line in out.splitlines() if line[:4].strip().isdigit()]
    assert len(rows) == 2
    assert all(" * " not in row for row in rows)
    assert "would not have ended the session" in out


def test_replay_reads_a_redis_stream(make_proxy, write_policies, upstream, redis_url, capsys):
    stream = f"lw-test-replay-{secrets.token_hex(4)}"
    directory = write_policies(default=f"recording: {{enabled: true, redis_stream: {stream}}}\n")
    proxy = make_proxy(policies_dir=directory, redis_url=redis_url)
    client = redis.Redis.from_url(redis_url)
    upstream.script(*(searching(f"call_{n}") for n in range(6)), Json(chat_completion("About 520,000 people.")))
    try:
        run_agent(proxy, f"from-redis-{stream}")
        wait_for(lambda: client.xlen(stream) >= 5)
        code = main(["replay", "--redis-stream", stream, "--redis-url", redis_url, "--policy", "default"])
    finally:
        client.delete(stream)
        client.close()

    assert code == 0
    assert f"session from-redis-{stream}" in capsys.readouterr().out


@pytest.mark.slow
def test_replay_of_a_file_that_is_not_a_recording_exits_2_naming_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"hello": "world"}) + "\n")

    result = subprocess.run(
        [sys.executable, "-m", "proxy", "replay", str(path), "--policy", "default"],
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECS,
    )

    assert result.returncode == 2
    assert "line 1" in result.stderr
