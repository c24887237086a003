"""A real OTLP/HTTP trace receiver for tests: decodes each `ExportTraceServiceRequest` (the
opentelemetry-proto package) that exporters POST to `/v1/traces` and keeps its spans."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    """Hex ids; `parent_span_id` is empty for a root span."""
    start_ns: int
    end_ns: int
    attributes: dict[str, object]
    process: str
    """The exporting process (the `sglang.process` resource attribute)."""


def _value(any_value: object) -> object:
    kind = any_value.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(any_value, kind) if kind else None


class OtlpReceiver:
    """Listens on a loopback port; `spans` grows as exporters send."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                receiver._add(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def __enter__(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _add(self, request: ExportTraceServiceRequest) -> None:
        received = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            process=str(resource.get("sglang.process", "")),
                        )
                    )
        with self.lock:
            self.spans.extend(received)

    def first(self, predicate: Callable[[ReceivedSpan], bool], timeout: float = 20.0) -> ReceivedSpan:
        """The first span received that satisfies `predicate`, waiting up to `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                found = next((s for s in self.spans if predicate(s)), None)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError("no such span received")
            time.sleep(0.05)

    def trace(self, trace_id: str, names: set[str], timeout: float = 20.0) -> list[ReceivedSpan]:
        """The spans of `trace_id` received once every name in `names` has arrived (or the
        timeout passed: the caller's assertions then say what is missing)."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                found = [s for s in self.spans if s.trace_id == trace_id]
            if names <= {s.name for s in found} or time.monotonic() > deadline:
                return found
            time.sleep(0.05)
