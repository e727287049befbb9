"""OpenTelemetry for the serving process: Ingot's spans over OTLP/HTTP when the environment asks.

`setup_telemetry()`, called once at process start by `ingot serve` and `ingot mcp`, installs a
TracerProvider with a batching OTLP/HTTP (protobuf) exporter as the global one when
OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; the OpenTelemetry SDK
reads every other OTEL_* variable (headers, timeout, compression, OTEL_SERVICE_NAME, resource
attributes) itself. fastmcp already opens one SERVER span per MCP request through that provider
(`tools/call route_and_load`: mcp.method.name, gen_ai.tool.name, gen_ai.operation.name,
mcp.session.id, mcp.protocol.version, jsonrpc.request.id, error.type); `instrument(mcp)` adds
Ingot's outcome, skill and revision to that same span rather than opening a second one (its
duration is the call's latency). Model calls get GenAI client spans in optimize/models/spans.py.
Left out: metrics, logs and gRPC; and content: no task text, skill body, prompt or answer is put
on a span. Without an endpoint nothing is installed and every span is a no-op.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastmcp import FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import ToolResult
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ingot import __version__
from ingot.errors import ConfigError

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
TOOL_NAME = "gen_ai.tool.name"  # the MCP semantic conventions' name for a tools/call target
OUTCOME = "ingot.tool.outcome"  # match / related_match / novel (route_and_load), ok, or error
SKILL = "ingot.skill.name"
REVISION = "ingot.skill.revision"
SCORE = "ingot.route.score"


@dataclass(frozen=True)
class Telemetry:
    """The exporter `setup_telemetry` installed, on the provider it sits on."""

    provider: TracerProvider
    processor: BatchSpanProcessor

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export every finished span now; False if that did not finish within `timeout_s`."""
        return self.processor.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        """Flush and stop this exporter (the provider stays, as a global one must)."""
        global _installed
        self.processor.shutdown()
        _installed = None


_installed: Telemetry | None = None


def setup_telemetry() -> Telemetry | None:
    """Export spans over OTLP/HTTP if an endpoint is set; None if not. Once per process: a
    second call returns the first one's exporter. If another SDK provider is already global (one
    process, one global provider), the exporter is added to it instead of replacing it."""
    global _installed
    if _installed is not None:
        return _installed
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if not any(os.environ.get(name, "").strip() for name in ENDPOINT_VARS):
        return None
    _check_protocol()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider(resource=_resource())
        trace.set_tracer_provider(provider)
    processor = BatchSpanProcessor(OTLPSpanExporter())
    provider.add_span_processor(processor)
    _installed = Telemetry(provider, processor)
    return _installed


def _check_protocol() -> None:
    for name in PROTOCOL_VARS:
        protocol = os.environ.get(name, "").strip()
        if protocol and protocol != "http/protobuf":
            raise ConfigError(
                f"{name}={protocol}: Ingot exports traces over OTLP/HTTP (protobuf) only; set it to "
                "http/protobuf and point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port "
                "(usually 4318)"
            )
        if protocol:
            return  # the traces-specific variable wins over the general one


def _resource() -> Resource:
    """OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES as given, else service.name "ingot"."""
    detected = Resource.create({SERVICE_VERSION: __version__})
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        return detected.merge(Resource({SERVICE_NAME: "ingot"}))
    return detected


def instrument(mcp: FastMCP) -> None:
    """Put Ingot's attributes on the span fastmcp opens for each tool call of `mcp`. Call it before
    adding middleware that may refuse a call, so that a refused call's span says `error` too."""
    mcp.add_middleware(ToolSpans())


class ToolSpans(Middleware):
    """Adds outcome, skill, revision (and a route's score) to the current tools/call span, and the
    tool's name even when the call is refused before fastmcp names the span (an unknown tool)."""

    async def on_call_tool(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, ToolResult]
    ) -> ToolResult:
        span = trace.get_current_span()  # fastmcp's SERVER span for this request
        if not span.is_recording():  # no provider installed: nothing to add to
            return await call_next(context)
        span.set_attribute(TOOL_NAME, context.message.name)
        try:
            result = await call_next(context)
        except Exception:
            span.set_attribute(OUTCOME, "error")
            raise
        span.set_attributes(tool_attributes(context.message.name, result.structured_content, result.is_error))
        return result


def tool_attributes(tool: str, data: Mapping[str, Any] | None, is_error: bool = False) -> dict[str, Any]:
    """Ingot's span attributes for one tool result."""
    if is_error:
        return {OUTCOME: "error"}
    data = data or {}
    attributes: dict[str, Any] = {OUTCOME: "ok"}
    skill = data.get("name") or data.get("skill")
    if tool == "route_and_load":
        skill = data.get("match") or data.get("related_match")
        attributes[OUTCOME] = "match" if data.get("match") else "related_match" if skill else "novel"
        if isinstance(data.get("score"), int | float):
            attributes[SCORE] = float(data["score"])
    if isinstance(skill, str):
        attributes[SKILL] = skill
    revision = data.get("revision") or data.get("candidate_revision")
    if isinstance(revision, str):
        attributes[REVISION] = revision
    return attributes
