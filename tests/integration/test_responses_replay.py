"""``loopwarden replay`` of a recorded Responses session: the records name their format and
the replayed upstream answers in it, so another policy's guards judge the same turns."""

from __future__ import annotations

import itertools

from proxy.cli import main
from tests.support.fake_responses import function_call, reasoning, response, text_response
from tests.support.responses_clients import checked_sdk, run_agent
from tests.support.responses_fixtures import fake, responses_server  # noqa: F401 (fixtures)
from tests.support.waiting import wait_for

TOOLS = [
    {
        "type": "function",
        "name": "search",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    }
]
TASK = [{"role": "user", "content": "How many people live in Lyon?"}]


def test_a_recorded_responses_loop_replays_under_an_enforcing_policy(
    make_proxy, write_policies, fake, tmp_path, capsys
):
    path = tmp_path / "loop.jsonl"
    directory = write_policies(
        default=f"mode: shadow\nrecording: {{enabled: true, jsonl_path: '{path}'}}\n",
        enforcing="description: the defaults, enforced\n",
    )
    proxy = make_proxy(upstream=fake.url, policies_dir=directory)
    fake.script(
        *(response(reasoning("Search."), function_call("search", '{"q": "lyon"}', f"c{n}")) for n in range(6)),
        text_response("About 520,000 people."),
    )
    counter = itertools.count()
    with checked_sdk(proxy.base_url) as (client, _):
        turns, *_ = run_agent(
            client, lambda call: f"about 520,000 (#{next(counter)})", TASK, model="m", tools=TOOLS,
            extra_headers={"X-Session-Id": "r-loop"},
        )  # fmt: skip
    assert turns == 7
    wait_for(lambda: path.exists() and len(path.read_text().splitlines()) >= 7)

    assert main(["replay", str(path), "--policy", "enforcing", "--policies-dir", str(directory)]) == 0
    out = capsys.readouterr().out

    assert "recorded with policy default, replayed with enforcing" in out
    assert "=> enforcing would have ended the session at turn 5 (loop)" in out
