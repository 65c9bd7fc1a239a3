"""``loopwarden replay`` of a session recorded in any wire format: the records name their format
and the replayed upstream answers in it, so another policy's guards judge the same turns."""

from __future__ import annotations

import itertools

from proxy.cli import main
from tests.support.assertions import recorded_lines
from tests.support.formats import Tool
from tests.support.turns import Call, Turn, turn

SEARCH = Tool("search", {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})


def test_a_recorded_loop_replays_under_an_enforcing_policy(
    wire_format, make_proxy, write_policies, fake, tmp_path, capsys
):
    path = tmp_path / "loop.jsonl"
    directory = write_policies(
        default=f"mode: shadow\nrecording: {{enabled: true, jsonl_path: '{path}'}}\n",
        enforcing="description: the defaults, enforced\n",
    )
    proxy = make_proxy(upstream=fake.url, policies_dir=directory)
    fake.script(
        *(Turn(None, (Call("search", {"q": "lyon"}, f"c{n}"),), reasoning="Search again.") for n in range(6)),
        turn("About 520,000 people."),
    )
    counter = itertools.count()

    turns, _, _ = wire_format.run_agent(
        proxy, lambda call: f"about 520,000 (#{next(counter)})", tools=[SEARCH], session=f"r-loop-{wire_format.name}"
    )
    records = recorded_lines(path, 7)

    assert turns == 7
    assert {record["wire"] for record in records} == {wire_format.wire_name}
    assert main(["replay", str(path), "--policy", "enforcing", "--policies-dir", str(directory)]) == 0
    out = capsys.readouterr().out
    assert "recorded with policy default, replayed with enforcing" in out
    assert "=> enforcing would have ended the session at turn 5 (loop)" in out
