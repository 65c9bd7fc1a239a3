"""A request cancelled because its client left still writes what it used, whole."""

from __future__ import annotations

import asyncio

import httpx
import msgspec

from proxy.loop.build import build_pipeline
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy
from proxy.request import AgentRequest
from proxy.session.base import SessionDelta
from proxy.session.identity import identify
from proxy.session.memory import MemoryStore
from proxy.settings import Settings
from proxy.upstream.client import UpstreamClient
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.chat.parse import parse_conversation
from tests.support.fake_upstream import chat_completion

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "Do the task."}]}


class SlowCommits(MemoryStore):
    """Commits that take a while (a Redis round trip), saying when one has begun."""

    in_process = False  # its commits suspend, as a remote store's do

    def __init__(self) -> None:
        super().__init__()
        self.writing = asyncio.Event()

    async def commit(self, key: str, delta: SessionDelta, ttl_seconds: int):
        self.writing.set()
        await asyncio.sleep(0.05)
        return await super().commit(key, delta, ttl_seconds)


def completion(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=msgspec.json.encode(chat_completion("Done properly.")))


async def test_a_request_cancelled_while_it_commits_still_writes_its_usage():
    store = SlowCommits()
    upstream = UpstreamClient(Settings(upstream="http://up/v1"), httpx.MockTransport(completion))
    pipeline = build_pipeline(upstream, store, Metrics())
    conversation = parse_conversation(PAYLOAD)
    call = AgentRequest(
        tenant="t",
        policy=Policy(),
        session=identify("t", conversation, "s1", None),
        payload=PAYLOAD,
        body=msgspec.json.encode(PAYLOAD),
        conversation=conversation,
        url="http://up/v1/chat/completions",
        headers=[],
        stream=False,
        wire=CHAT_COMPLETIONS,
    )

    running = asyncio.ensure_future(pipeline.run(call))
    await store.writing.wait()
    running.cancel()  # the client left just as the reply was being booked
    await asyncio.gather(running, return_exceptions=True)
    await asyncio.sleep(0.1)

    state = await MemoryStore.load(store, call.session.key)
    assert state.steps == 1
    assert state.counter("tokens_in") == 11
