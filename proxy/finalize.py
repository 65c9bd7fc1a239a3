"""The graceful ending: never a bare error, always what was found, what is missing, what next.

First choice: one last upstream call with tools kept (so a history with tool calls stays
valid) but forbidden (``tool_choice: "none"``), no output constraint (``response_format``,
vLLM's ``guided_*``: a summary is prose, and a schema would make the model invent an object),
and an instruction to summarize. If that call fails or says nothing, a summary is built
locally from the transcript.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.errors import ProxyError
from proxy.exchange import Conversation, Turn, Usage
from proxy.policy.models import Policy
from proxy.upstream import UpstreamClient
from proxy.verdict import Finalize
from proxy.wire.base import WireAdapter

__all__ = ["Ending", "Finalizer", "local_summary"]

_CLIP = 300


@dataclass(frozen=True, slots=True)
class Ending:
    body: dict[str, Any]
    via: str
    """``upstream`` or ``local``."""
    usage: Usage
    upstream_called: bool


def _clip(text: str, limit: int = _CLIP) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def local_summary(conversation: Conversation, detail: str) -> str:
    """A summary from the transcript alone, for when the model cannot give one."""
    found: list[str] = []
    names: dict[str, str] = {}
    for message in conversation.messages:
        for call in message.tool_calls:
            names[call.id] = call.name or "tool"
        if message.role == "tool" and message.text.strip():
            found.append(f"{names.get(str(message.call_id), 'a tool')} returned: {_clip(message.text)}")
    task = _clip(conversation.first_text("user") or "the task", 200)
    lines = [f"I have to stop here: {detail}.", "", "What was found:"]
    lines += [f"- {item}" for item in found[-5:]] or ["- Nothing conclusive yet."]
    lines += ["", "What is missing:", f"- A complete answer to: {task}"]
    lines += [
        "",
        "Suggested next step:",
        "- Review the findings above, then retry with a narrower request or hand the task to a person.",
    ]
    return "\n".join(lines)


class Finalizer:
    def __init__(self, upstream: UpstreamClient) -> None:
        self._upstream = upstream

    async def end(
        self,
        verdict: Finalize,
        policy: Policy,
        adapter: WireAdapter,
        payload: Mapping[str, Any],
        extra: Sequence[Turn],
        conversation: Conversation,
        url: str,
        headers: Sequence[tuple[str, str]],
        *,
        local_only: bool = False,
        cap_output: bool = False,
    ) -> Ending:
        """The ending reply for ``verdict``, from the model if it can, else built here.

        ``local_only`` forbids the last call (a hard cost cap); ``cap_output`` bounds it even
        when the client set no output limit (a budget ending may overshoot by one capped call).
        """
        model = conversation.model
        if policy.finalize.use_upstream and not local_only:
            instruction = f"{policy.finalize.instruction} (The session is ending because {verdict.detail}.)"
            body = adapter.render_summary_request(payload, extra, instruction, policy.finalize.max_tokens, cap_output)
            try:
                reply = await self._upstream.send("POST", url, headers, body)
            except ProxyError:
                reply = None
            if reply is not None and reply.response.status_code == 200:
                parsed = adapter.parse_reply(reply.response.content)
                if parsed is not None and parsed.has_text and parsed.content is not None:
                    return Ending(
                        adapter.ending(parsed.content, model=parsed.model or model, usage=parsed.usage),
                        "upstream",
                        parsed.usage,
                        upstream_called=True,
                    )
            summary = local_summary(conversation, verdict.detail)
            return Ending(adapter.ending(summary, model=model), "local", Usage(), upstream_called=True)
        summary = local_summary(conversation, verdict.detail)
        return Ending(adapter.ending(summary, model=model), "local", Usage(), False)
