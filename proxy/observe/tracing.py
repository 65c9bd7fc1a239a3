"""OpenTelemetry traces, off unless an OTLP endpoint is configured.

Spans follow the GenAI semantic conventions: ``invoke_agent`` per agent request, ``chat``
per model call the proxy makes (the agent's, the judge's, the summary), and
``execute_tool`` for each tool result the agent sends (the agent ran the tool; the span
records that it happened). Guard decisions are span events. When tracing is off every call
here is a no-op and ``opentelemetry`` is not even imported.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

__all__ = ["NO_SPAN", "Tracing"]

Attributes = Mapping[str, str | int | float | bool]
NO_SPAN: AbstractContextManager[None] = nullcontext()
"""The one span of everything when tracing is off: a context that does nothing."""


class Tracing:
    """A tracer when configured, else nothing at all."""

    def __init__(self, tracer: Any | None = None) -> None:
        self._tracer = tracer

    @classmethod
    def from_endpoint(cls, endpoint: str | None, service_name: str = "loopwarden") -> Tracing:
        """OTLP over HTTP to ``endpoint`` (e.g. http://collector:4318/v1/traces), batched."""
        if not endpoint:
            return cls()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        return cls(provider.get_tracer("loopwarden"))

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def span(self, name: str, attributes: Attributes) -> AbstractContextManager[Any | None]:
        """A span around the ``with`` block (None when off: one shared context that does nothing)."""
        tracer = self._tracer
        return NO_SPAN if tracer is None else _span(tracer, name, attributes)

    def event(self, name: str, attributes: Attributes) -> None:
        """A guard decision on the current span."""
        if self._tracer is None:
            return
        from opentelemetry import trace

        trace.get_current_span().add_event(name, attributes=dict(attributes))

    def annotate(self, span: Any | None, attributes: Attributes) -> None:
        if span is not None:
            span.set_attributes(dict(attributes))


@contextmanager
def _span(tracer: Any, name: str, attributes: Attributes) -> Iterator[Any]:
    with tracer.start_as_current_span(name, attributes=dict(attributes)) as span:
        yield span
