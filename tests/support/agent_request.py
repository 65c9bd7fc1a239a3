"""One agent request as the routes would hand it to the pipeline, for unit tests."""

from __future__ import annotations

from typing import Any

import msgspec

from proxy.policy.models import Policy
from proxy.request import AgentRequest
from proxy.session.identity import identify
from proxy.wire.chat.format import CHAT_COMPLETIONS

TASK = {"model": "m", "messages": [{"role": "user", "content": "Do the task."}]}
URL = "http://up/v1/chat/completions"


def agent_request(
    payload: dict[str, Any] | None = None,
    policy: Policy | None = None,
    *,
    session: str | None = "s1",
    tenant: str = "t",
    **extra: Any,
) -> AgentRequest:
    """A request of ``tenant``, named ``session`` (None: derived from the conversation), parsed
    as its route parses it: chat completions' unless ``wire`` names another format."""
    payload = TASK if payload is None else payload
    wire = extra.setdefault("wire", CHAT_COMPLETIONS)
    conversation = wire.codec.parse_request(payload)
    extra.setdefault("stream", conversation.stream)
    extra.setdefault("url", URL)
    return AgentRequest(
        tenant=tenant,
        policy=policy or Policy(),
        session=identify(tenant, conversation, session, None),
        payload=payload,
        body=msgspec.json.encode(payload),
        conversation=conversation,
        headers=[],
        **extra,
    )
