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
A holder of the key can still rewrite history undetectably; docs/design/change-control.md says
what anchors against that (the claims; a pushed git history, audit_remote.py). This module
does the file work (key, append, head, repair); the hashing and the checks of lines and head are
audit_verify.py's, the anchors in the claims beside the roots audit_anchors.py's.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rfc8785
from filelock import FileLock

from ingot import faults
from ingot.errors import IngotError
from ingot.fsutil import fsync_dir, write_atomic
from optimize.control.audit_anchors import Anchors, key_fingerprint
from optimize.control.audit_verify import (
    GENESIS,
    SCHEMA,
    Prefix,
    Verification,
    check_head,
    check_legacy,
    check_line,
    head_message,
    mac,
    record_digest,
)

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
        # What an approval accepted (verify.Acceptance): the passport's state, the cells a person
        # accepted as missing and why, an override and the failed cells it accepts.
        "passport",
        "accepted_missing",
        "acceptance_reason",
        "override_reason",
        "overridden",
        "trust",  # an autonomy line's whole trust for one class (optimize/control/autonomy.py)
        "kind",  # an approved change's kind (optimize/control/kinds.py), carried into its git commit
        "manifest_digest",  # a baseline's: every served skill and revision (optimize/control/baseline.py)
        # Where the inbox read a candidate it proposed (its folder, or git:<root>:<skill>) and,
        # for a candidate branch, the git tree: what makes the inbox exactly-once (inbox_state.py).
        "origin",
        "origin_tree",
    }
)
META = frozenset({"schema", "seq", "time", "prev", "hash", "mac"})


log = logging.getLogger(__name__)


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
    mac: str = ""  # the line's HMAC; a signed git commit records it (optimize/control/promote/commits.py)

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


class AuditLog:
    """Append to and verify the chain kept in `runs_dir` (the state home)."""

    def __init__(self, runs_dir: Path, on_step: Callable[[str], None] | None = None) -> None:
        self.path = runs_dir / "audit.jsonl"
        self.head_path = runs_dir / "audit.head"
        self.key_path = runs_dir / "audit.key"
        self._step = on_step or faults.point  # fault-injection tests kill the process here
        self._verified: Prefix | None = None  # the line checks of a prefix already verified
        self.anchors = Anchors(runs_dir, self.key_path.name)  # the claims beside the roots

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
        """A fresh key and a MAC'd empty head, for a chain with no lines yet. The key is written
        aside, the head MAC'd with it, and only then is the key linked into place: a kill at any
        point leaves either no key (a fresh start) or a key with its head (`finish_key`)."""
        self.key_path.parent.mkdir(parents=True, exist_ok=True)
        existing = self._key()
        if existing is not None:
            return existing
        key = secrets.token_bytes(KEY_BYTES)
        fd = os.open(self._new_key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            self._step("audit: write new key")
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._write_head(key, 0, GENESIS, None)
        return self._link_new_key(key)

    @property
    def _new_key_path(self) -> Path:
        return self.key_path.with_name(".audit.key.new")

    def _link_new_key(self, key: bytes) -> bytes:
        self._step("audit: link new key")
        try:
            os.link(self._new_key_path, self.key_path)
        except FileExistsError:  # another creator won: theirs is the key
            winner = self._key()
            assert winner is not None
            key = winner
        self._new_key_path.unlink(missing_ok=True)
        fsync_dir(self.key_path.parent)
        return key

    def _finishable_key(self) -> bytes | None:
        """The new key of a creation a kill interrupted between the head and the link (no key,
        no lines, and a new key that MACs the empty head), or None. Read-only."""
        new = self._new_key_path
        if self.key_path.exists() or not new.exists():
            return None
        try:
            key, head = new.read_bytes(), self._head()
        except OSError:
            return None
        if self._read() or len(key) != KEY_BYTES or not head or "unreadable" in head:
            return None
        if (head["seq"], head["hash"], head["next"]) != (0, GENESIS, None):
            return None
        return key if head.get("mac") == mac(key, head_message(0, GENESIS, None)) else None

    def finish_key(self) -> bool:
        """Finish a key creation a kill interrupted (`_finishable_key`); anything else is left
        for `verify` to report."""
        key = self._finishable_key()
        if key is None:
            return False
        self._link_new_key(key)
        return True

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
                self.finish_key()
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
        if seq == 1:  # the chain's first line pins the key it is written with
            record["key_fingerprint"] = key_fingerprint(key)
        record["hash"] = record_digest(record)
        record["mac"] = mac(key, record["hash"].encode())
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
        self._step("audit: anchor in the claims")
        self.anchors.record(key, seq, record["hash"])
        return AuditEntry(
            seq,
            stamp,
            {k: v for k, v in record.items() if k not in META},
            last_hash,
            record["hash"],
            record["mac"],
        )

    def _write_head(self, key: bytes, seq: int, digest: str, announced: str | None) -> None:
        head = {
            "seq": seq,
            "hash": digest,
            "next": announced,
            "mac": mac(key, head_message(seq, digest, announced)),
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

    def entries(self, data: bytes | None = None) -> list[AuditEntry]:
        """Every record of the chain (or of `data`, bytes read from it), parsed, with no
        verification: call `verify` for that, or `verified_entries`."""
        out = []
        for number, raw in enumerate((self._read() if data is None else data).splitlines(), start=1):
            try:
                record = json.loads(raw)
                record["seq"], record["time"], record["prev"], record["hash"]  # noqa: B018 - shape check
            except (ValueError, TypeError, KeyError) as exc:
                raise AuditError(
                    f"audit line {number} is not a readable record; run `ingot audit verify`"
                ) from exc
            fields = {k: v for k, v in record.items() if k not in META}
            entry = AuditEntry(
                record["seq"],
                record["time"],
                fields,
                record["prev"],
                record["hash"],
                str(record.get("mac", "")),
            )
            out.append(entry)
        return out

    # -- verifying ---------------------------------------------------------------------------

    def verified_entries(self) -> tuple[Verification, list[AuditEntry]]:
        """The chain's verification and, when it verifies, its records, both from one read (so
        no line appended in between is taken unchecked); no records when it does not."""
        data = self._read()
        state = self.verify(data)
        return state, self.entries(data) if state.ok else []

    def verify(self, data: bytes | None = None) -> Verification:
        """Check every line's hash, MAC and link, sequence numbers, the head anchor and the
        claims' anchors (of the chain as it is now, or of `data`, bytes read from it)."""
        data = self._read() if data is None else data
        if data and not data.endswith(b"\n"):
            count = data.count(b"\n") + 1
            return Verification(False, count, "", "the last line is incomplete (torn write)", count)
        key = self._key() or self._finishable_key()  # a key creation killed midway is no damage
        lines = data.splitlines()
        if key is None:
            if not lines and not self.head_path.exists():
                return self.anchors.check(Verification(True, 0, GENESIS), [], None)
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
            problem, record = check_line(raw, prev, seq + 1, key, keyed)
            if problem:
                return Verification(False, len(lines), prev, problem, number, seq=seq)
            keyed = keyed or record["schema"] == SCHEMA
            penultimate, prev, seq = prev, record["hash"], record["seq"]
        self._verified = Prefix.of(data, key, len(lines), prev, seq, penultimate, keyed)
        if lines and not keyed:
            return Verification(
                False, len(lines), prev, "no line of the chain is keyed (forged or not adopted)", 1
            )
        return self.anchors.check(
            check_head(self._head(), key, len(lines), seq, prev, penultimate), lines, key
        )

    def verify_legacy(self) -> Verification:
        """The rules of unkeyed chains (hash links and a plain head), for adoption."""
        return check_legacy(self._read().splitlines(), self._head())

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
