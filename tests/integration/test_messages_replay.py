"""``loopwarden replay`` of a session recorded on /v1/messages: replayed in its own format."""

from __future__ import annotations

import json
from typing import Any

import anthropic

from proxy.cli import main
from tests.support.fake_messages import said, text, thinking, tool_use
from tests.support.waiting import wait_for

TOOLS = [{"name": "search", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]
TASK = [{"role": "user", "content": "How many people live in Lyon?"}]


def run_agent(proxy, session: str, turns: int = 10) -> int:
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant", max_retries=0)
    messages: list[dict[str, Any]] = list(TASK)
    for turn in range(1, turns + 1):
        reply = client.messages.create(
            model="c", max_tokens=500, messages=messages, tools=TOOLS, extra_headers={"X-Session-Id": session}
        )
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            return turn
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": c.id, "content": f"{turn}"} for c in calls],
            }
        )
    return turns


def test_a_messages_recording_replays_through_another_policy(
    make_proxy, write_policies, anthropic_upstream, tmp_path, capsys
):
    path = tmp_path / "messages.jsonl"
    directory = write_policies(
        default=f"mode: shadow\nrecording: {{enabled: true, jsonl_path: '{path}'}}\n",
        enforcing="description: the defaults, enforced\n",
    )
    proxy = make_proxy(upstream=anthropic_upstream.url, policies_dir=directory)
    anthropic_upstream.script(
        *[said(thinking("Again."), tool_use("search", {"q": "lyon"}, f"toolu_{n}")) for n in range(6)],
        said(text("About 520,000 people.")),
    )

    assert run_agent(proxy, "recorded-messages") == 7
    wait_for(lambda: path.exists() and len(path.read_text().splitlines()) >= 7)
    records = [json.loads(line) for line in path.read_text().splitlines()]

    assert {r["wire"] for r in records} == {"messages"}
    assert main(["replay", str(path), "--policy", "enforcing", "--policies-dir", str(directory)]) == 0
    out = capsys.readouterr().out
    assert "=> enforcing would have ended the session at turn" in out
    assert "(loop)" in out
