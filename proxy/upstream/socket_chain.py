"""What one upstream Responses WebSocket holds, and how a call goes on from it.

With ``store=false`` the API keeps, in each socket's memory, its most recent response only: a
``previous_response_id`` naming any other is answered ``previous_response_not_found`` (and an
error empties that memory). The pipeline sends whole conversations (the guards see every turn
whole, on either transport); here a whole call becomes a continuation again when its input
begins with the conversation of the socket's most recent response, as the upstream holds it
(the proxy's hidden attempts in it: a nudge, its rejected reply) or as the client saw it (the
edge reports that view, :meth:`SocketChain.seen`): only the items after it go, chained to that
response, so a hidden attempt stays part of the history the upstream continues. Any other call
goes whole. Every ``previous_response_id`` the proxy sends is thus the upstream's own id of the
socket's most recent response: never one of the proxy's ids, never one the upstream dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

__all__ = ["CREATE", "SocketChain", "whole_input"]

CREATE = "response.create"
_encode = msgspec.json.Encoder().encode
_TRANSPORT_ONLY = ("stream",)
"""Fields of ``POST /v1/responses`` the socket takes implicitly (the API: not to be sent)."""
_VIEWS = 2
"""Conversations kept per response: the upstream's own and the one the client saw."""


def whole_input(payload: Mapping[str, Any]) -> list[Any]:
    """A call's ``input`` as items (a string is one user message, in the shape the socket's
    chains record it: :func:`proxy.wire.responses.render.input_items`, above this layer)."""
    raw = payload.get("input")
    if isinstance(raw, list):
        return raw
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    return []


class SocketChain:
    """The socket's most recent response and the conversations a call may go on from."""

    __slots__ = ("_last", "_views")

    def __init__(self) -> None:
        self._last: str | None = None
        self._views: list[list[Any]] = []

    @property
    def last(self) -> str | None:
        """The upstream's id of the socket's most recent response (None: nothing to go on from)."""
        return self._last

    def event(self, payload: Mapping[str, Any]) -> tuple[bytes, list[Any] | None, bool]:
        """The ``response.create`` event of a call; the whole input it carries (None for a call
        the caller chained itself, whose history is the upstream's); and whether it was sent as
        a continuation of the socket's most recent response."""
        fields: dict[str, Any] = {"type": CREATE}
        fields.update(payload)
        for name in _TRANSPORT_ONLY:
            fields.pop(name, None)
        if payload.get("previous_response_id") is not None or payload.get("conversation") is not None:
            return _encode(fields), None, False
        whole = whole_input(payload)
        if self._last is not None:
            for view in self._views:
                size = len(view)
                if size < len(whole) and whole[:size] == view:
                    fields["previous_response_id"] = self._last
                    fields["input"] = whole[size:]
                    return _encode(fields), whole, True
        return _encode(fields), whole, False

    def answered(self, whole: Sequence[Any] | None, response: Mapping[str, Any]) -> None:
        """The socket's most recent response is now ``response``, which answered a call of input
        ``whole`` (None: the upstream's own chain, unknown here)."""
        found = response.get("id")
        output = response.get("output")
        self._last = found if isinstance(found, str) and found and response.get("status") != "failed" else None
        self._views = [[*whole, *output]] if self._last and whole is not None and isinstance(output, list) else []

    def seen(self, response_id: object, conversation: Sequence[Any]) -> None:
        """The client was given ``response_id`` with ``conversation`` behind it (its view: without
        the hidden attempts): a later call that extends that view goes on from the response."""
        if response_id is None or response_id != self._last or len(self._views) >= _VIEWS:
            return
        view = list(conversation)
        if view not in self._views:
            self._views.append(view)

    def forget(self) -> None:
        """The socket holds nothing to go on from (an error, a new socket)."""
        self._last = None
        self._views = []
