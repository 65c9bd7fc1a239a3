"""Opt-in recording of upstream steps, the input of ``loopwarden replay``.

A policy with ``recording.enabled`` gets one record per upstream step: the agent's request
(on a request's first attempt), the reply, the verdict taken (or, in shadow mode, the
verdicts that would have been taken) and the messages a nudge appended. Keys are
redacted (:func:`proxy.observe.logs.redact`) and headers are never recorded; message contents are,
because the operator asked for them.

The pipeline calls :meth:`Recorder.record` synchronously on every step; it only builds the
record and queues it. A background task appends batches to a JSON Lines file or adds them
to a Redis stream, so a slow disk or Redis never holds up a reply. A full queue drops
records (counted and logged) rather than growing without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import msgspec
import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from proxy.exchange import Reply
from proxy.guards.base import GuardContext
from proxy.observe.logs import log_event, redact
from proxy.request import AgentRequest, RequestNotes
from proxy.session.base import StoreUnavailable
from proxy.session.resp import redis_target
from proxy.verdict import Nudge, Verdict, verdict_name, verdict_reason

__all__ = ["FORMAT_VERSION", "Recorder", "Step", "StepRecorder", "redacted", "step_record"]

FORMAT_VERSION = 1
_encode = msgspec.json.Encoder().encode


@dataclass(slots=True)
class Step:
    """One upstream step of the guard loop: what was asked, answered and decided. (Not frozen:
    one is built per upstream call, and a frozen dataclass pays a setattr call per field.)"""

    request: AgentRequest
    context: GuardContext
    """The guards' view when they decided (the session as it stood, with this step counted)."""
    attempt: int
    reply: Reply
    verdict: Verdict | None
    """The decision that was acted on (None: every guard passed)."""
    latency: float
    notes: RequestNotes


class StepRecorder(Protocol):
    """What the pipeline calls on every upstream step (the recorder, or replay's capture)."""

    def record(self, step: Step) -> None: ...


def redacted(value: Any) -> Any:
    """A copy of decoded JSON with every string passed through :func:`redact`."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {key: redacted(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(item) for item in value]
    return value


def reply_record(reply: Reply) -> dict[str, Any]:
    return {
        "content": reply.content,
        "reasoning": reply.reasoning,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments, "kind": c.kind} for c in reply.tool_calls
        ],
        "finish_reason": reply.finish_reason,
        "model": reply.model,
        "usage": {
            "prompt_tokens": reply.usage.prompt_tokens,
            "completion_tokens": reply.usage.completion_tokens,
            "cached_tokens": reply.usage.cached_tokens,
        },
    }


def step_record(step: Step) -> dict[str, Any]:
    """One step as a JSON-ready dict, keys redacted from everything a model or an agent wrote."""
    request, context, attempt, verdict, notes = step.request, step.context, step.attempt, step.verdict, step.notes
    record: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "ts": notes.started,
        "tenant": request.tenant,
        "policy": request.policy.name,
        "mode": request.policy.mode,
        "session": request.session.id,
        "wire": request.wire.name,
        # Attempts of one agent request share its notes object: their ids group them.
        "request_id": f"{id(notes):x}-{notes.started:.6f}",
        "turn": context.state.turns,
        "step": context.state.steps,
        "attempt": attempt,
        "stream": request.stream,
        "verdict": verdict_name(verdict),
        "reason": redact(verdict_reason(verdict)),
        "shadow": list(notes.shadow),
        "latency_ms": round(step.latency * 1000, 3),
        "reply": redacted(reply_record(step.reply)),
    }
    if attempt == 1:
        record["request"] = redacted(request.payload)
    if isinstance(verdict, Nudge):
        record["messages"] = redacted(request.wire.codec.rendered_turns(verdict.turns))
    return record


class Recorder:
    """Queues records of the policies that opted in; a background task writes them out."""

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        cluster: bool = False,
        timeout: float = 1.0,
        queue_size: int = 10_000,
        batch: int = 256,
    ) -> None:
        self._redis_url = redis_url
        self._target = redis_target(redis_url, cluster=cluster) if redis_url else "Redis"
        self._cluster = cluster
        self._timeout = timeout
        self._queue: asyncio.Queue[tuple[Any, dict[str, Any]]] | None = None
        self._queue_size = queue_size
        self._batch = batch
        self._task: asyncio.Task[None] | None = None
        self._redis: redis.Redis | RedisCluster | None = None
        self.dropped = 0
        self.written = 0

    def record(self, step: Step) -> None:
        request = step.request
        settings = request.policy.recording
        if not settings.enabled:
            return
        if settings.redis_stream is not None and self._redis_url is None:
            self._drop(1, "redis_stream set but the proxy has no --redis-url")
            return
        try:
            record = step_record(step)
        except RecursionError:  # a request nested as deep as a body may be: not worth a 500
            self._drop(1, "nested too deeply to record")
            return
        queue = self._ensure_started()
        try:
            queue.put_nowait((settings, record))
        except asyncio.QueueFull:
            self._drop(1, "queue full")

    def _drop(self, count: int, why: str) -> None:
        self.dropped += count
        log_event("recording_dropped", {"records": count, "why": why}, logging.WARNING)

    def _ensure_started(self) -> asyncio.Queue[tuple[Any, dict[str, Any]]]:
        if self._queue is None:
            self._queue = asyncio.Queue(self._queue_size)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain(self._queue))
        return self._queue

    async def flush(self) -> None:
        """Wait until every queued record is written (or dropped)."""
        if self._queue is not None and self._task is not None and not self._task.done():
            await self._queue.join()

    async def aclose(self) -> None:
        """Write what is queued (bounded by a few seconds), then stop."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self.flush()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._redis is not None:
            await self._redis.aclose()

    async def _drain(self, queue: asyncio.Queue[tuple[Any, dict[str, Any]]]) -> None:
        while True:
            items = [await queue.get()]
            while len(items) < self._batch and not queue.empty():
                items.append(queue.get_nowait())
            try:
                await self._write(items)
                self.written += len(items)
            except (RedisError, TimeoutError) as exc:  # a file's OSError names its path; Redis's, here, its address
                self._drop(len(items), str(StoreUnavailable.at(self._target, "writing the recording", exc)))
            except OSError as exc:
                self._drop(len(items), f"{type(exc).__name__}: {exc}")
            finally:
                for _ in items:
                    queue.task_done()

    async def _write(self, items: list[tuple[Any, dict[str, Any]]]) -> None:
        files: dict[str, list[bytes]] = {}
        streams: dict[tuple[str, int], list[bytes]] = {}
        for settings, record in items:
            line = _encode(record)
            if settings.jsonl_path is not None:
                files.setdefault(settings.jsonl_path, []).append(line + b"\n")
            else:
                streams.setdefault((settings.redis_stream, settings.max_len), []).append(line)
        for path, lines in files.items():
            await asyncio.to_thread(_append, Path(path), b"".join(lines))
        if streams:
            client = self._client()
            for (stream, max_len), lines in streams.items():
                pipe = client.pipeline(transaction=False)
                for line in lines:
                    pipe.xadd(stream, {"record": line}, maxlen=max_len, approximate=True)
                async with asyncio.timeout(self._timeout * 5):
                    await pipe.execute()

    def _client(self) -> redis.Redis | RedisCluster:
        if self._redis is None:
            if self._redis_url is None:  # checked in record(); kept for the type checker
                raise RedisError("no Redis URL for recording")
            kwargs: dict[str, Any] = {"socket_timeout": self._timeout, "socket_connect_timeout": self._timeout}
            if self._cluster:
                self._redis = RedisCluster.from_url(self._redis_url, **kwargs)
            else:
                self._redis = redis.Redis.from_url(self._redis_url, **kwargs)
        return self._redis


def _append(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as handle:
        handle.write(data)
