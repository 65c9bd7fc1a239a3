"""Responses' server-side chains: a request may continue a response the upstream stored.

A continuation names a stored response (``previous_response_id``), so every response id the
proxy returns is remembered with its session (:mod:`proxy.session.chains`), with the upstream
response to continue from instead when the proxy's own body (an ending) is what the client
holds. Items the proxy made itself (``msg_lw…``) exist nowhere upstream: a request that refers
to them by id (``item_reference``) gets the items themselves.

An ending answers a request whose own input (a tool loop's: its ``function_call_output``
items) the upstream never stored: continuing the chain from the ending at the ended request's
chain point would leave those calls unanswered (the API's 400 "No tool output found for
function call"). So an ending's record keeps that input (``_CARRIED``), and a continuation of
the ending carries it, then the ending's own words as an assistant message, before its own
items: the upstream sees the whole history, run after run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from proxy.exchange import Reply
from proxy.wire.base import Links
from proxy.wire.responses.render import is_proxy_id

__all__ = ["ResponsesChains"]

_encode = msgspec.json.Encoder().encode
_CARRIED = "_lw_carried"
"""In the proxy's record of an ending (never sent to a client): the ended request's input."""


class ResponsesChains:
    """The :class:`~proxy.wire.base.Chains` of the Responses API."""

    def continues(self, payload: Mapping[str, Any]) -> str | None:
        previous = payload.get("previous_response_id")
        return previous if isinstance(previous, str) and previous else None

    def links(
        self, payload: Mapping[str, Any], replies: Sequence[Reply], answer: Reply | Mapping[str, Any] | None
    ) -> Links:
        """The ids the client may hold: its answer's, and on a stream every attempt's (a
        stream shows the client the id of the attempt it began with), each continued from the
        upstream response the answer is: the relayed reply itself, or for the proxy's own body
        (an ending) the chain point the request came with; the proxy's own body is kept whole,
        for the items a later request refers to by id."""
        if answer is None or (payload.get("store") is False and isinstance(answer, Reply)):
            return []
        shown: list[Any] = [reply.source for reply in replies] if payload.get("stream") is True else []
        own: str | None = None
        record: str | None = None
        if isinstance(answer, Reply):
            target = _response_id(answer.source)
            shown.append(answer.source)
        else:
            target = self.continues(payload)
            shown.append(answer)
            own = _response_id(answer) if is_proxy_id(_response_id(answer)) else None
            record = _encode({**answer, _CARRIED: _input_items(payload)}).decode() if own is not None else None
        if payload.get("store") is False:  # nothing stored upstream: only the proxy's own items matter
            shown = [answer] if own is not None else []
        return [
            (found, target, record if found == own else None)
            for found in dict.fromkeys(map(_response_id, shown))
            if found is not None
        ]

    def references(self, payload: Mapping[str, Any]) -> list[str]:
        """The responses the proxy made whose items this request refers to by id."""
        tokens = (item_id.partition("_lw")[2].partition("_")[0] for _, item_id in _references(payload))
        return list(dict.fromkeys("resp_lw" + token for token in tokens))

    def rechained(
        self, payload: Mapping[str, Any], continue_from: str | None, bodies: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, Any]:
        """The request chained to ``continue_from`` (a chain point of the proxy's own with nowhere
        upstream to continue from is dropped), its references to the proxy's items replaced by
        the items themselves (from ``bodies``, by response id; dropped when unknown)."""
        result = dict(payload)
        previous = payload.get("previous_response_id")
        if continue_from is not None:
            result["previous_response_id"] = continue_from
        elif is_proxy_id(previous):
            result.pop("previous_response_id")
        ended = bodies.get(previous) if isinstance(previous, str) and is_proxy_id(previous) else None
        references = dict(_references(payload))
        if ended is not None and isinstance(ended.get(_CARRIED), list):
            said = _as_input(ended, set(references.values()))
            result["input"] = [*ended[_CARRIED], *said, *_input_items(payload)]
        if references:
            made = {
                item.get("id"): item
                for body in bodies.values()
                for item in body.get("output") or ()
                if isinstance(item, dict)
            }
            carried = len(result["input"]) - len(payload["input"]) if ended is not None else 0
            result["input"] = result["input"][:carried] + [
                made[references[position]] if references.get(position) in made else item
                for position, item in enumerate(payload["input"])
                if position not in references or references[position] in made
            ]
        return result


def _input_items(payload: Mapping[str, Any]) -> list[Any]:
    """A request's input as items (a string input is one user message)."""
    raw = payload.get("input")
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    return list(raw) if isinstance(raw, list) else []


def _as_input(ending: Mapping[str, Any], referenced: set[str]) -> list[dict[str, Any]]:
    """An ending's messages as input items, but those the request refers to itself: without
    the proxy's ids, which the upstream never saw."""
    return [
        {key: value for key, value in item.items() if key not in ("id", "status")}
        for item in ending.get("output") or ()
        if isinstance(item, dict) and item.get("type") == "message" and item.get("id") not in referenced
    ]


def _references(payload: Mapping[str, Any]) -> list[tuple[int, str]]:
    """(input position, id) of every ``item_reference`` to an item the proxy made."""
    raw = payload.get("input")
    return [
        (position, item["id"])
        for position, item in enumerate(raw if isinstance(raw, list) else ())
        if isinstance(item, dict) and item.get("type") == "item_reference" and is_proxy_id(item.get("id"))
    ]


def _response_id(body: Any) -> str | None:
    value = body.get("id") if isinstance(body, Mapping) else None
    return value if isinstance(value, str) and value else None
