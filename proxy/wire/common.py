"""What every wire adapter does alike: JSON bodies, the judge's own endpoint, and (for formats
whose requests carry their whole history) no server-side state. Adapters inherit these so that
each states only what its format does differently."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from proxy.exchange import Reply, Turn

__all__ = ["JsonFormat", "NoChains", "NoTranscript"]

_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode


class JsonFormat:
    """Bodies decoded and encoded as JSON; a judge at its own base URL plus the format's path."""

    upstream_path: str

    def stored_ending(self, raw: str) -> dict[str, Any]:
        ending: dict[str, Any] = _decode(raw)
        return ending

    def reply_body(self, raw: bytes) -> dict[str, Any]:
        body: dict[str, Any] = _decode(raw)
        return body

    def encode(self, body: Mapping[str, Any]) -> bytes:
        return _encode(body)

    def judge_url(self, base_url: str) -> str:
        return base_url.rstrip("/") + self.upstream_path


class NoChains:
    """A format without stored responses to continue: every request carries its whole history."""

    def continues(self, payload: Mapping[str, Any]) -> str | None:
        return None

    def chain_links(
        self, payload: Mapping[str, Any], replies: Sequence[Reply], answer: Reply | Mapping[str, Any] | None
    ) -> list[tuple[str, str | None, str | None]]:
        return []

    def references(self, payload: Mapping[str, Any]) -> list[str]:
        return []

    def rechained(
        self, payload: Mapping[str, Any], continue_from: str | None, bodies: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, Any]:
        return dict(payload)


class NoTranscript:
    """A format whose upstream binds no reply to its exact prefix: nothing to record or splice."""

    def spliced(self, payload: Mapping[str, Any], values: Mapping[str, str]) -> Mapping[str, Any]:
        return payload

    def recorded(
        self,
        client: Mapping[str, Any],
        amended: Mapping[str, Any],
        turns: Sequence[Turn],
        reply: Reply,
        answered: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        return {}
