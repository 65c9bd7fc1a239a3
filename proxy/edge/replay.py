"""Offline replay of recorded sessions through another policy's guards (``loopwarden replay``).

Each recorded agent request is sent, in order, through the real :class:`Pipeline` with
the chosen policy (enforced, summaries built locally), an in-memory session store and an
in-process upstream that serves that request's recorded replies in order. Where the
policy asks the model again and the recording has no further reply, the last one is
served again: the replay assumes the model would have said the same thing (a pessimistic
but deterministic guess, marked ``assumed``). Judge calls are answered from the
recording: "not done" where the recorded step was sent back by the judge, "done"
otherwise (``judge="done"`` or ``"not_done"`` override that).

The result says, step by step, what the policy would have done next to what was recorded,
and at which turn it would have ended the session.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import msgspec
import redis.asyncio as redis

from proxy.exchange import Reply, ToolCall, Usage
from proxy.loop.build import build_pipeline
from proxy.loop.pipeline import Pipeline
from proxy.loop.recording import Step
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy, RecordingSettings
from proxy.request import AgentRequest
from proxy.session.identity import SessionRef, session_key
from proxy.session.memory import MemoryStore
from proxy.settings import Settings
from proxy.upstream.client import UpstreamClient
from proxy.verdict import Finalize, Verdict, verdict_name, verdict_reason
from proxy.wire.base import Codec
from proxy.wire.registry import format_named

__all__ = [
    "JudgeMode",
    "RecordedRequest",
    "ReplayResult",
    "ReplayStep",
    "format_result",
    "read_records",
    "read_stream",
    "replay_session",
    "sessions_of",
]

JudgeMode = Literal["recorded", "done", "not_done"]
_BASE = "http://replay.invalid/v1"
_NONCE = re.compile(r'"nonce": "([0-9a-f]+)"')
_encode = msgspec.json.Encoder().encode


@dataclass
class RecordedRequest:
    """One agent request of a recording and the upstream steps it took."""

    turn: int
    ts: float
    payload: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ReplayStep:
    turn: int
    attempt: int | None
    """The upstream attempt, or None for a decision taken before any upstream call."""
    recorded: str | None
    """The recorded verdict, or in shadow mode the first decision shadowed; None: no such step."""
    replayed: str | None
    """What the replayed policy decided; None: it made no such call."""
    recorded_detail: str = ""
    replayed_detail: str = ""
    assumed: bool = False
    """The reply served here was not in the recording (the last one again)."""
    shadowed: tuple[str, ...] = ()
    """In shadow mode: every decision the recorded policy would have taken on this step."""

    @property
    def differs(self) -> bool:
        if self.shadowed and self.replayed is not None:
            return self.replayed not in self.shadowed
        return self.recorded != self.replayed


@dataclass
class ReplayResult:
    session: str
    recorded_policy: str
    policy: str
    steps: list[ReplayStep]
    turns: int
    ended_at: int | None = None
    ending: str | None = None
    recorded_ending: str | None = None
    recorded_end_turn: int | None = None
    recorded_shadow: bool = False
    """The recorded ending is one the recorded policy only shadowed (it did not end the session)."""


def read_records(lines: Iterable[str | bytes]) -> list[dict[str, Any]]:
    """Records from JSON lines; blank lines are skipped, a bad line is an error naming its number."""
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {number}: not JSON: {exc}") from None
        if not isinstance(record, dict) or "reply" not in record or "session" not in record:
            raise ValueError(f"line {number}: not a LoopWarden step record")
        if format_named(record.get("wire")) is None:
            raise ValueError(f"line {number}: recorded in a wire format this build does not speak: {record['wire']}")
        records.append(record)
    return records


async def read_stream(url: str, stream: str, page: int = 1000) -> list[dict[str, Any]]:
    """Every record of a Redis stream the recorder wrote to, oldest first."""
    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    lines: list[bytes] = []
    try:
        start = "-"
        while True:
            entries = await client.xrange(stream, min=start, max="+", count=page) or []
            for _, fields in entries:
                record = (fields or {}).get(b"record")
                if isinstance(record, bytes):
                    lines.append(record)
            if len(entries) < page:
                break
            last = entries[-1][0]
            start = "(" + (last.decode() if isinstance(last, bytes) else str(last))
    finally:
        await client.aclose()
    return read_records(lines)


def sessions_of(records: Sequence[Mapping[str, Any]]) -> dict[str, list[RecordedRequest]]:
    """Records grouped by session, then by agent request (in recorded order)."""
    sessions: dict[str, dict[str, RecordedRequest]] = {}
    for record in records:
        by_id = sessions.setdefault(str(record["session"]), {})
        request = by_id.get(str(record["request_id"]))
        if request is None:
            payload = record.get("request")
            if not isinstance(payload, dict):
                continue  # the request's first attempt is missing (a dropped record): nothing to send
            request = by_id[str(record["request_id"])] = RecordedRequest(
                int(record.get("turn") or len(by_id) + 1), float(record.get("ts") or 0), payload
            )
        request.steps.append(dict(record))
    return {session: list(by_id.values()) for session, by_id in sessions.items()}


def _recorded_reply(reply: Mapping[str, Any]) -> Reply:
    """A recorded reply (:func:`proxy.loop.recording.reply_record`) as the neutral reply it was."""
    usage = reply.get("usage") or {}
    return Reply(
        content=reply.get("content"),
        reasoning=reply.get("reasoning"),
        tool_calls=tuple(
            ToolCall(str(c["id"]), str(c["name"]), str(c["arguments"]), str(c.get("kind") or "function"))
            for c in reply.get("tool_calls") or []
        ),
        finish_reason=reply.get("finish_reason") or "stop",
        usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
        model=reply.get("model"),
    )


def _recorded(step: Mapping[str, Any]) -> tuple[str, str, tuple[str, ...]]:
    """(verdict, detail, shadowed decisions) of a recorded step."""
    verdict, reason = str(step.get("verdict", "pass")), str(step.get("reason", ""))
    shadow = tuple(str(kind) for kind in step.get("shadow") or ())
    if verdict == "pass" and shadow:
        return "shadow", ", ".join(shadow), shadow
    return verdict, reason, ()


class _ScriptedUpstream:
    """Serves one request's recorded replies in order; answers judge calls from the recording."""

    codec: Codec
    """The recorded request's format's (set by :meth:`load`): what it reads and replies in."""

    def __init__(self, judge: JudgeMode) -> None:
        self._judge = judge
        self.steps: list[dict[str, Any]] = []
        self.served = 0
        self.assumed: list[bool] = []

    def load(self, steps: list[dict[str, Any]], codec: Codec) -> None:
        self.steps, self.served, self.assumed, self.codec = steps, 0, [], codec

    def __call__(self, request: httpx.Request) -> httpx.Response:
        system = self.codec.parse_request(json.loads(request.content)).first_text("system")
        nonce = _NONCE.search(system) if system else None
        if nonce is not None:
            return self._verdict(nonce.group(1))
        index = min(self.served, len(self.steps) - 1)
        self.assumed.append(self.served >= len(self.steps))
        self.served += 1
        reply = _recorded_reply(self.steps[index]["reply"])
        return httpx.Response(200, content=_encode(self.codec.render_reply(reply)))

    def _verdict(self, nonce: str) -> httpx.Response:
        judged = self.steps[min(self.served, len(self.steps)) - 1] if self.steps else {}
        decided = [judged.get("verdict"), *(judged.get("shadow") or ())]  # enforced, or shadowed
        recorded_done = "judge_continue" not in decided
        done = recorded_done if self._judge == "recorded" else self._judge == "done"
        content = json.dumps({"nonce": nonce, "done": done, "reason": "as recorded" if done else "not done"})
        body = self.codec.render_reply(_recorded_reply({"content": content, "model": "replay-judge"}))
        return httpx.Response(200, content=_encode(body))


class _Capture:
    """The replay pipeline's recorder: what the policy decided at each upstream step."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, Verdict | None]] = []

    def record(self, step: Step) -> None:
        self.steps.append((step.attempt, step.verdict))


def _replay_policy(policy: Policy) -> Policy:
    """The policy as it would be enforced, with summaries built locally (no model to ask)."""
    return policy.model_copy(
        update={
            "mode": "enforce",
            "finalize": policy.finalize.model_copy(update={"use_upstream": False}),
            "recording": RecordingSettings(),
        }
    )


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    return next((value.decode() for key, value in headers if key == name), None)


async def replay_session(
    session: str, requests: Sequence[RecordedRequest], policy: Policy, *, judge: JudgeMode = "recorded"
) -> ReplayResult:
    """What ``policy`` would have done with the recorded session, step by step."""
    scripted = _ScriptedUpstream(judge)
    upstream = UpstreamClient(Settings(upstream=_BASE, retry_attempts=1), httpx.MockTransport(scripted))
    capture = _Capture()
    clock = [requests[0].ts if requests else 0.0]
    metrics = Metrics()
    pipeline = build_pipeline(
        upstream,
        MemoryStore(),
        metrics,
        formats=format_named,
        clock=lambda: clock[0],
        recorder=capture,
    )
    replayed_policy = _replay_policy(policy)
    first = requests[0].steps[0] if requests else {}
    result = ReplayResult(session, str(first.get("policy", "?")), policy.name, [], len(requests))
    _recorded_ending(requests, result)
    try:
        for request in requests:
            clock[0] = request.ts
            await _replay_request(pipeline, scripted, capture, request, replayed_policy, session, result)
            if result.ending is not None:
                break
    finally:
        await upstream.aclose()
    return result


async def _replay_request(
    pipeline: Pipeline,
    scripted: _ScriptedUpstream,
    capture: _Capture,
    recorded: RecordedRequest,
    policy: Policy,
    session: str,
    result: ReplayResult,
) -> None:
    wire = format_named(recorded.steps[0].get("wire"))
    if wire is None:  # read_records refused records of a format this build does not speak
        raise ValueError(f"recorded in a wire format this build does not speak: {recorded.steps[0]['wire']}")
    payload = {k: v for k, v in recorded.payload.items() if k not in ("stream", "stream_options")}
    conversation = wire.codec.parse_request(payload)
    tenant = str(recorded.steps[0].get("tenant", "replay"))
    request = AgentRequest(
        tenant=tenant,
        policy=policy,
        session=SessionRef(session, session_key(tenant, session), derived=False, fresh=False),
        payload=payload,
        body=_encode(payload),
        conversation=conversation,
        url=_BASE + wire.upstream_path,
        headers=[("content-type", "application/json")],
        stream=False,
        wire=wire,
    )
    scripted.load(recorded.steps, wire.codec)
    capture.steps.clear()
    outcome = await pipeline.run(request)
    terminated = _header(outcome.headers, b"x-loopwarden-terminated")
    for index in range(max(len(recorded.steps), len(capture.steps))):
        step = ReplayStep(recorded.turn, index + 1, None, None)
        if index < len(recorded.steps):
            step.recorded, step.recorded_detail, step.shadowed = _recorded(recorded.steps[index])
        if index < len(capture.steps):
            verdict = capture.steps[index][1]
            step.replayed, step.replayed_detail = verdict_name(verdict), verdict_reason(verdict)
            step.assumed = index < len(scripted.assumed) and scripted.assumed[index]
        result.steps.append(step)
    if terminated is not None:
        result.ending, result.ended_at = terminated, recorded.turn
        if not any(isinstance(v, Finalize) for _, v in capture.steps):  # a recorded guard or a budget ended it
            when = "between attempts" if capture.steps else "before any model call"
            result.steps.append(
                ReplayStep(
                    recorded.turn, None, None, f"finalize_{terminated}", replayed_detail=f"recorded guards, {when}"
                )
            )


def _recorded_ending(requests: Sequence[RecordedRequest], result: ReplayResult) -> None:
    """Where the recording ended the session, or (in shadow mode) would have."""
    for request in requests:
        for step in request.steps:
            if str(step.get("verdict", "")).startswith("finalize_"):
                result.recorded_ending, result.recorded_end_turn = str(step["verdict"]), request.turn
                return
            shadowed = [str(kind) for kind in step.get("shadow") or () if str(kind).startswith("finalize_")]
            if shadowed:
                result.recorded_ending, result.recorded_end_turn = shadowed[0], request.turn
                result.recorded_shadow = True
                return


def format_result(result: ReplayResult, width: int = 56) -> str:
    """A table: turn, attempt, what was recorded, what the policy would have done (``*``: differs)."""

    def cell(verdict: str | None, detail: str) -> str:
        if verdict is None:
            return "-"
        text = f"{verdict} ({detail})" if detail and verdict != "pass" else verdict
        return text if len(text) <= width else text[: width - 1] + "…"

    lines = [
        f"session {result.session}: recorded with policy {result.recorded_policy}, replayed with {result.policy}",
        f"{'turn':>4} {'try':>3}   {'recorded':<{width}}  {result.policy}",
    ]
    for step in result.steps:
        attempt = "-" if step.attempt is None else str(step.attempt)
        replayed = cell(step.replayed, step.replayed_detail)
        if step.assumed:
            replayed += "  [reply assumed: the model repeats itself]"
        marker = "*" if step.differs else " "
        lines.append(
            f"{step.turn:>4} {attempt:>3} {marker} {cell(step.recorded, step.recorded_detail):<{width}}  {replayed}"
        )
    if result.recorded_ending is None:
        recorded_end = f"shows no ending at a model step in its {result.turns} turn(s)"
    else:
        ended = "shows its policy (in shadow mode) would have ended it" if result.recorded_shadow else "ended it"
        reason = result.recorded_ending.removeprefix("finalize_")
        recorded_end = f"{ended} at turn {result.recorded_end_turn} ({reason}) of {result.turns}"
    if result.ending is not None:
        lines.append(
            f"=> {result.policy} would have ended the session at turn {result.ended_at} ({result.ending}); "
            f"the recording {recorded_end}."
        )
    else:
        lines.append(f"=> {result.policy} would not have ended the session; the recording {recorded_end}.")
    return "\n".join(lines)
