"""OpenTelemetry spans of a request's stages, exported over OTLP (`--enable-trace`).

A request's spans form one tree under the caller's W3C `traceparent` (when it sent one):

    sglang.request            tokenizer manager: from receipt to the last output
      receive                 parsing and splitting the input
      tokenize                one per prompt: tokenizing and validating it
      queue                   scheduler: arrival to first admission
      prefill                 scheduler: admission to the first output token
      decode                  scheduler: first token to the end (a summary: tokens, mean gap)
      detokenize              detokenizer: first to last update (busy time as an attribute)
      kv_transfer             prefill-decode disaggregation (`StageTracer.record` is the hook)

Each process exports its own spans; the request's span context crosses processes as a
`TraceCarrier` inside the typed messages (`GenerateRequest.trace`, `TokenUpdate.trace`), never
in process globals. With tracing off nothing here is imported beyond this module, the
carriers are None and no span is made: the OpenTelemetry SDK is an optional dependency
(the `tracing` extra), imported only by `StageTracer.start`.

As upstream, the exporter speaks OTLP over gRPC unless `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` is
`http/protobuf`; `SGLANG_OTLP_EXPORTER_SCHEDULE_DELAY_MILLIS` (default 500) and
`SGLANG_OTLP_EXPORTER_MAX_EXPORT_BATCH_SIZE` (default 64) tune the batching.
"""

from __future__ import annotations

import atexit
import os
import time
from dataclasses import dataclass
from typing import Any

TRACE_HEADERS = ("traceparent", "tracestate")


@dataclass(frozen=True)
class TraceCarrier:
    """The W3C trace-context headers of a request's root span: what a process needs to parent
    its spans on it. Pickled inside the messages between processes."""

    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TraceConfig:
    """What a process needs to start exporting: the collector, and which process it is (the
    `sglang.process` resource attribute; the service name is `sglang`, as upstream's)."""

    endpoint: str
    process: str


def trace_headers(headers: Any) -> dict[str, str] | None:
    """The W3C trace-context headers among `headers` (any mapping with `.get`), None if none."""
    found = {name: value for name in TRACE_HEADERS if (value := headers.get(name))}
    return found or None


def _span_exporter(endpoint: str) -> Any:
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=endpoint, insecure=True)
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # Upstream's default endpoint is `host:port` (gRPC's form); OTLP/HTTP needs a URL.
        url = endpoint if "://" in endpoint else f"http://{endpoint}"
        if url.count("/") == 2:
            url += "/v1/traces"
        return OTLPSpanExporter(endpoint=url)
    raise ValueError(f"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL={protocol!r}: supported are grpc and http/protobuf")


class StageTracer:
    """One process's tracer. Spans are made from explicit start and end times (nanoseconds since
    the epoch), so a stage measured in one place can be reported in one call."""

    def __init__(self, tracer: Any, propagator: Any, provider: Any) -> None:
        self._tracer = tracer
        self._propagator = propagator
        self.provider = provider

    @classmethod
    def start(cls, config: TraceConfig | None) -> StageTracer | None:
        """The process's tracer, exporting to `config.endpoint`; None (and nothing imported)
        when tracing is off. Spans still queued are flushed when the process exits."""
        if config is None:
            return None
        try:
            from opentelemetry.sdk.resources import SERVICE_NAME, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError as e:
            raise RuntimeError(
                f"--enable-trace needs the OpenTelemetry SDK ({e}): pip install 'sglang-hal[tracing]'"
            ) from None

        resource = Resource.create({SERVICE_NAME: "sglang", "sglang.process": config.process})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(
            BatchSpanProcessor(
                _span_exporter(config.endpoint),
                schedule_delay_millis=int(os.environ.get("SGLANG_OTLP_EXPORTER_SCHEDULE_DELAY_MILLIS", 500)),
                max_export_batch_size=int(os.environ.get("SGLANG_OTLP_EXPORTER_MAX_EXPORT_BATCH_SIZE", 64)),
            )
        )
        atexit.register(provider.shutdown)
        return cls(provider.get_tracer("sglang"), TraceContextTextMapPropagator(), provider)

    def begin(self, name: str, parent: dict[str, str] | None, start_ns: int, attributes: dict[str, Any]) -> RequestSpan:
        """A request's root span, a child of the caller's `traceparent` when `parent` has one."""
        context = self._propagator.extract(parent or {})
        span = self._tracer.start_span(name, context=context, start_time=start_ns, attributes=attributes)
        return RequestSpan(self, span)

    def record(
        self, carrier: TraceCarrier, name: str, start_ns: int, end_ns: int, attributes: dict[str, Any] | None = None
    ) -> None:
        """A finished span of one stage under the request `carrier` names. Also the hook for
        stages measured outside this module (the KV transfer of prefill-decode disaggregation)."""
        context = self._propagator.extract(dict(carrier.headers))
        span = self._tracer.start_span(name, context=context, start_time=start_ns, attributes=attributes)
        span.end(end_time=max(end_ns, start_ns))

    def carrier_of(self, span: Any) -> TraceCarrier:
        from opentelemetry import trace

        headers: dict[str, str] = {}
        self._propagator.inject(headers, context=trace.set_span_in_context(span))
        return TraceCarrier(tuple(sorted(headers.items())))


class RequestSpan:
    """A request's root span in the tokenizer manager; `carrier` parents the other processes'."""

    def __init__(self, tracer: StageTracer, span: Any) -> None:
        self.tracer = tracer
        self.span = span
        self.carrier = tracer.carrier_of(span)

    def stage(self, name: str, start_ns: int, attributes: dict[str, Any] | None = None) -> None:
        """A child stage that began at `start_ns` and ends now."""
        self.tracer.record(self.carrier, name, start_ns, time.time_ns(), attributes)

    def end(self, attributes: dict[str, Any]) -> None:
        self.span.set_attributes(attributes)
        self.span.end()
