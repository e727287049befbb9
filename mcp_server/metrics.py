"""`/metrics`: what a serving process is doing, in Prometheus' text format (prometheus-client).

Each server gets its own `Metrics` (its own registry, never the process-global one), so two
servers in one process, or in one test run, never mix their numbers. Measured on the serving path:
- `ingot_route_and_load_total{outcome}`: match, related_match, novel or error;
- `ingot_tool_calls_total{tool,outcome}` and `ingot_tool_call_seconds{tool}` (a histogram of the
  server's own time per call, from the middleware to the result);
read when scraped, from what is served now:
- `ingot_skill_served_info{skill,revision}` (1 per served skill) and `ingot_skills_served`;
- whatever the front end adds through `add` (change control's pending changes and audit chain,
  a replica's verified commit, refused commits and lag, a primary's unpushed commits), each a
  function returning samples, so this module imports nothing of change control's.
No task text, skill body or caller identity is ever a label.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import ToolResult
from prometheus_client import CollectorRegistry, Counter, Histogram, make_asgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mcp_server.library import Library

log = logging.getLogger(__name__)
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# A label is one of these or "other": a client calling made-up tool names cannot grow the series.
TOOLS = frozenset({"route_and_load", "get_skill", "suggest_skills", "reload_skills", "create_skill"})


@dataclass(frozen=True)
class Gauge:
    """One gauge sample a front end reports: its name, help, labels and value."""

    name: str
    documentation: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


GaugeSource = Callable[[], Iterable[Gauge]]


class _Served(Collector):
    """The served snapshot and the front end's gauges, read at scrape time."""

    def __init__(self, library: Library, sources: list[GaugeSource]) -> None:
        self.library, self.sources = library, sources

    def collect(self) -> Iterator[Metric]:
        skills = self.library.skills()
        info = GaugeMetricFamily(
            "ingot_skill_served_info",
            "The revision each served skill is served at.",
            labels=["skill", "revision"],
        )
        for name, skill in sorted(skills.items()):
            info.add_metric([name, skill.revision], 1)
        yield info
        yield GaugeMetricFamily("ingot_skills_served", "Skills served now.", value=len(skills))
        families: dict[str, GaugeMetricFamily] = {}
        for source in self.sources:
            try:
                gauges = list(source())
            except Exception:  # a scrape must never fail because one source did
                log.exception("a metrics source failed")
                continue
            for gauge in gauges:
                family = families.get(gauge.name)
                if family is None:
                    family = families[gauge.name] = GaugeMetricFamily(
                        gauge.name, gauge.documentation, labels=[k for k, _ in gauge.labels]
                    )
                family.add_metric([v for _, v in gauge.labels], gauge.value)
        yield from families.values()


class Metrics:
    """One server's metrics: its registry, the tool-call middleware and the ASGI app."""

    def __init__(self, library: Library) -> None:
        self.registry = CollectorRegistry()
        self.routes = Counter(
            "ingot_route_and_load", "route_and_load calls by outcome.", ["outcome"], registry=self.registry
        )
        self.calls = Counter(
            "ingot_tool_calls",
            "MCP tool calls by tool and outcome.",
            ["tool", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "ingot_tool_call_seconds",
            "The server's time per MCP tool call.",
            ["tool"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._sources: list[GaugeSource] = []
        self.registry.register(_Served(library, self._sources))

    def add(self, source: GaugeSource) -> None:
        """Report `source`'s gauges at every scrape."""
        self._sources.append(source)

    def middleware(self) -> Middleware:
        return _ToolMetrics(self)

    def app(self) -> Any:
        """The ASGI app serving the text format (route /metrics to it). An object, not a
        function, so that a router takes it for an ASGI app and not for a request handler."""
        return _Asgi(make_asgi_app(self.registry))

    def record(self, tool: str, outcome: str, seconds: float) -> None:
        self.calls.labels(tool, outcome).inc()
        self.latency.labels(tool).observe(seconds)
        if tool == "route_and_load":
            self.routes.labels(outcome).inc()


class _Asgi:
    def __init__(self, app: Any) -> None:
        self._app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._app(scope, receive, send)


def outcome(tool: str, data: Any, is_error: bool) -> str:
    """match / related_match / novel for route_and_load; ok or error for every tool."""
    if is_error:
        return "error"
    if tool != "route_and_load" or not isinstance(data, dict):
        return "ok"
    return "match" if data.get("match") else "related_match" if data.get("related_match") else "novel"


class _ToolMetrics(Middleware):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def on_call_tool(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, ToolResult]
    ) -> ToolResult:
        tool = context.message.name if context.message.name in TOOLS else "other"
        start = time.perf_counter()
        try:
            result = await call_next(context)
        except Exception:
            self.metrics.record(tool, "error", time.perf_counter() - start)
            raise
        self.metrics.record(
            tool, outcome(tool, result.structured_content, bool(result.is_error)), time.perf_counter() - start
        )
        return result
