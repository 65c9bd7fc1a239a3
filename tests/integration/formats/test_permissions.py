"""Tool permissions end to end in every wire format: a dangerous call never reaches the agent
(streaming too), a hidden tool never reaches the model, and the decisions are counted."""

from __future__ import annotations

import httpx
import pytest

from tests.support.formats import Tool
from tests.support.turns import Call, Turn, calling, turn

TOOLS = [Tool("run_shell"), Tool("list_files"), Tool("admin_reset")]
TASK = "Clean up the build directory."
POLICY = r"""
permissions:
  max_denials: 2
  rules:
    - id: no-root-rm
      tool: run_shell
      when: [{path: $.command, regex: 'rm\s+-rf\s+/(\s|$)'}]
      action: deny
      message: Deleting the filesystem root is never allowed.
    - id: no-fork-bomb
      tool: run_shell
      when: [{path: $.command, regex: ':\(\)\s*\{'}]
      action: deny_session
    - id: no-admin
      tool: admin_*
      action: deny
      hide: true
"""


@pytest.fixture
def guarded(make_proxy, fake, write_policies):
    return make_proxy(upstream=fake.url, policies_dir=str(write_policies(default=POLICY)))


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_refused_call_is_replaced_by_the_models_next_choice(wire_format, guarded, fake, stream):
    fake.script(
        Turn(None, (Call("run_shell", {"command": "rm -rf /"}, "c1"),), reasoning="Clean it all."),
        Turn(None, (Call("list_files", {"dir": "build"}, "c2"),), reasoning="Safer."),
    )

    answer = wire_format.ask(guarded, wire_format.task(TASK), tools=TOOLS, stream=stream)
    stream = stream or wire_format.always_streams

    assert [call.name for call in answer.calls] == ["list_files"]
    # A stream's headers leave with its first byte: where the refused attempt's reasoning flowed
    # before its call was refused, they name only what was decided by then (the refusal sent
    # upstream, below, shows the rest).
    both, first = "tools_hidden,permission_denied", "tools_hidden"
    assert answer.headers["x-loopwarden-interventions"] in ((both, first) if stream else (both,))
    refused = wire_format.sent(1)
    assert [call.name for call in refused.calls(-2)] == ["run_shell"]
    [(call_id, refusal)] = refused.results
    assert call_id == "c1"
    assert "rule no-root-rm" in refusal
    assert "never allowed" in refusal
    assert [wire_format.streamed(r) for r in fake.requests] == [stream, stream]
    assert wire_format.rejected() == []  # echoed thinking kept its signature


def test_a_model_that_insists_ends_the_session(wire_format, guarded, fake):
    fake.script(
        *[calling("run_shell", {"command": "rm -rf /"}, f"c{n}") for n in range(3)],
        turn("I could not clean up: the only way I saw was refused."),
    )

    answer = wire_format.ask(guarded, wire_format.task(TASK), tools=TOOLS)

    assert answer.headers["x-loopwarden-terminated"] == "permission"
    assert answer.calls == []


def test_deny_session_ends_at_once(wire_format, guarded, fake):
    fake.script(calling("run_shell", {"command": ":(){ :|:& };:"}, "c1"), turn("Stopped."))

    answer = wire_format.ask(guarded, wire_format.task(TASK), tools=TOOLS)

    assert answer.headers["x-loopwarden-terminated"] == "permission"
    assert len(fake.requests) == 2  # the call, then the summary


def test_hidden_tools_never_reach_the_upstream(wire_format, guarded, fake):
    wire_format.ask(guarded, wire_format.task(TASK), tools=TOOLS)

    assert wire_format.sent(0).tools == ["run_shell", "list_files"]


def test_decisions_are_counted_by_rule(wire_format, guarded, fake):
    fake.script(calling("run_shell", {"command": "rm -rf /"}, "c1"), calling("list_files", {}, "c2"))

    wire_format.ask(guarded, wire_format.task(TASK), tools=TOOLS)

    metrics = httpx.get(f"{guarded.metrics_url}/metrics").text
    assert 'loopwarden_permission_decisions_total{action="deny",policy="default",rule="no-root-rm"} 1.0' in metrics


def test_shadow_mode_counts_the_refusal_but_delivers_the_call(wire_format, make_proxy, fake, write_policies):
    proxy = make_proxy(upstream=fake.url, policies_dir=str(write_policies(default=POLICY + "mode: shadow\n")))
    fake.script(calling("run_shell", {"command": "rm -rf /"}, "c1"))

    answer = wire_format.ask(proxy, wire_format.task(TASK), tools=TOOLS)

    assert answer.calls[0].name == "run_shell"
    both, first = "tools_hidden,permission_denied", "tools_hidden"  # a stream's headers leave with its first event
    assert answer.headers["x-loopwarden-shadow"] in ((both, first) if wire_format.always_streams else (both,))
    assert wire_format.sent(0).tools == [tool.name for tool in TOOLS]
