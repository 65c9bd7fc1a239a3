"""The chains of one Responses WebSocket, carried by the proxy.

Over a WebSocket the client continues each turn with only its new items and the
``previous_response_id`` of the response it saw; with ``store=false`` the upstream keeps that
chain on its own socket alone. The guards must see the whole run, so the proxy keeps the
chain itself: every response the client saw on this socket is remembered with the whole input
it answered and its output items, and a ``store=false`` continuation of one of them becomes the
whole conversation, with no ``previous_response_id``: exactly what Codex sends over HTTP, so
the guards see the same run either way. Over an upstream WebSocket the call is made a
continuation again where the upstream socket can go on (:mod:`proxy.upstream.socket_chain`);
over HTTP it goes whole. The proxy's own ids (an ending's ``msg_lw…``) never go upstream. A
stored chain (``store`` true) is the upstream's, as over HTTP.

A warm-up (``generate: false``, Codex's prewarm) generates nothing: the proxy answers it
itself, with an empty response of its own that a continuation may name.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from proxy.wire.responses.render import input_items, is_proxy_id, proxy_id
from proxy.wire.responses.stream import response_events

__all__ = ["SocketChains", "warm_up_events"]

KEPT = 32
"""Responses remembered per socket: a client continues the last one, or one a little older."""


class SocketChains:
    """The conversations behind the responses one socket delivered, newest last."""

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: OrderedDict[str, list[Any]] = OrderedDict()

    def carried(self, payload: Mapping[str, Any]) -> dict[str, Any] | None:
        """The request as the upstream should get it (the chain's items carried for a
        ``store=false`` continuation); None when it continues a response this socket never
        delivered (the API's ``previous_response_not_found``)."""
        result = dict(payload)
        previous = payload.get("previous_response_id")
        if not isinstance(previous, str) or not previous:
            return result
        history = self._known.get(previous)
        if history is None and payload.get("store") is False:
            return None
        if history is None or (payload.get("store") is not False and not is_proxy_id(previous)):
            return result  # a stored chain: the upstream's
        self._known.move_to_end(previous)
        result.pop("previous_response_id")
        result["input"] = [*history, *input_items(payload)]
        return result

    def record(self, sent: Mapping[str, Any], response: Mapping[str, Any]) -> list[Any] | None:
        """Remember a delivered response: the input of the request as sent upstream, then its
        output; that conversation (what a continuation of it carries), None for no response."""
        found = response.get("id")
        if not isinstance(found, str) or not found:
            return None
        output = [_as_input(item) for item in response.get("output") or () if isinstance(item, dict)]
        conversation = self._known[found] = [*input_items(sent), *output]
        self._known.move_to_end(found)
        while len(self._known) > KEPT:
            self._known.popitem(last=False)
        return conversation


def _as_input(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as input: without an id of the proxy's own, which the upstream never saw."""
    if is_proxy_id(item.get("id")):
        return {key: value for key, value in item.items() if key not in ("id", "status")}
    return item


def warm_up_events(payload: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The proxy's answer to a warm-up: an empty completed response, and its stream's events."""
    body: dict[str, Any] = {
        "id": proxy_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": payload.get("model"),
        "output": [],
        "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
    }
    events = [{**event, "sequence_number": number} for number, event in enumerate(response_events(body))]
    return body, events
