"""The contract of the format fixture (``tests/support/formats.py``): what a scenario asks of a
wire format, the client side (send a request with the format's SDK, read the answer's text,
tool calls, id and stop reason, hand tool results back) and the upstream side (read the
request the proxy sent: tools offered, tool choice, the tool results and last words)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx

from tests.support.fake_upstream import FakeUpstream, Recorded
from tests.support.proxy_server import RunningProxy
from tests.support.turns import Call

__all__ = ["TASK", "Answer", "Format", "Sent", "Tool"]

TASK = "How many people live in Lyon?"


@dataclass(frozen=True)
class Tool:
    """A tool the agent offers, neutral: rendered in each format's shape."""

    name: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object"})


@dataclass
class Answer:
    """What the agent read: the response headers, its text, tool calls, id and stop reason."""

    headers: Mapping[str, str]
    text: str
    calls: list[Call]
    id: str
    stop: str
    native: list[dict[str, Any]]
    """The reply as the agent appends it to its history (messages, items or content blocks)."""


@dataclass
class Sent:
    """One request the proxy sent upstream, read the same way in every format."""

    payload: dict[str, Any]
    tools: list[str]
    """The names of the tools offered."""
    results: list[tuple[str, str]]
    """The tool results it ends with: (call id, content)."""
    last: str
    """The text of the last thing it says (a nudge, a continuation, a tool result)."""
    tool_choice: Any

    @property
    def history(self) -> list[dict[str, Any]]:
        """The conversation it sends: chat and Messages ``messages``, Responses ``input``."""
        return list(self.payload.get("messages") or self.payload.get("input") or [])

    def calls(self, index: int) -> list[Call]:
        """The tool calls of the ``index``-th turn of its history (a Responses call is its own item)."""
        item = self.history[index]
        if item.get("type") == "function_call":
            return [Call(item["name"], arguments_of(item["arguments"]), item["call_id"])]
        found = [
            Call(c["function"]["name"], arguments_of(c["function"]["arguments"]), c["id"])
            for c in item.get("tool_calls") or []
        ]
        content = item.get("content")
        blocks = content if isinstance(content, list) else []
        return found + [Call(b["name"], b["input"], b["id"]) for b in blocks if b.get("type") == "tool_use"]

    def said(self, index: int) -> tuple[str, str]:
        """(role, text) of the ``index``-th turn of its history."""
        item = self.history[index]
        return item.get("role", ""), text_of(item.get("content"))


class Format:
    """How a client speaks one wire format; one subclass per format."""

    name: str
    wire_name: str
    """The name of the proxy's format (as recordings name it)."""
    own_id: str
    """The prefix of ids the proxy makes for replies of its own (endings)."""
    calls_stop: str
    """The stop reason of a reply that calls tools."""
    text_stop: str
    """The stop reason of a reply that answers in text."""

    def __init__(self, fake: FakeUpstream) -> None:
        self.fake = fake

    # -- the client side ----------------------------------------------------------------

    def task(self, text: str = TASK, *, system: str | None = None) -> list[dict[str, Any]]:
        """A history opening with ``text`` from the user (after ``system``)."""
        opening = [{"role": "user", "content": text}]
        return [{"role": "system", "content": system}, *opening] if system else opening

    request: ClassVar[dict[str, Any]]
    """What every request of the format's client carries (model, token limit, storage)."""
    client_ids: ClassVar[list[tuple[dict[str, str], dict[str, Any], str]]] = [
        ({"X-Session-Id": "explicit"}, {}, "explicit"),
        ({"X-Session-Id": "lead", "X-Agent-Id": "researcher"}, {}, "lead@researcher"),
    ]
    """The ids a client of the format already sends, each as (headers, request fields, the
    session they name): ``X-Session-Id`` (and a sub-agent's ``X-Agent-Id``) in every format,
    then the ids the format's own clients send."""
    history_key: ClassVar[str] = "messages"
    always_streams: ClassVar[bool] = False
    """Every answer streams, whatever ``stream`` asks (a WebSocket knows no other way)."""
    """The field the conversation goes in."""

    def ask(
        self,
        proxy: RunningProxy,
        history: list[dict[str, Any]] | None = None,
        *,
        tools: Sequence[Tool] = (),
        tool_choice: str | None = None,
        stream: bool = False,
        headers: Mapping[str, str] | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> Answer:
        """One agent request; ``tool_choice`` is "none" or the name of a forced tool; ``fields``
        go in the body beside what the SDK writes (as ``extra_body``)."""
        request = {**self.request, self.history_key: history or self.task()}
        if fields:
            request["extra_body"] = dict(fields)
        if tools:
            request["tools"] = [self._tool(tool) for tool in tools]
        if tool_choice is not None:
            request["tool_choice"] = self.none_choice if tool_choice == "none" else self.forced(tool_choice)
        return self._send(proxy, request, stream=stream, headers=dict(headers or {}))

    def handed_back(
        self, history: list[dict[str, Any]], answer: Answer, results: Sequence[str]
    ) -> list[dict[str, Any]]:
        """The history after ``answer`` with a result for each of its calls."""
        return [*history, *answer.native, *self._returned(list(zip(answer.calls, results, strict=True)))]

    def asking_json(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The request fields asking for an answer that is JSON satisfying ``schema``."""
        raise NotImplementedError

    def _tool(self, tool: Tool) -> dict[str, Any]:
        """``tool`` as the format offers it."""
        raise NotImplementedError

    def _send(self, proxy: RunningProxy, request: dict[str, Any], *, stream: bool, headers: dict[str, str]) -> Answer:
        """Send ``request`` with the format's SDK and read what the agent got."""
        raise NotImplementedError

    def _returned(self, results: list[tuple[Call, str]]) -> list[dict[str, Any]]:
        """The turn(s) handing each call's result back."""
        raise NotImplementedError

    def called(self, history: list[dict[str, Any]], call: Call, result: str) -> list[dict[str, Any]]:
        """The history after the model called ``call`` and the agent answered ``result``."""
        return self.handed_back(history, Answer({}, "", [call], "", self.calls_stop, self._calling(call)), [result])

    def _calling(self, call: Call) -> list[dict[str, Any]]:
        """The model's turn calling ``call``, as a client resends it."""
        raise NotImplementedError

    def run_agent(
        self,
        proxy: RunningProxy,
        tool: Callable[[Call], str],
        *,
        tools: Sequence[Tool],
        session: str,
        history: list[dict[str, Any]] | None = None,
        max_turns: int = 15,
    ) -> tuple[int, Answer, list[dict[str, Any]]]:
        """An agent loop: ask, run every call, stop at an answer without calls.
        (turns, last answer, history)."""
        history = list(history or self.task())
        answer = None
        for turn in range(1, max_turns + 1):
            answer = self.ask(proxy, history, tools=tools, headers={"X-Session-Id": session})
            if not answer.calls:
                return turn, answer, [*history, *answer.native]
            history = self.handed_back(history, answer, [tool(c) for c in answer.calls])
        assert answer is not None
        return max_turns, answer, history

    def exchanged(self, said: str, then: str) -> list[dict[str, Any]]:
        """An assistant turn saying ``said``, then a user turn saying ``then``, as a client writes them."""
        return [{"role": "assistant", "content": said}, {"role": "user", "content": then}]

    @staticmethod
    def streamed(sent: Recorded) -> bool:
        """The request the fake received asked for a stream."""
        return bool(sent.json().get("stream") is True)

    def forced(self, name: str) -> dict[str, Any]:
        """The format's ``tool_choice`` forcing tool ``name``."""
        raise NotImplementedError

    none_choice: Any
    """The format's ``tool_choice`` forbidding tools."""

    key: ClassVar[dict[str, str]] = {"Authorization": "Bearer sk-p"}
    """The header carrying the API key the format's client sends (sessions are namespaced by it)."""

    def session(self, proxy: RunningProxy, session: str) -> httpx.Response:
        """The sessions API's view of ``session``, read with the client's own key."""
        return httpx.get(f"{proxy.base_url}/loopwarden/sessions/{session}", headers=self.key)

    # -- the upstream side --------------------------------------------------------------

    def sent(self, index: int) -> Sent:
        """The ``index``-th agent request the fake received (judge calls apart)."""
        payload = self.fake.requests[index].json()
        return Sent(
            payload, self._tools(payload), self._results(payload), self._last(payload), payload.get("tool_choice")
        )

    def rejected(self) -> list[str]:
        """What the fake refused as the real API would (a broken chain, a thinking block moved)."""
        return []

    def _tools(self, payload: dict[str, Any]) -> list[str]:
        return [tool.get("function", tool)["name"] for tool in payload.get("tools") or []]

    def _results(self, payload: dict[str, Any]) -> list[tuple[str, str]]:
        raise NotImplementedError

    def _last(self, payload: dict[str, Any]) -> str:
        raise NotImplementedError


def text_of(content: Any) -> str:
    """Text of a content that is a string or a list of parts/blocks."""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))


def arguments_of(raw: str) -> dict[str, Any] | str:
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, dict) else raw
