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
from proxy.exchange import Conversation, Usage, content_text
from proxy.policy.models import Policy
from proxy.upstream import UpstreamClient
from proxy.verdict import Finalize
from proxy.wire.chat_completions import completion, parse_reply, render_request

__all__ = ["Ending", "Finalizer", "local_summary"]

_CLIP = 300
_ANSWER_CONSTRAINTS = ("response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar")
"""Removed from the summary call: a summary is prose (OpenAI's and vLLM's output constraints)."""


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
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                names[str(call.get("id"))] = str(call["function"].get("name", "tool"))
        if message.get("role") == "tool":
            text = content_text(message.get("content"))
            if text.strip():
                found.append(f"{names.get(str(message.get('tool_call_id')), 'a tool')} returned: {_clip(text)}")
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


def _capped_output(payload: Mapping[str, Any], cap: int | None, *, force: bool = False) -> dict[str, Any]:
    """Cap the summary's length with whichever output-limit field the client already uses.

    Adding ``max_tokens`` where the client sent none could break models that accept only
    ``max_completion_tokens``, so a request with neither is left uncapped unless ``force``.
    """
    if cap is None:
        return {}
    for name in ("max_completion_tokens", "max_tokens"):
        current = payload.get(name)
        if isinstance(current, int):
            return {name: min(current, cap)}
    return {"max_tokens": cap} if force else {}


class Finalizer:
    def __init__(self, upstream: UpstreamClient) -> None:
        self._upstream = upstream

    async def end(
        self,
        verdict: Finalize,
        policy: Policy,
        payload: Mapping[str, Any],
        extra_messages: Sequence[Mapping[str, Any]],
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
            body = render_request(
                payload,
                [*extra_messages, {"role": "user", "content": instruction}],
                tool_choice="none" if payload.get("tools") else None,
                **dict.fromkeys(_ANSWER_CONSTRAINTS),
                stream=None,
                stream_options=None,
                parallel_tool_calls=None,
                **_capped_output(payload, policy.finalize.max_tokens, force=cap_output),
            )
            try:
                reply = await self._upstream.send("POST", url, headers, body)
            except ProxyError:
                reply = None
            if reply is not None and reply.response.status_code == 200:
                parsed = parse_reply(reply.response.content)
                if parsed is not None and parsed.has_text and parsed.content is not None:
                    return Ending(
                        completion(parsed.content, model=parsed.model or model, usage=parsed.usage),
                        "upstream",
                        parsed.usage,
                        upstream_called=True,
                    )
            summary = local_summary(conversation, verdict.detail)
            return Ending(completion(summary, model=model), "local", Usage(), upstream_called=True)
        return Ending(completion(local_summary(conversation, verdict.detail), model=model), "local", Usage(), False)
