"""The keyed, tamper-evident audit chain: `audit.jsonl` plus its head anchor `audit.head`.

Each line is one canonical-JSON record (RFC 8785) of metadata only: action, skill, revisions,
evidence digest, actor, time, reason; never skill text or secrets. Each record carries the hash
of the previous one and its own hash, so an edited, deleted, reordered or inserted line breaks
the chain at that line; and a MAC (HMAC-SHA256 of its hash under `audit.key`, a 0600 random key
in the state home), so a line appended or rewritten by anyone without the key is refused, even
when both files are rewritten consistently. `audit.head` anchors the last sequence number and
hash (with its own MAC), so a truncated tail is detected too.

Appends pre-announce themselves: the head first records the hash of the line about to be
written (`next`), then the line is appended and fsynced, then the head moves. So a head one line
behind is accepted only for exactly the line it announced (a crash between append and head
move), never for a line someone added. Appends are serialised by the change-control lock.
A holder of the key can still rewrite history undetectably; ARCHITECTURE.md says what anchors
against that.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rfc8785
from filelock import FileLock

from ingot.errors import IngotError
from ingot.fsutil import write_atomic

SCHEMA = 2
LEGACY_SCHEMA = 1  # unkeyed lines of Ingot before keyed chains; accepted only before an `adopt` line
GENESIS = "0" * 64
KEY_BYTES = 32
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
        "legacy_head",
        "golden",  # a golden's digest: bless, criteria approval, retire (optimize/control/goldens_admin.py)
    }
)
META = frozenset({"schema", "seq", "time", "prev", "hash", "mac"})


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
    seq: int = 0  # the last line's sequence number
    behind: bool = False  # the head is one (announced) line behind: a crash between append and head move


def _digest(record: Mapping[str, Any]) -> str:
    return hashlib.sha256(
        rfc8785.dumps({k: v for k, v in record.items() if k not in ("hash", "mac")})
    ).hexdigest()


def _mac(key: bytes, message: bytes) -> str:
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _head_message(seq: int, digest: str, announced: str | None) -> bytes:
    return rfc8785.dumps({"seq": seq, "hash": digest, "next": announced})


@dataclass(frozen=True)
class _Prefix:
    """The chain's bytes up to a point whose every line passed the line checks under one key, and
    the state after them: `verify` re-checks only what follows, so approving stays fast on a long
    chain. Matching is by the prefix's sha256, so an edit anywhere in it is checked again in full
    (and a different key invalidates it)."""

    size: int
    digest: bytes
    key_digest: bytes
    lines: int
    prev: str
    seq: int
    penultimate: str
    keyed: bool

    @classmethod
    def of(cls, data: bytes, key: bytes, *state: Any) -> _Prefix:
        return cls(len(data), hashlib.sha256(data).digest(), hashlib.sha256(key).digest(), *state)

    def matches(self, data: bytes, key: bytes) -> bool:
        return (
            len(data) >= self.size
            and hmac.compare_digest(hashlib.sha256(data[: self.size]).digest(), self.digest)
            and hmac.compare_digest(hashlib.sha256(key).digest(), self.key_digest)
        )


class AuditLog:
    """Append to and verify the chain kept in `runs_dir` (the state home)."""

    def __init__(self, runs_dir: Path, on_step: Callable[[str], None] | None = None) -> None:
        self.path = runs_dir / "audit.jsonl"
        self.head_path = runs_dir / "audit.head"
        self.key_path = runs_dir / "audit.key"
        self._step = on_step or (lambda _name: None)  # fault-injection tests kill the process here
        self._verified: _Prefix | None = None  # the line checks of a prefix already verified

    # -- the key -----------------------------------------------------------------------------

    def _key(self) -> bytes | None:
        try:
            key = self.key_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise AuditError(
                f"cannot read {self.key_path}: {exc.strerror or exc}; fix its permissions"
            ) from exc
        if len(key) != KEY_BYTES:
            raise AuditError(f"{self.key_path} is damaged ({len(key)} bytes); restore it from your backup")
        return key

    def _create_key(self) -> bytes:
        """A fresh key and a MAC'd empty head, for a chain with no lines yet."""
        self.key_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            key = self._key()
            assert key is not None
            return key
        key = secrets.token_bytes(KEY_BYTES)
        try:
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._write_head(key, 0, GENESIS, None)
        return key

    # -- appending ---------------------------------------------------------------------------

    def append(self, now: dt.datetime | None = None, **fields: Any) -> AuditEntry:
        """Write one record and fsync it; raise `AuditError` if that is impossible.

        The caller must hold the change-control lock: the chain has one writer at a time."""
        unknown = set(fields) - ALLOWED_FIELDS
        if unknown:
            raise AuditError(f"audit records carry metadata only; unexpected fields {sorted(unknown)}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(self.path) + ".lock"):  # one appender at a time, even outside the change lock
                state = self.verify()
                if not state.ok:
                    raise AuditError(
                        f"the audit chain is broken at line {state.bad_line}: {state.problem}. Nothing "
                        "will be changed until it is investigated (`ingot audit verify`)"
                    )
                key = self._key() if state.lines else (self._key() or self._create_key())
                if key is None:
                    raise AuditError(f"{self.key_path} is missing; restore it from your backup")
                return self._append(key, state.seq, state.head_hash, now, fields)
        except OSError as exc:
            raise AuditError(
                f"cannot write the audit log {self.path}: {exc.strerror or exc}; nothing was changed. "
                "Free disk space or fix permissions, then retry"
            ) from exc

    def _append(
        self, key: bytes, last_seq: int, last_hash: str, now: dt.datetime | None, fields: Mapping[str, Any]
    ) -> AuditEntry:
        seq = last_seq + 1
        stamp = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="microseconds")
        record: dict[str, Any] = {
            "schema": SCHEMA,
            "seq": seq,
            "time": stamp,
            "prev": last_hash,
            **{k: v for k, v in fields.items() if v is not None},
        }
        record["hash"] = _digest(record)
        record["mac"] = _mac(key, record["hash"].encode())
        line = rfc8785.dumps(record) + b"\n"
        self._step("audit: announce")
        self._write_head(key, last_seq, last_hash, record["hash"])
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            self._step("audit: write line")
            if os.write(fd, line) != len(line):
                raise OSError("short write")
            self._step("audit: fsync line")
            os.fsync(fd)
        finally:
            os.close(fd)
        self._step("audit: write head")
        self._write_head(key, seq, record["hash"], None)
        return AuditEntry(
            seq, stamp, {k: v for k, v in record.items() if k not in META}, last_hash, record["hash"]
        )

    def _write_head(self, key: bytes, seq: int, digest: str, announced: str | None) -> None:
        head = {
            "seq": seq,
            "hash": digest,
            "next": announced,
            "mac": _mac(key, _head_message(seq, digest, announced)),
        }
        write_atomic(self.head_path, json.dumps(head).encode())

    def adopt(self, actor: str, now: dt.datetime | None = None) -> AuditEntry:
        """Key a chain written by an Ingot without keys: check it under the old rules, create the
        key, and append an `adopt` line whose MAC vouches for everything before it."""
        with FileLock(str(self.path) + ".lock"):
            if self._key() is not None:
                raise AuditError("this audit chain is already keyed; nothing to adopt")
            legacy = self.verify_legacy()
            if not legacy.ok:
                raise AuditError(
                    f"the unkeyed chain does not verify (line {legacy.bad_line}: {legacy.problem}); "
                    "investigate it before adopting it"
                )
            key = self._create_key() if legacy.lines == 0 else self._new_key_keep_head()
            return self._append(
                key,
                legacy.seq,
                legacy.head_hash,
                now,
                {"action": "adopt", "actor": actor, "legacy_head": legacy.head_hash},
            )

    def _new_key_keep_head(self) -> bytes:
        fd = os.open(self.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        key = secrets.token_bytes(KEY_BYTES)
        try:
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        return key

    # -- reading -----------------------------------------------------------------------------

    def _read(self) -> bytes:
        try:
            return self.path.read_bytes() if self.path.exists() else b""
        except OSError as exc:
            raise AuditError(
                f"cannot read the audit log {self.path}: {exc.strerror or exc}; "
                "nothing was changed. Fix the file's permissions or location"
            ) from exc

    def _head(self) -> dict[str, Any] | None:
        try:
            head = json.loads(self.head_path.read_text())
            return {
                "seq": int(head["seq"]),
                "hash": str(head["hash"]),
                "next": head.get("next"),
                "mac": head.get("mac"),
            }
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            return {"unreadable": True}

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
            fields = {k: v for k, v in record.items() if k not in META}
            out.append(AuditEntry(record["seq"], record["time"], fields, record["prev"], record["hash"]))
        return out

    # -- verifying ---------------------------------------------------------------------------

    def verify(self) -> Verification:
        """Check every line's hash, MAC and link, sequence numbers, and the head anchor."""
        data = self._read()
        if data and not data.endswith(b"\n"):
            count = data.count(b"\n") + 1
            return Verification(False, count, "", "the last line is incomplete (torn write)", count)
        key = self._key()
        lines = data.splitlines()
        if key is None:
            if not lines and not self.head_path.exists():
                return Verification(True, 0, GENESIS)
            legacy = self.verify_legacy()
            problem = (
                "the chain is unkeyed (written by an older Ingot): run `ingot migrate` to adopt it"
                if legacy.ok
                else f"{self.key_path.name} is missing, so no line can be trusted: restore it from backup"
            )
            return Verification(False, len(lines), legacy.head_hash, problem, 1)
        prev, seq, penultimate, keyed, start = GENESIS, 0, GENESIS, False, 0
        known = self._verified
        if known is not None and known.matches(data, key):  # the same bytes pass the same checks
            prev, seq, penultimate, keyed, start = (
                known.prev,
                known.seq,
                known.penultimate,
                known.keyed,
                known.lines,
            )
        for number, raw in enumerate(lines[start:], start=start + 1):
            problem, record = self._check_line(raw, prev, seq + 1, key, keyed)
            if problem:
                return Verification(False, len(lines), prev, problem, number, seq=seq)
            keyed = keyed or record["schema"] == SCHEMA
            penultimate, prev, seq = prev, record["hash"], record["seq"]
        self._verified = _Prefix.of(data, key, len(lines), prev, seq, penultimate, keyed)
        if lines and not keyed:
            return Verification(
                False, len(lines), prev, "no line of the chain is keyed (forged or not adopted)", 1
            )
        return self._check_head(key, len(lines), seq, prev, penultimate)

    @staticmethod
    def _check_line(
        raw: bytes, prev: str, expected_seq: int, key: bytes, keyed: bool
    ) -> tuple[str | None, dict[str, Any]]:
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return "not valid JSON", {}
        if not isinstance(record, dict) or "hash" not in record:
            return "not an audit record", {}
        if _digest(record) != record["hash"]:
            return "its content does not match its hash (edited)", record
        schema = record.get("schema")
        if schema == SCHEMA:
            if not isinstance(record.get("mac"), str) or not hmac.compare_digest(
                record["mac"], _mac(key, record["hash"].encode())
            ):
                return "its MAC does not match (written without the audit key: forged)", record
            if not keyed and expected_seq > 1 and record.get("action") != "adopt":
                return "the first keyed line after unkeyed ones must be an `adopt` line", record
        elif schema == LEGACY_SCHEMA:
            if keyed:
                return "an unkeyed line after keyed ones (written without the audit key: forged)", record
        else:
            return f"unknown schema {schema!r}", record
        if record.get("seq") != expected_seq:
            return (
                f"sequence {record.get('seq')} where {expected_seq} was expected (deleted or reordered)",
                record,
            )
        if record.get("prev") != prev:
            return "it does not link to the previous line (deleted, inserted or reordered)", record
        return None, record

    def _check_head(self, key: bytes, lines: int, seq: int, last_hash: str, penultimate: str) -> Verification:
        head = self._head()
        if head is None:
            return Verification(False, lines, last_hash, "audit.head is missing", max(lines, 1), seq=seq)
        if "unreadable" in head:
            return Verification(False, lines, last_hash, "audit.head is unreadable", max(lines, 1), seq=seq)
        expected = _mac(key, _head_message(head["seq"], head["hash"], head["next"]))
        if not isinstance(head["mac"], str) or not hmac.compare_digest(head["mac"], expected):
            return Verification(
                False, lines, last_hash, "audit.head's MAC does not match (forged)", max(lines, 1), seq=seq
            )
        if head["seq"] == seq and head["hash"] == last_hash:
            return Verification(True, lines, last_hash, seq=seq)
        if head["seq"] > seq:
            return Verification(
                False,
                lines,
                last_hash,
                f"truncated: audit.head records {head['seq']} lines, the file has {seq}",
                lines + 1,
                seq=seq,
            )
        if head["seq"] == seq - 1 and head["hash"] == penultimate and head["next"] == last_hash:
            # A crash between appending the announced line and moving the head: the line stands.
            return Verification(
                True,
                lines,
                last_hash,
                note="head was one announced line behind (crash after append)",
                seq=seq,
                behind=True,
            )
        return Verification(
            False,
            lines,
            last_hash,
            "audit.head does not match the last line (appended or edited)",
            lines,
            seq=seq,
        )

    def verify_legacy(self) -> Verification:
        """The rules of unkeyed chains (hash links and a plain head), for adoption."""
        lines = self._read().splitlines()
        prev, seq, penultimate = GENESIS, 0, GENESIS
        for number, raw in enumerate(lines, start=1):
            try:
                record = json.loads(raw)
                ok = (
                    isinstance(record, dict)
                    and record.get("schema") == LEGACY_SCHEMA
                    and _digest(record) == record.get("hash")
                )
            except (json.JSONDecodeError, UnicodeDecodeError):
                ok = False
            if not ok or record.get("seq") != seq + 1 or record.get("prev") != prev:
                return Verification(
                    False, len(lines), prev, "not a valid unkeyed chain line", number, seq=seq
                )
            penultimate, prev, seq = prev, record["hash"], record["seq"]
        head = self._head()
        if not lines:
            return Verification(True, 0, GENESIS)
        if head is None or "unreadable" in head:
            return Verification(
                False, len(lines), prev, "audit.head is missing or unreadable", len(lines), seq=seq
            )
        if (head["seq"], head["hash"]) in ((seq, prev), (seq - 1, penultimate)):
            return Verification(True, len(lines), prev, seq=seq)
        return Verification(
            False, len(lines), prev, "audit.head does not match the last line", len(lines), seq=seq
        )

    # -- repair (under the change lock) ------------------------------------------------------

    def repair_torn_tail(self) -> bool:
        """Drop an incomplete last line that the head never acknowledged (a crash mid-append).

        Only a tail past what the head anchors is dropped; anything it vouches for is kept and
        a mismatch is left for `verify` to report."""
        data = self._read()
        if not data or data.endswith(b"\n"):
            return False
        complete = data[: data.rfind(b"\n") + 1]
        lines = complete.splitlines()
        head = self._head()
        try:
            last_seq = json.loads(lines[-1])["seq"] if lines else 0
        except (ValueError, KeyError):
            return False
        if head is None or "unreadable" in head or head["seq"] != last_seq:
            return False
        with open(self.path, "r+b") as handle:
            handle.truncate(len(complete))
            handle.flush()
            os.fsync(handle.fileno())
        return True

    def settle_head(self) -> bool:
        """Move a head left one announced line behind by a crash up to that line."""
        state = self.verify()
        key = self._key()
        if not (state.ok and state.behind and key is not None):
            return False
        self._write_head(key, state.seq, state.head_hash, None)
        return True
