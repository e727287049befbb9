"""The OpenTelemetry span of one model call, named by the GenAI semantic conventions.

`model_span` wraps a call of optimize/models/llm.py in a CLIENT span `chat <model>` with
gen_ai.operation.name, gen_ai.provider.name ("openrouter" on an OpenRouter URL, else "openai":
every endpoint speaks OpenAI's API), gen_ai.request.model, server.address and server.port, then
gen_ai.response.model, gen_ai.usage.input_tokens / output_tokens (only when the endpoint reported
usage), gen_ai.response.finish_reasons, and Ingot's role, cost (when priced) and cassette flag;
a failure sets error.type. No prompt or answer text is put on it. It goes to the global tracer
provider, so it is a no-op unless a process installed one (mcp_server/telemetry.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

if TYPE_CHECKING:
    from optimize.models.endpoints import Endpoint
    from optimize.models.llm import Completion

_tracer = trace.get_tracer("ingot.models")


@contextmanager
def model_span(endpoint: Endpoint, role: str, model: str) -> Iterator[Span]:
    """The span of one call; set its result with `record_completion`."""
    with _tracer.start_as_current_span(
        f"chat {model}", kind=SpanKind.CLIENT, attributes=request_attributes(endpoint, role, model)
    ) as span:
        try:
            yield span
        except Exception as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            raise


def request_attributes(endpoint: Endpoint, role: str, model: str) -> dict[str, Any]:
    url = urlsplit(endpoint.base_url)
    host = (url.hostname or "").lower()
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openrouter" if host.endswith("openrouter.ai") else "openai",
        "gen_ai.request.model": model,
        "server.address": host,
        "server.port": url.port or (443 if url.scheme == "https" else 80),
        "ingot.model.role": role,
    }
    return attributes


def record_completion(span: Span, completion: Completion) -> None:
    attributes: dict[str, Any] = {"gen_ai.response.model": completion.model}
    if completion.usage_known:
        attributes["gen_ai.usage.input_tokens"] = completion.tokens_in
        attributes["gen_ai.usage.output_tokens"] = completion.tokens_out
    if completion.finish_reason:
        attributes["gen_ai.response.finish_reasons"] = (completion.finish_reason,)
    if completion.cost_usd is not None:
        attributes["ingot.model.cost_usd"] = completion.cost_usd
    if completion.from_cassette:
        attributes["ingot.model.cassette"] = True
    span.set_attributes(attributes)
