"""The Langfuse trace backend: each agent run as a Langfuse trace, read back as trace records.

Used when LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY are set (the local store stays the default
and needs nothing running). `start_run` opens one `ingot-agent-run` observation of type agent
when the run starts and ends it when the run ends, with the run's session; routing is a tool
observation under it, and the deepagents run is observed by Langfuse's own LangChain handler:
every model call a generation with model, usage and Ingot's cost, every tool call a tool
observation. The trace is tagged for mining: `<skill>` and `revision=<skill>@<revision>` for
served runs, plus `related` for related matches, or `novel`. The full record (redacted first,
like the local store) travels as the root's metadata and is read back through Langfuse's
observations API (langfuse 5 keeps only delete on the trace API); a run that failed before its
record carries none and is not read back. `append` records a finished record alone (the proxy).
Only a store made by `connect` hands out the LangChain handler: its client redacts every
observation before export and has a tracer provider of its own, so no other OpenTelemetry span of
the process reaches Langfuse. A client built elsewhere gets the root, routing and record only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from langfuse import Langfuse, propagate_attributes
from langfuse.langchain import CallbackHandler
from pydantic import BaseModel

from optimize.models.redaction import redact_value
from optimize.models.traces import (
    AppendOnFinish,
    ReadResult,
    RunTrace,
    TraceRecord,
    parse_record,
    stored_form,
)

OBSERVATION_NAME = "ingot-agent-run"
PAGE_SIZE = 100


def trace_tags(record: TraceRecord) -> list[str]:
    if record.route == "novel" or not record.skill:
        return ["novel"]
    tags = [record.skill, f"revision={record.skill}@{record.revision}"]
    return ["related", *tags] if record.route == "related" else tags


class LangfuseTraceStore:
    """A `TraceStore` over a `langfuse.Langfuse` client (network calls happen in the SDK)."""

    def __init__(
        self, client: Any, enabled: bool = True, redaction: bool = True, *, public_key: str | None = None
    ) -> None:
        self._client, self.enabled, self.redaction = client, enabled, redaction
        self._public_key = public_key  # set by `connect`: the client redacts, LangChain is observed

    @classmethod
    def connect(
        cls,
        public_key: str,
        secret_key: str,
        base_url: str | None = None,
        enabled: bool = True,
        redaction: bool = True,
    ) -> LangfuseTraceStore:
        """A store whose client redacts every observation (with TRACE_REDACT) and exports through
        a tracer provider of its own, never the process's global one."""
        from opentelemetry.sdk.trace import TracerProvider

        client = Langfuse(
            public_key=public_key,
            secret_key=secret_key,
            base_url=base_url,
            tracer_provider=TracerProvider(),
            mask=_redact if redaction else None,
        )
        return cls(client, enabled, redaction, public_key=public_key)

    def append(self, record: TraceRecord) -> None:
        if not self.enabled:
            return
        data = stored_form(record, self.redaction)
        with (
            propagate_attributes(
                session_id=record.session, tags=trace_tags(record), metadata={"route": record.route}
            ),
            self._client.start_as_current_observation(
                as_type="span",
                name=OBSERVATION_NAME,
                input=data["task"],
                output=data["answer"],
                metadata={"ingot_record": data},
            ),
        ):
            pass  # a record that arrives finished (the proxy's): the span is the record
        self._client.flush()  # runs are few and short; flushing keeps read-after-write true

    @contextmanager
    def start_run(self, task: str, session: str | None) -> Iterator[RunTrace]:
        """The run's trace, open from now until the block ends (flushed then)."""
        if not self.enabled:
            yield AppendOnFinish(None)
            return
        try:
            with (
                propagate_attributes(session_id=session, trace_name=OBSERVATION_NAME),
                self._client.start_as_current_observation(
                    as_type="agent", name=OBSERVATION_NAME, input=self._clean(task)
                ) as root,
            ):
                yield _Run(self, root)
        finally:
            self._client.flush()

    def _clean(self, value: Any) -> Any:
        return redact_value(value) if self.redaction else value

    def _callbacks(self) -> tuple[Any, ...]:
        if self._public_key is None:
            return ()
        return (_PricedHandler(self._client, self._public_key),)

    def close(self) -> None:
        """Flush and stop the SDK's exporter (call when done; the process may exit right after)."""
        self._client.shutdown()

    def read(self) -> ReadResult:
        records, skipped, cursor = [], 0, None
        while True:
            page = self._client.api.observations.get_many(
                name=OBSERVATION_NAME,
                fields="core,basic,io,metadata",
                expand_metadata="ingot_record",
                limit=PAGE_SIZE,
                cursor=cursor,
            )
            for observation in page.data:
                raw = (observation.metadata or {}).get("ingot_record")
                if raw is None:
                    continue  # a run that failed before its record: in Langfuse, not a record
                if isinstance(raw, dict):
                    raw = json.dumps(raw)
                record = parse_record(raw.encode("utf-8")) if isinstance(raw, str) else None
                if record is None:
                    skipped += 1
                else:
                    records.append(record)
            cursor = page.meta.cursor if page.meta else None
            if not cursor or not page.data:
                break
        return ReadResult(tuple(sorted(records, key=lambda r: r.time)), skipped)


class _Run:
    """One run's root observation, open while the run happens."""

    def __init__(self, store: LangfuseTraceStore, root: Any) -> None:
        self._store, self._root = store, root
        self.callbacks = store._callbacks()

    @contextmanager
    def tool(self, name: str, input: Any) -> Iterator[Callable[[Any], None]]:
        with self._store._client.start_as_current_observation(
            as_type="tool", name=name, input=self._store._clean(input)
        ) as span:
            yield lambda output: span.update(output=self._store._clean(output))

    def finish(self, record: TraceRecord) -> None:
        data = stored_form(record, self._store.redaction)
        # Called with the root current: the tags land on it, the trace's own observation.
        with propagate_attributes(tags=trace_tags(record), metadata={"route": record.route}):
            self._root.update(output=data["answer"], metadata={"ingot_record": data})


class _PricedHandler(CallbackHandler):
    """Langfuse's LangChain handler, plus each model call's cost from Ingot's ledger (the handler
    records model and usage; the price table is Ingot's, so only Ingot knows the cost)."""

    def __init__(self, client: Langfuse, public_key: str) -> None:
        super().__init__(public_key=public_key)
        self._pricing_client = client

    def on_llm_end(self, response: Any, *, run_id: Any, parent_run_id: Any = None, **kwargs: Any) -> Any:
        generation = response.generations[-1][-1] if response.generations else None
        message = getattr(generation, "message", None)
        cost = (getattr(message, "response_metadata", None) or {}).get("cost_usd")
        if isinstance(cost, int | float):
            # The handler keeps the call's generation current until this event ends it.
            self._pricing_client.update_current_generation(cost_details={"total": float(cost)})
        return super().on_llm_end(response, run_id=run_id, parent_run_id=parent_run_id, **kwargs)


def _redact(*, data: Any, **_: Any) -> Any:
    """Langfuse's mask: any observation's input, output or metadata as redacted JSON values."""
    return redact_value(json.loads(json.dumps(data, default=_jsonable)))


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):  # LangChain messages and the like
        return value.model_dump(mode="json")
    return str(value)
