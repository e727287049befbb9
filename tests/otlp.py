"""A loopback OTLP/HTTP trace receiver for tests: what an exporter sends, decoded.

Any POST is parsed as an `ExportTraceServiceRequest` (protobuf, gzip or not), so the same server
stands in for a collector (`/v1/traces`) or Langfuse's OTel endpoint (`/api/public/otel/v1/traces`);
each request's path and headers are kept. Spans come back as plain records with their attributes
decoded, so tests assert on exactly what left the process.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.loopback import QuietHandler, serving


def value(v: Any) -> Any:
    """An OTLP AnyValue as Python."""
    if v.HasField("array_value"):
        return [value(x) for x in v.array_value.values]
    if v.HasField("kvlist_value"):
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    for kind in ("string_value", "bool_value", "int_value", "double_value", "bytes_value"):
        if v.HasField(kind):
            return getattr(v, kind)
    return None


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: int  # the OTLP enum: 1 internal, 2 server, 3 client
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    scope: str
    resource: dict[str, Any]
    status: int  # 0 unset, 1 ok, 2 error

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    def json(self, key: str) -> Any:
        """An attribute that holds JSON (Langfuse's usage and cost details, metadata)."""
        return json.loads(self.attributes[key])


def decode(request: ExportTraceServiceRequest) -> list[Span]:
    spans = []
    for resource in request.resource_spans:
        resource_attributes = {kv.key: value(kv.value) for kv in resource.resource.attributes}
        for scope in resource.scope_spans:
            for span in scope.spans:
                spans.append(
                    Span(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex() or None,
                        kind=span.kind,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes={kv.key: value(kv.value) for kv in span.attributes},
                        scope=scope.scope.name,
                        resource=resource_attributes,
                        status=span.status.code,
                    )
                )
    return spans


def parse_body(headers: Any, body: bytes) -> ExportTraceServiceRequest:
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return request


@dataclass
class OtlpReceiver:
    url: str = ""
    spans: list[Span] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)  # path, headers, raw
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self, body: bytes, path: str, headers: Any) -> None:
        spans = decode(parse_body(headers, body))
        with self._lock:
            self.requests.append((path, dict(headers), body))
            self.spans.extend(spans)

    def named(self, name: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.name == name]

    def clear(self) -> None:
        with self._lock:
            self.spans.clear()
            self.requests.clear()


def _handler(state: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            state.take(body, self.path, self.headers)
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

    return Handler


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A receiver on a free loopback port; `state.url` is its base URL (no trailing /)."""
    state = OtlpReceiver()
    with serving(_handler(state)) as state.url:
        yield state
