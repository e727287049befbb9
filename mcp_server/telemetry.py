"""OpenTelemetry for Ingot's processes: their spans over OTLP/HTTP when the settings ask.

`setup_telemetry(settings)`, called once at process start by `ingot serve`, `ingot mcp` and the
commands that call models, installs a TracerProvider with a batching OTLP/HTTP (protobuf) exporter
as the global one when OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set;
the OpenTelemetry SDK reads every other OTEL_* variable (headers, timeout, compression,
OTEL_SERVICE_NAME, resource attributes) from the environment itself. What is queued is exported
before the process ends: at a normal exit, and on SIGTERM (then the process still ends by it).
fastmcp opens one SERVER span per MCP request through that provider (`tools/call route_and_load`:
mcp.method.name, gen_ai.tool.name, gen_ai.operation.name, mcp.session.id when the transport has
sessions, mcp.protocol.version, jsonrpc.request.id, error.type); `instrument(mcp, transport)` adds
network.transport and Ingot's outcome, skill and revision to that same span rather than opening a
second one (its duration is the call's latency). Model calls get GenAI client spans in
optimize/models/spans.py. Left out: metrics, logs and gRPC; and content: no task text, skill body,
prompt or answer is put on a span. Without an endpoint nothing is installed and every span is a
no-op.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

from fastmcp import FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import ToolResult
from opentelemetry import trace

from ingot import __version__
from ingot.errors import ConfigError

if TYPE_CHECKING:  # the SDK and exporter (~0.1 s to import) load only when spans are exported
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from ingot.settings import Settings

TOOL_NAME = "gen_ai.tool.name"  # the MCP semantic conventions' name for a tools/call target
TRANSPORT = "network.transport"  # "pipe" for stdio, "tcp" for HTTP (the MCP conventions)
OUTCOME = "ingot.tool.outcome"  # match / related_match / novel (route_and_load), ok, or error
SKILL = "ingot.skill.name"
REVISION = "ingot.skill.revision"
SCORE = "ingot.route.score"
EXIT_FLUSH_S = 5.0  # how long SIGTERM waits for the queued spans to be sent


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


def setup_telemetry(settings: Settings) -> Telemetry | None:
    """Export spans over OTLP/HTTP if the settings name an endpoint; None if not. Once per process:
    a second call returns the first one's exporter. If another SDK provider is already global (one
    process, one global provider), the exporter is added to it instead of replacing it."""
    global _installed
    if _installed is not None:
        return _installed
    endpoint = traces_url(settings)
    if endpoint is None:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider(resource=_resource())  # flushed at a normal exit (its atexit hook)
        trace.set_tracer_provider(provider)
    processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint))
    provider.add_span_processor(processor)
    _installed = Telemetry(provider, processor)
    _export_on_sigterm()
    return _installed


def traces_url(settings: Settings) -> str | None:
    """The URL spans go to (None: not exported), or a `ConfigError` saying what to set."""
    protocol = (settings.otel_exporter_otlp_protocol or "").strip()
    if protocol and protocol != "http/protobuf":
        raise ConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: Ingot exports traces over OTLP/HTTP (protobuf) "
            "only; set it to http/protobuf (or unset it) and point OTEL_EXPORTER_OTLP_ENDPOINT at the "
            "collector's HTTP port (usually 4318)"
        )
    traces = (settings.otel_exporter_otlp_traces_endpoint or "").strip()
    base = (settings.otel_exporter_otlp_endpoint or "").strip()
    name, url = (
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces) if traces else ("OTEL_EXPORTER_OTLP_ENDPOINT", base)
    )
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"{name}={url}: not an http(s) URL; set the collector's OTLP/HTTP address, e.g. "
            "http://localhost:4318"
        )
    return url if traces else f"{url.rstrip('/')}/v1/traces"


def _export_on_sigterm() -> None:
    """On SIGTERM, send what is queued, then end as SIGTERM would have. Only where nothing else
    handles SIGTERM yet; uvicorn, which handles it while serving, hands it on to this after its
    graceful shutdown."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _flush_then_terminate)


def _flush_then_terminate(signum: int, _frame: FrameType | None) -> None:
    if _installed is not None:
        _installed.flush(EXIT_FLUSH_S)
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


def _resource() -> Resource:
    """OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES as given, else service.name "ingot"."""
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource

    detected = Resource.create({SERVICE_VERSION: __version__})
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        return detected.merge(Resource({SERVICE_NAME: "ingot"}))
    return detected


def instrument(mcp: FastMCP, transport: Literal["stdio", "http"]) -> None:
    """Put Ingot's attributes on the span fastmcp opens for each tool call of `mcp`. Outermost of
    the server's middleware, so that a call refused by another (an unknown tool) says `error` too."""
    mcp.middleware.insert(0, ToolSpans("pipe" if transport == "stdio" else "tcp"))


class ToolSpans(Middleware):
    """Adds outcome, skill, revision (and a route's score) and the transport to the current
    tools/call span, and the tool's name even when the call is refused before fastmcp names the
    span (an unknown tool)."""

    def __init__(self, network_transport: str) -> None:
        self.network_transport = network_transport

    async def on_call_tool(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, ToolResult]
    ) -> ToolResult:
        span = trace.get_current_span()  # fastmcp's SERVER span for this request
        if not span.is_recording():  # no provider installed: nothing to add to
            return await call_next(context)
        span.set_attributes({TOOL_NAME: context.message.name, TRANSPORT: self.network_transport})
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
