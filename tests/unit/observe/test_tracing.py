"""Traces: GenAI-convention spans and guard decisions as events, with an in-memory exporter."""

from __future__ import annotations

import json

import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from proxy.loop.build import build_pipeline
from proxy.observe.metrics import Metrics
from proxy.observe.tracing import Tracing
from proxy.session.memory import MemoryStore
from proxy.settings import Settings
from proxy.upstream.client import UpstreamClient
from proxy.wire.registry import format_named
from tests.support.agent_request import agent_request
from tests.support.fake_upstream import chat_completion, tool_call

PAYLOAD = {
    "model": "gpt-test",
    "messages": [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("search", "{}", "c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "result text"},
    ],
}


async def test_spans_follow_the_genai_conventions_and_carry_decisions():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    replies = [chat_completion(None), chat_completion("A full answer. " * 30)]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=json.dumps(replies.pop(0)).encode())

    upstream = UpstreamClient(Settings(upstream="http://up/v1"), httpx.MockTransport(handler))
    pipeline = build_pipeline(
        upstream,
        MemoryStore(),
        Metrics(),
        formats=format_named,
        tracing=Tracing(provider.get_tracer("test")),
    )
    request = agent_request(PAYLOAD)

    await pipeline.run(request)

    spans = {span.name: span for span in exporter.get_finished_spans()}
    agent = spans["invoke_agent"]
    assert set(spans) == {"invoke_agent", "execute_tool search", "chat gpt-test"}
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.conversation.id"] == "s1"
    assert spans["execute_tool search"].parent.span_id == agent.context.span_id
    assert spans["execute_tool search"].attributes["loopwarden.result_size"] == len("result text")
    chats = [s for s in exporter.get_finished_spans() if s.name == "chat gpt-test"]
    assert len(chats) == 2  # the empty reply, then the nudged retry
    assert chats[0].attributes["gen_ai.usage.output_tokens"] == 7
    assert [e.name for e in agent.events] == ["loopwarden.intervention"]
    assert agent.events[0].attributes["kind"] == "empty_nudge"


def test_tracing_is_a_no_op_without_an_endpoint():
    tracing = Tracing.from_endpoint(None)

    with tracing.span("invoke_agent", {}) as span:
        tracing.event("x", {})

    assert span is None
    assert not tracing.enabled


def test_an_endpoint_turns_tracing_on():
    assert Tracing.from_endpoint("http://127.0.0.1:4318/v1/traces").enabled
