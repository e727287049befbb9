"""A fake Langfuse server on loopback: OTLP/HTTP trace ingest in, observations v2 JSON out.

It maps span attributes the way the Langfuse server does for the fields Ingot and a Langfuse user
read: name, type, start and end time (so latency), parent, trace, session (`session.id`), input,
output, `langfuse.observation.metadata.*` JSON values, `langfuse.trace.tags`, model, usage and
cost details; the observations API filters by name, type, trace and session. It checks basic auth.
Every span also stays as it arrived (`spans`, decoded by tests/otlp.py), with the paths it was
posted to. Left out: Langfuse's own model price table (a cost is only what the span carried).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.loopback import QuietHandler, serving
from tests.otlp import Span, decode, parse_body
from tests.otlp import value as _value


class FakeLangfuse:
    def __init__(self, public_key: str, secret_key: str) -> None:
        self.auth = "Basic " + base64.b64encode(f"{public_key}:{secret_key}".encode()).decode()
        self.observations: list[dict[str, Any]] = []
        self.spans: list[Span] = []
        self.paths: list[str] = []
        self.url = ""

    def ingest(self, request: ExportTraceServiceRequest) -> None:
        self.spans.extend(decode(request))
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.observations.append(
                        observation(span, {kv.key: _value(kv.value) for kv in span.attributes})
                    )


def _time(ns: int) -> str:
    return (
        dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    )


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def observation(span: Any, attrs: dict[str, Any]) -> dict[str, Any]:
    """One span as the observations v2 API returns it."""
    metadata = {
        key.removeprefix("langfuse.observation.metadata."): json.loads(value)
        for key, value in attrs.items()
        if key.startswith("langfuse.observation.metadata.")
    }
    cost = _json(attrs.get("langfuse.observation.cost_details"))
    parent = span.parent_span_id.hex() or None
    return {
        "id": span.span_id.hex(),
        "traceId": span.trace_id.hex(),
        "projectId": "fake",
        "type": str(attrs.get("langfuse.observation.type", "SPAN")).upper(),
        "startTime": _time(span.start_time_unix_nano),
        "endTime": _time(span.end_time_unix_nano),
        "latency": (span.end_time_unix_nano - span.start_time_unix_nano) / 1e9,
        "parentObservationId": parent,
        "isRootObservation": parent is None,
        "name": span.name,
        "sessionId": attrs.get("session.id"),
        "traceName": attrs.get("langfuse.trace.name"),
        "input": attrs.get("langfuse.observation.input"),
        "output": attrs.get("langfuse.observation.output"),
        "metadata": metadata,
        "tags": attrs.get("langfuse.trace.tags", []),
        "model": attrs.get("langfuse.observation.model.name"),
        "usageDetails": _json(attrs.get("langfuse.observation.usage_details")),
        "costDetails": cost,
        "totalCost": (cost or {}).get("total"),
    }


FILTERS = {"name": "name", "type": "type", "traceId": "traceId", "sessionId": "sessionId"}  # query: field


def _handler(state: FakeLangfuse) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def _reply(self, status: int, payload: dict[str, Any] | None = None) -> None:
            data = json.dumps(payload or {}).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            if self.headers.get("authorization") != state.auth:
                return self._reply(401, {"message": "unauthorized"})
            state.paths.append(self.path)
            state.ingest(parse_body(self.headers, body))
            self._reply(200)

        def do_GET(self) -> None:  # noqa: N802
            if self.headers.get("authorization") != state.auth:
                return self._reply(401, {"message": "unauthorized"})
            url = urlsplit(self.path)
            if url.path.rstrip("/") != "/api/public/v2/observations":
                return self._reply(404, {"message": "not found"})
            query = parse_qs(url.query)
            wanted = {field: query[param][0] for param, field in FILTERS.items() if param in query}
            limit = int(query.get("limit", ["50"])[0])
            start = int(query.get("cursor", ["0"])[0] or 0)
            matching = [o for o in state.observations if all(o[f] == v for f, v in wanted.items())]
            page = matching[start : start + limit]
            more = start + limit < len(matching)
            self._reply(200, {"data": page, "meta": {"cursor": str(start + limit) if more else None}})

    return Handler


@contextmanager
def fake_langfuse(public_key: str = "pk-lf-test", secret_key: str = "sk-lf-test") -> Iterator[FakeLangfuse]:
    state = FakeLangfuse(public_key, secret_key)
    with serving(_handler(state)) as state.url:
        yield state
