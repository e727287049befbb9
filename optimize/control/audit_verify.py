"""The audit chain's rules, as pure checks over bytes: how a line and the head anchor are hashed
and MAC'd, and whether a chain of lines and its head pass.

Reads and writes nothing: audit.py reads `audit.jsonl`, `audit.head` and the key, and asks these
functions. A check returns the first problem it finds, with its 1-based line number, never a
partial "probably fine": a line passes only if its hash, MAC, sequence and link all hold.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import rfc8785

SCHEMA = 2
LEGACY_SCHEMA = 1  # unkeyed lines of Ingot before keyed chains; accepted only before an `adopt` line
GENESIS = "0" * 64


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


def record_digest(record: Mapping[str, Any]) -> str:
    return hashlib.sha256(
        rfc8785.dumps({k: v for k, v in record.items() if k not in ("hash", "mac")})
    ).hexdigest()


def mac(key: bytes, message: bytes) -> str:
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def head_message(seq: int, digest: str, announced: str | None) -> bytes:
    return rfc8785.dumps({"seq": seq, "hash": digest, "next": announced})


@dataclass(frozen=True)
class Prefix:
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
    def of(cls, data: bytes, key: bytes, *state: Any) -> Prefix:
        return cls(len(data), hashlib.sha256(data).digest(), hashlib.sha256(key).digest(), *state)

    def matches(self, data: bytes, key: bytes) -> bool:
        return (
            len(data) >= self.size
            and hmac.compare_digest(hashlib.sha256(data[: self.size]).digest(), self.digest)
            and hmac.compare_digest(hashlib.sha256(key).digest(), self.key_digest)
        )


def check_line(
    raw: bytes, prev: str, expected_seq: int, key: bytes, keyed: bool
) -> tuple[str | None, dict[str, Any]]:
    """What is wrong with one line (None: it passes) given the line before it, and its record."""
    try:
        record = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "not valid JSON", {}
    if not isinstance(record, dict) or "hash" not in record:
        return "not an audit record", {}
    if record_digest(record) != record["hash"]:
        return "its content does not match its hash (edited)", record
    schema = record.get("schema")
    if schema == SCHEMA:
        if not isinstance(record.get("mac"), str) or not hmac.compare_digest(
            record["mac"], mac(key, record["hash"].encode())
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


def check_head(
    head: dict[str, Any] | None, key: bytes, lines: int, seq: int, last_hash: str, penultimate: str
) -> Verification:
    """The head anchor against the last line: exact, one announced line behind (a crash after
    the append), or a mismatch (truncated, appended or edited)."""
    if head is None:
        return Verification(False, lines, last_hash, "audit.head is missing", max(lines, 1), seq=seq)
    if "unreadable" in head:
        return Verification(False, lines, last_hash, "audit.head is unreadable", max(lines, 1), seq=seq)
    expected = mac(key, head_message(head["seq"], head["hash"], head["next"]))
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


def check_legacy(lines: list[bytes], head: dict[str, Any] | None) -> Verification:
    """The rules of unkeyed chains (hash links and a plain head), for adoption."""
    prev, seq, penultimate = GENESIS, 0, GENESIS
    for number, raw in enumerate(lines, start=1):
        try:
            record = json.loads(raw)
            ok = (
                isinstance(record, dict)
                and record.get("schema") == LEGACY_SCHEMA
                and record_digest(record) == record.get("hash")
            )
        except (json.JSONDecodeError, UnicodeDecodeError):
            ok = False
        if not ok or record.get("seq") != seq + 1 or record.get("prev") != prev:
            return Verification(False, len(lines), prev, "not a valid unkeyed chain line", number, seq=seq)
        penultimate, prev, seq = prev, record["hash"], record["seq"]
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
