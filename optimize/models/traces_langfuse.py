"""The Langfuse trace backend: the same records as the local store, as Langfuse observations.

Used when LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY are set (the local store stays the default
and needs nothing running). Each agent run becomes one `ingot-agent-run` span whose trace is
tagged for mining: `<skill>` and `revision=<skill>@<revision>` for served runs, plus `related`
for related matches, or `novel`. The full record (redacted first, like the local store) travels
as span metadata and is read back through Langfuse's observations API (langfuse 5 keeps only
delete on the trace API; reads go through observations).
"""

from __future__ import annotations

import json
from typing import Any

from optimize.models.traces import ReadResult, TraceRecord, parse_record, stored_form

OBSERVATION_NAME = "ingot-agent-run"
PAGE_SIZE = 100


def trace_tags(record: TraceRecord) -> list[str]:
    if record.route == "novel" or not record.skill:
        return ["novel"]
    tags = [record.skill, f"revision={record.skill}@{record.revision}"]
    return ["related", *tags] if record.route == "related" else tags


class LangfuseTraceStore:
    """A `TraceStore` over a `langfuse.Langfuse` client (network calls happen in the SDK)."""

    def __init__(self, client: Any, enabled: bool = True, redaction: bool = True) -> None:
        self._client, self.enabled, self.redaction = client, enabled, redaction

    def append(self, record: TraceRecord) -> None:
        if not self.enabled:
            return
        from langfuse import propagate_attributes

        data = stored_form(record, self.redaction)
        with (
            propagate_attributes(tags=trace_tags(record), metadata={"route": record.route}),
            self._client.start_as_current_observation(
                as_type="span",
                name=OBSERVATION_NAME,
                input=data["task"],
                output=data["answer"],
                metadata={"ingot_record": json.dumps(data, ensure_ascii=False)},
            ),
        ):
            pass  # the span itself is the record: it opens and closes around nothing
        self._client.flush()  # runs are few and short; flushing keeps read-after-write true

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
