"""The client side of the Responses integration tests: the openai SDK with every stream it
reads kept for the validator, and a hand-written agent loop over ``responses.create``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai

from tests.support.responses_events import validate_stream

TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


class TeeTransport(httpx.HTTPTransport):
    """Reads each event stream whole and keeps its bytes (the SDK then reads the same bytes);
    keeps the body of every request the client sent, too."""

    def __init__(self) -> None:
        super().__init__()
        self.streams: list[bytes] = []
        self.sent: list[bytes] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.read())
        response = super().handle_request(request)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            return response
        body = response.read()
        self.streams.append(body)
        headers = [
            (k, v)
            for k, v in response.headers.multi_items()
            if k.lower() not in ("content-length", "transfer-encoding")
        ]
        return httpx.Response(response.status_code, headers=headers, content=body, request=request)


@contextmanager
def checked_sdk(base_url: str) -> Iterator[tuple[openai.OpenAI, TeeTransport]]:
    """An openai client whose every stream, at the end, must pass the strict validator."""
    tee = TeeTransport()
    client = openai.OpenAI(base_url=base_url, api_key="sk-p", max_retries=0, http_client=httpx.Client(transport=tee))
    yield client, tee
    for raw in tee.streams:
        validate_stream(raw)


def create(client: openai.OpenAI, stream: bool, **kwargs: Any) -> tuple[httpx.Headers, Any]:
    """One ``responses.create``: (response headers, the final response), streamed or not."""
    if not stream:
        raw = client.responses.with_raw_response.create(**kwargs)
        return raw.headers, raw.parse()
    raw = client.responses.with_raw_response.create(stream=True, **kwargs)
    final = None
    for event in raw.parse():
        if event.type in TERMINAL:
            final = event.response
    return raw.headers, final


def run_agent(
    client: openai.OpenAI,
    tool: Callable[[dict[str, Any]], str],
    task: list[dict[str, Any]],
    *,
    stream: bool = False,
    chained: bool = False,
    max_turns: int = 15,
    **request: Any,
) -> tuple[int, httpx.Headers, Any, list[dict[str, Any]]]:
    """The agent: call the model, run every call it makes, stop at a reply without calls.
    Stateless (the whole history each turn, ``store: false``, as Codex) or ``chained``
    (``previous_response_id`` and only the new items). (turns, last headers, last response, history)."""
    history = list(task)
    new = list(task)
    previous: str | None = None
    headers: httpx.Headers = httpx.Headers()
    response = None
    for turn in range(1, max_turns + 1):
        if chained:
            extra = {"previous_response_id": previous} if previous else {}
            headers, response = create(client, stream, input=new, **extra, **request)
        else:
            headers, response = create(client, stream, input=history, store=False, **request)
        outputs = [item.model_dump(exclude_none=True) for item in response.output]
        history += outputs
        calls = [item for item in outputs if item["type"] == "function_call"]
        if not calls:
            return turn, headers, response, history
        new = [{"type": "function_call_output", "call_id": c["call_id"], "output": tool(c)} for c in calls]
        history += new
        previous = response.id
    return max_turns, headers, response, history
