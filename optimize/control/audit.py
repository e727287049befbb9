"""The tamper-evident audit chain: `runs/audit.jsonl` plus its head anchor `runs/audit.head`.

Each line is one canonical-JSON record (RFC 8785) of metadata only: action, skill, revisions,
evidence digest, actor, time, reason. Never skill text or secrets. Each record carries the hash
of the previous one, and its own hash over its canonical form, so an edited, deleted, reordered
or inserted line breaks the chain at that line. A chain alone cannot reveal a truncated tail, so
the last record's sequence number and hash are also kept in `audit.head` (replaced atomically):
a file shorter than its head is truncation. Appends are fsynced before they return; a caller
that cannot append must not act. Appends are serialised by the change-control lock (lock.py).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rfc8785
from filelock import FileLock

from ingot.errors import IngotError
from ingot.fsutil import write_atomic

SCHEMA = 1
GENESIS = "0" * 64
ALLOWED_FIELDS = frozenset(
    {
        "action",
        "skill",
        "from_revision",
        "to_revision",
        "evidence_digest",
        "actor",
        "reason",
        "outcome",
        "intent_seq",
        "change_id",
        "archive",
        "root",
    }
)


class AuditError(IngotError):
    """The audit chain cannot be written or fails verification."""


@dataclass(frozen=True)
class AuditEntry:
    """One verified line of the chain."""

    seq: int
    time: str
    fields: Mapping[str, Any]
    prev: str
    hash: str

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


@dataclass(frozen=True)
class Verification:
    """Result of checking the whole chain."""

    ok: bool
    lines: int
    head_hash: str
    problem: str | None = None
    bad_line: int | None = None  # 1-based line number of the first bad line
    note: str | None = None


def _digest(record: Mapping[str, Any]) -> str:
    return hashlib.sha256(rfc8785.dumps(dict(record))).hexdigest()


class AuditLog:
    """Append to and verify the chain under `runs_dir`."""

    def __init__(self, runs_dir: Path, on_step: Callable[[str], None] | None = None) -> None:
        self.path = runs_dir / "audit.jsonl"
        self.head_path = runs_dir / "audit.head"
        self._step = on_step or (lambda _name: None)  # fault-injection tests kill the process here

    def append(self, now: dt.datetime | None = None, **fields: Any) -> AuditEntry:
        """Write one record and fsync it; raise `AuditError` if that is impossible.

        The caller must hold the change-control lock: the chain has one writer at a time."""
        unknown = set(fields) - ALLOWED_FIELDS
        if unknown:
            raise AuditError(f"audit records carry metadata only; unexpected fields {sorted(unknown)}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.path) + ".lock"):  # one appender at a time, even outside the change lock
            return self._append(now, fields)

    def _append(self, now: dt.datetime | None, fields: Mapping[str, Any]) -> AuditEntry:
        entries = self._read_valid_tail()
        seq = entries.seq + 1 if entries else 1
        prev = entries.hash if entries else GENESIS
        stamp = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="microseconds")
        record = {
            "schema": SCHEMA,
            "seq": seq,
            "time": stamp,
            "prev": prev,
            **{k: v for k, v in fields.items() if v is not None},
        }
        record["hash"] = _digest(record)
        line = rfc8785.dumps(record) + b"\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                self._step("audit: write line")
                if os.write(fd, line) != len(line):
                    raise OSError("short write")
                self._step("audit: fsync line")
                os.fsync(fd)
            finally:
                os.close(fd)
            self._write_head(seq, record["hash"])
        except OSError as exc:
            raise AuditError(
                f"cannot write the audit log {self.path}: {exc.strerror or exc}; nothing was changed. "
                "Free disk space or fix permissions, then retry"
            ) from exc
        return AuditEntry(
            seq,
            stamp,
            {k: v for k, v in record.items() if k not in {"schema", "seq", "time", "prev", "hash"}},
            prev,
            record["hash"],
        )

    def _read(self) -> bytes:
        try:
            return self.path.read_bytes() if self.path.exists() else b""
        except OSError as exc:
            raise AuditError(
                f"cannot read the audit log {self.path}: {exc.strerror or exc}; "
                "nothing was changed. Fix the file's permissions or location"
            ) from exc

    def repair_torn_tail(self) -> bool:
        """Drop an incomplete last line that the head never acknowledged (a crash mid-append).

        Only a tail past the head anchor is dropped; anything the head vouches for is kept and
        a mismatch is left for `verify` to report."""
        data = self._read()
        if not data or data.endswith(b"\n"):
            return False
        complete = data[: data.rfind(b"\n") + 1]
        lines = complete.splitlines()
        try:
            head = json.loads(self.head_path.read_text()) if self.head_path.exists() else {"seq": 0}
            last_seq = json.loads(lines[-1])["seq"] if lines else 0
        except (ValueError, KeyError):
            return False
        if int(head.get("seq", -1)) not in (last_seq, last_seq - 1):  # crash before or after the head moved
            return False
        with open(self.path, "r+b") as handle:
            handle.truncate(len(complete))
            handle.flush()
            os.fsync(handle.fileno())
        return True

    def _write_head(self, seq: int, digest: str) -> None:
        self._step("audit: write head")
        write_atomic(self.head_path, json.dumps({"seq": seq, "hash": digest}).encode())

    def _read_valid_tail(self) -> AuditEntry | None:
        """The last record, refusing to extend a chain that does not verify."""
        result = self.verify()
        if not result.ok:
            raise AuditError(
                f"the audit chain is broken at line {result.bad_line}: {result.problem}. Nothing "
                "will be changed until it is investigated (`ingot audit verify`)"
            )
        entries = self.entries()
        return entries[-1] if entries else None

    def entries(self) -> list[AuditEntry]:
        """Every record, parsed (no verification; call `verify` for that)."""
        out = []
        for number, raw in enumerate(self._read().splitlines(), start=1):
            try:
                record = json.loads(raw)
                record["seq"], record["time"], record["prev"], record["hash"]  # noqa: B018 - shape check
            except (ValueError, TypeError, KeyError) as exc:
                raise AuditError(
                    f"audit line {number} is not a readable record; run `ingot audit verify`"
                ) from exc
            fields = {k: v for k, v in record.items() if k not in {"schema", "seq", "time", "prev", "hash"}}
            out.append(AuditEntry(record["seq"], record["time"], fields, record["prev"], record["hash"]))
        return out

    def verify(self) -> Verification:
        """Check every line's hash and link, sequence numbers, and the head anchor."""
        data = self._read()
        if data and not data.endswith(b"\n"):
            return Verification(
                False,
                data.count(b"\n") + 1,
                "",
                "the last line is incomplete (torn write)",
                data.count(b"\n") + 1,
            )
        prev, seq, penultimate = GENESIS, 0, GENESIS
        lines = data.splitlines()
        for number, raw in enumerate(lines, start=1):
            problem = self._check_line(raw, prev, seq + 1)
            if problem:
                return Verification(False, len(lines), prev, problem, number)
            record = json.loads(raw)
            penultimate, prev, seq = prev, record["hash"], record["seq"]
        return self._check_head(len(lines), seq, prev, penultimate)

    @staticmethod
    def _check_line(raw: bytes, prev: str, expected_seq: int) -> str | None:
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return "not valid JSON"
        if not isinstance(record, dict) or "hash" not in record:
            return "not an audit record"
        claimed = record.pop("hash")
        if _digest(record) != claimed:
            return "its content does not match its hash (edited)"
        if record.get("seq") != expected_seq:
            return f"sequence {record.get('seq')} where {expected_seq} was expected (deleted or reordered)"
        if record.get("prev") != prev:
            return "it does not link to the previous line (deleted, inserted or reordered)"
        return None

    def _check_head(self, lines: int, seq: int, last_hash: str, penultimate: str) -> Verification:
        if not self.head_path.exists():
            if lines == 0:
                return Verification(True, 0, GENESIS)
            return Verification(False, lines, last_hash, "audit.head is missing", lines)
        try:
            head = json.loads(self.head_path.read_text())
            head_seq, head_hash = int(head["seq"]), str(head["hash"])
        except (ValueError, KeyError, TypeError):
            return Verification(False, lines, last_hash, "audit.head is unreadable", lines)
        if head_seq == seq and head_hash == last_hash:
            return Verification(True, lines, last_hash)
        if head_seq > seq:
            return Verification(
                False,
                lines,
                last_hash,
                f"truncated: audit.head records {head_seq} lines, the file has {seq}",
                lines + 1 if lines else 1,
            )
        if head_seq == seq - 1 and head_hash == penultimate:
            # A crash between appending a line and moving the head: the line is complete and
            # chained, so it stands; the next append moves the head.
            return Verification(True, lines, last_hash, note="head was one line behind (crash after append)")
        return Verification(False, lines, last_hash, "audit.head does not match the last line", lines)
