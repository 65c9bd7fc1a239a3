"""One agent request as the routes would hand it to the pipeline, for unit tests."""

from __future__ import annotations

from typing import Any

import msgspec

from proxy.policy.models import Policy
from proxy.request import AgentRequest
from proxy.session.identity import identify
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.chat.parse import parse_conversation

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
    """A chat-completions request of ``tenant``, named ``session`` (None: derived from the
    conversation), parsed as the chat route parses it (``wire=`` another format to speak it upstream)."""
    payload = TASK if payload is None else payload
    adapter = extra.get("adapter")
    conversation = parse_conversation(payload) if adapter is None else adapter.parse_request(payload)
    extra.setdefault("stream", conversation.stream)
    extra.setdefault("url", URL)
    extra.setdefault("wire", CHAT_COMPLETIONS)
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
