"""A session without ``X-Session-Id`` is named once, and everything names it alike, in every wire
format: the ``X-LoopWarden-Session`` header, every log line of the request, the timeline and the
sessions API (list, one session, its events), from the run's first request on.

A derived run is named by the reply its first request delivers, so that request's lines wait for
the name (keeping their time); a stream that flows before that reply is whole goes without the
header rather than with a name no session has (``test_a_live_first_stream_…``)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.fake_upstream import Sse, stream_chunks
from tests.support.formats import REFUSED, Tool
from tests.support.turns import calling, turn
from tests.support.waiting import wait_for

TOOLS = [Tool("search")]


def _logged_sessions(log_records, since: int) -> dict[str, set[str]]:
    """Each event's session ids among the records logged after the first ``since`` ones."""
    named: dict[str, set[str]] = {}
    for record in log_records[since:]:
        session = getattr(record, "fields", {}).get("session")
        if session is not None:
            named.setdefault(record.getMessage(), set()).add(session)
    return named


def _everywhere(wire_format, proxy, session: str) -> dict[str, object]:
    listed = httpx.get(f"{proxy.base_url}/loopwarden/sessions", headers=wire_format.key).json()["data"]
    one = wire_format.session(proxy, session)
    events = httpx.get(f"{proxy.base_url}/loopwarden/sessions/{session}/events", headers=wire_format.key)
    return {
        "listed": [item["id"] for item in listed],
        "inspected": (one.status_code, one.json().get("id")),
        "timeline": (events.status_code, events.json().get("session"), len(events.json().get("data", [])) > 0),
    }


@pytest.mark.parametrize(
    ("first", "stream"),
    [
        pytest.param(turn("Lyon has about 520,000 people."), False, id="text"),
        pytest.param(calling("search", {"q": "lyon"}, "call_lyon_1"), False, id="tool-call"),
        pytest.param(calling("search", {"q": "lyon"}, "call_lyon_1"), True, id="tool-call-streamed"),  # held whole
    ],
)
def test_a_derived_runs_first_request_names_one_session_everywhere(
    wire_format, proxy, fake, log_records, first, stream
):
    if wire_format.always_streams and not first.calls:
        pytest.skip("streamed text leaves before a derived session is named, as over HTTP: tested there")
    fake.script(first)
    since = len(log_records)

    answer = wire_format.ask(proxy, tools=TOOLS, stream=stream)

    session = answer.headers["x-loopwarden-session"]
    assert wait_for(lambda: "request" in _logged_sessions(log_records, since))  # written after the reply went
    logged = _logged_sessions(log_records, since)
    assert "step" in logged
    assert all(ids == {session} for ids in logged.values()), logged
    assert _everywhere(wire_format, proxy, session) == {
        "listed": [session],
        "inspected": (200, session),
        "timeline": (200, session, True),
    }


def test_the_runs_later_requests_name_the_session_its_first_one_did(wire_format, proxy, fake, log_records):
    fake.script(calling("search", {"q": "lyon"}, "call_lyon_1"), turn("About 520,000."))
    history = wire_format.task()
    first = wire_format.ask(proxy, history, tools=TOOLS)
    history = wire_format.handed_back(history, first, ["Lyon: 522,250 inhabitants (2021)."])
    since = len(log_records)

    second = wire_format.ask(proxy, history, tools=TOOLS)

    session = first.headers["x-loopwarden-session"]
    assert second.headers["x-loopwarden-session"] == session
    assert wait_for(lambda: "request" in _logged_sessions(log_records, since))
    assert all(ids == {session} for ids in _logged_sessions(log_records, since).values())
    assert _everywhere(wire_format, proxy, session)["inspected"] == (200, session)


def test_a_first_request_that_ends_without_a_reply_leaves_no_line_waiting(wire_format, make_proxy, fake, log_records):
    proxy = make_proxy(upstream=fake.url, redis_url="redis://127.0.0.1:1/0", redis_timeout=0.3)
    since = len(log_records)

    with pytest.raises(REFUSED):
        wire_format.ask(proxy, headers={"X-LoopWarden-Policy": "strict"})

    assert "state_store_error" in _logged_sessions(log_records, since)  # written, though no reply named a run


def test_a_live_first_stream_goes_without_the_header_and_the_next_request_names_the_run(
    make_proxy, upstream, log_records
):
    """A chat stream whose text flows as it comes (the default policy holds no text back here):
    its headers leave before the reply that names the run exists."""
    proxy = make_proxy()
    slow = Sse(stream_chunks("Lyon has about five hundred and twenty thousand people.", pieces=6))
    slow.delay = 0.2
    upstream.script(slow)
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "How many live in Lyon?"}]}

    with httpx.stream(
        "POST", f"{proxy.base_url}/chat/completions", json=body, headers={"Authorization": "Bearer sk-p"}
    ) as response:
        header = response.headers.get("x-loopwarden-session")
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks if chunk["choices"])

    listed = httpx.get(f"{proxy.base_url}/loopwarden/sessions", headers={"Authorization": "Bearer sk-p"}).json()
    (session,) = [item["id"] for item in listed["data"]]
    assert header is None
    assert wait_for(lambda: any(r.getMessage() == "request" for r in log_records))
    assert {r.fields["session"] for r in log_records if r.getMessage() in ("step", "request")} == {session}
    history = [*body["messages"], {"role": "assistant", "content": text}, {"role": "user", "content": "And Paris?"}]
    upstream.script(turn("About 2.1 million."))
    later = httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": history},
        headers={"Authorization": "Bearer sk-p"},
    )
    assert later.headers["x-loopwarden-session"] == session
