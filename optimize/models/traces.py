"""The local trace store: one record per agent run in `runs/traces.jsonl` (schema_version 1).

A record holds the task, the answer, the served skill and revision (or novel/related), model,
tokens, timings, tool calls and errors, and the run's transcript: the final model request's
messages in OpenAI wire shape (system prompt, task, every tool call with its arguments and its
result, in order), the tool schemas offered, and each model call's model and tokens. That is
what `ingot bless` turns into a golden (optimize/measure/goldens.py); older records without it
still read. Defaults protect the user: secrets are redacted before
anything touches disk (API keys, bearer tokens, password/secret assignments, private keys), the
file is 0600 in a 0700 folder, it rotates at TRACE_MAX_BYTES keeping TRACE_BACKUPS files,
records older than TRACE_RETENTION_DAYS are never read and are deleted from disk by `prune`
(run by `ingot mine` and `ingot loop`, which read everything anyway) and with expired backups
at rotation, and TRACES=false writes nothing at all.
The reader skips corrupt or non-UTF-8 lines and says how many. Writers in several processes
(agent, proxy) share a file lock for rotation and appends. An agent run is recorded through
`start_run`: here it only appends the finished record; the Langfuse store (traces_langfuse.py)
also observes the run while it happens.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from filelock import FileLock

from optimize.models.redaction import redact_value

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class TraceRecord:
    """One agent run."""

    task: str
    answer: str | None
    route: str  # "match" | "related" | "novel"
    skill: str | None
    revision: str | None
    model: str | None
    tokens_in: int = 0
    tokens_out: int = 0
    duration_ms: float = 0.0
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    errors: tuple[str, ...] = ()
    harness: str | None = None
    messages: tuple[Mapping[str, Any], ...] = ()  # the final request's messages, wire shape
    tools: tuple[Mapping[str, Any], ...] = ()  # tool schemas offered (OpenAI function format)
    model_calls: tuple[Mapping[str, Any], ...] = ()  # {"model", "tokens_in", "tokens_out"} per call
    session: str | None = None  # the caller's conversation (Langfuse groups a session's traces)
    id: str = field(default_factory=lambda: f"tr-{secrets.token_hex(8)}")
    time: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))

    def as_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}


@dataclass(frozen=True)
class ReadResult:
    records: tuple[TraceRecord, ...]
    skipped: int  # corrupt, non-UTF-8 or unknown-schema lines


class RunTrace(Protocol):
    """One agent run while it happens (from `TraceStore.start_run`)."""

    @property
    def callbacks(self) -> tuple[Any, ...]:
        """LangChain callback handlers that observe the run's agent (none for the local file)."""
        ...

    def tool(self, name: str, input: Any) -> AbstractContextManager[Callable[[Any], None]]:
        """A tool call the harness makes itself (routing); the callable takes its output."""
        ...

    def finish(self, record: TraceRecord) -> None:
        """The run's record, given inside the run and outside any tool call."""
        ...


class TraceStore(Protocol):
    """Where agent runs are recorded and read back for mining (local file or Langfuse)."""

    def append(self, record: TraceRecord) -> None: ...

    def start_run(self, task: str, session: str | None) -> AbstractContextManager[RunTrace]: ...

    def read(self) -> ReadResult: ...

    def close(self) -> None: ...


class AppendOnFinish:
    """A run whose store keeps only the finished record (the local file; `None`: no store)."""

    callbacks: tuple[Any, ...] = ()

    def __init__(self, store: TraceStore | None) -> None:
        self.store = store

    @contextmanager
    def tool(self, name: str, input: Any) -> Iterator[Callable[[Any], None]]:
        yield lambda output: None

    def finish(self, record: TraceRecord) -> None:
        if self.store is not None:
            self.store.append(record)


def stored_form(record: TraceRecord, redaction: bool) -> dict[str, Any]:
    """The JSON a backend stores for `record`: redacted first unless redaction is off."""
    data = record.as_json()
    return redact_value(data) if redaction else data


def parse_record(line: bytes) -> TraceRecord | None:
    """A stored record back, or None if the line is corrupt, not UTF-8 or another schema."""
    try:
        data = json.loads(line.decode("utf-8"))
        if data.pop("schema_version") != SCHEMA_VERSION:
            return None
        for name in ("tool_calls", "errors", "messages", "tools", "model_calls"):
            data[name] = tuple(data.get(name) or ())
        return TraceRecord(**data)
    except (UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError):
        return None


def find_trace(store: TraceStore, trace_id: str) -> TraceRecord | None:
    """The record with `trace_id` (also within retention only), or None."""
    return next((r for r in store.read().records if r.id == trace_id), None)


class LocalTraceStore:
    """`runs/traces.jsonl` plus `.1` … `.N` rotated backups."""

    def __init__(
        self,
        path: Path,
        enabled: bool = True,
        redaction: bool = True,
        max_bytes: int = 10 << 20,
        backups: int = 5,
        retention_days: int = 30,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.path, self.enabled, self.redaction = path, enabled, redaction
        self.max_bytes, self.backups, self.retention_days, self.clock = (
            max_bytes,
            backups,
            retention_days,
            clock,
        )
        self._lock = FileLock(str(path) + ".lock")

    def _prepare(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.path.parent, 0o700)

    def append(self, record: TraceRecord) -> None:
        if not self.enabled:
            return
        line = (json.dumps(stored_form(record, self.redaction), ensure_ascii=False) + "\n").encode("utf-8")
        self._prepare()
        with self._lock:
            if self.path.exists() and self.path.stat().st_size + len(line) > self.max_bytes:
                self._rotate()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.fchmod(fd, 0o600)
                os.write(fd, line)
            finally:
                os.close(fd)

    def _rotate(self) -> None:
        """traces.jsonl -> .1 -> .2 …, keeping `backups` files; expired backups are deleted."""
        oldest = self.path.with_name(f"{self.path.name}.{self.backups}")
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
            return
        oldest.unlink(missing_ok=True)
        for n in range(self.backups - 1, 0, -1):
            source = self.path.with_name(f"{self.path.name}.{n}")
            if source.exists():
                os.replace(source, self.path.with_name(f"{self.path.name}.{n + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        cutoff = (self.clock() - dt.timedelta(days=self.retention_days)).timestamp()
        for backup in self.files()[:-1]:
            if backup.stat().st_mtime < cutoff:
                backup.unlink(missing_ok=True)

    def files(self) -> list[Path]:
        """Oldest first; the live file last."""
        rotated = [self.path.with_name(f"{self.path.name}.{n}") for n in range(self.backups, 0, -1)]
        return [p for p in (*rotated, self.path) if p.exists()]

    def read(self) -> ReadResult:
        cutoff = self.clock() - dt.timedelta(days=self.retention_days)
        records, skipped = [], 0
        for path in self.files():
            for line in path.read_bytes().splitlines():
                if not line.strip():
                    continue
                record = parse_record(line)
                if record is None:
                    skipped += 1
                elif dt.datetime.fromisoformat(record.time) >= cutoff:
                    records.append(record)
        return ReadResult(tuple(records), skipped)

    def start_run(self, task: str, session: str | None) -> AbstractContextManager[RunTrace]:
        return nullcontext(AppendOnFinish(self))

    def close(self) -> None:
        """Nothing to flush: every append is written through."""

    def prune(self) -> int:
        """Rewrite the files without expired or unreadable records; returns how many were dropped."""
        with self._lock:
            kept = self.read().records
            before = sum(1 for p in self.files() for line in p.read_bytes().splitlines() if line.strip())
            if before == len(kept):
                return 0  # nothing expired or unreadable: leave the files (and their mtimes) alone
            for path in self.files():
                path.unlink()
            if kept:
                self._write_all(kept)
            return before - len(kept)

    def _write_all(self, records: Iterable[TraceRecord]) -> None:
        self._prepare()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for record in records:
                os.write(fd, (json.dumps(record.as_json(), ensure_ascii=False) + "\n").encode("utf-8"))
        finally:
            os.close(fd)
