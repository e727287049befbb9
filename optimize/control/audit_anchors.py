"""Anchors outside the state home: the audit chain's key fingerprint and newest line, recorded in
the claim beside each root the home manages (`<parent>/.ingot/<root>.claim`).

The chain's first line pins the fingerprint of the key it was written with, and after every
append each claim records the key's fingerprint and the newest line's sequence number and hash.
`check` holds a chain that passes its own checks (audit_verify.py) to both: a replaced
`audit.key` with every line re-MAC'd fails, and so does a chain truncated to an older state
with an older head restored. Someone who can write the claims too can put them back with the
chain: audit_remote.py checks the chain against a pushed git history for that, and
docs/design/change-control.md says what stays open.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from ingot.fsutil import write_atomic
from ingot.home import claim_path
from optimize.control.audit_verify import Verification

log = logging.getLogger(__name__)


def key_fingerprint(key: bytes) -> str:
    """What identifies a key without revealing it (pinned in line 1 and in the claims)."""
    return hashlib.sha256(b"ingot audit key\0" + key).hexdigest()


def _line_hash(raw: bytes) -> str | None:
    try:
        return str(json.loads(raw)["hash"])
    except (ValueError, KeyError, TypeError):
        return None


def _first_line_pin(lines: list[bytes]) -> str | None:
    try:
        pinned = json.loads(lines[0]).get("key_fingerprint") if lines else None
    except (ValueError, AttributeError):
        return None
    return str(pinned) if pinned else None


def _anchor_of(claim: Path) -> dict[str, Any] | None:
    """A claim's audit anchor ({key, seq, hash}), or None if it has none (or cannot be read)."""
    try:
        audit = json.loads(claim.read_text()).get("audit")
        return {"key": str(audit["key"]), "seq": int(audit["seq"]), "hash": str(audit["hash"])}
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return None


class Anchors:
    """The claims of the home at `home` (its `home.json` lists the roots); `key_name` is the key
    file's name, for messages."""

    def __init__(self, home: Path, key_name: str) -> None:
        self.home, self.key_name = home, key_name

    def claims(self) -> list[Path]:
        """The claims beside the roots this home manages (`home.json` lists them): where the
        chain's key fingerprint and length are anchored outside the state home."""
        try:
            data = json.loads((self.home / "home.json").read_text())
            roots = [Path(os.path.normpath(self.home / str(r))) for r in data.get("roots", [])]
        except (OSError, ValueError, AttributeError, TypeError):
            return []
        return [claim_path(root) for root in roots]

    def check(self, state: Verification, lines: list[bytes], key: bytes | None) -> Verification:
        """A chain that passes its own checks must also agree with every claim's anchor: the key
        it was written with (a replaced `audit.key`, with every line re-MAC'd, fails here) and a
        line it had (a chain truncated to an older state, with an older head restored, fails)."""
        if not state.ok:
            return state
        fingerprint = key_fingerprint(key) if key is not None else None
        pinned = _first_line_pin(lines)
        if pinned is not None and pinned != fingerprint:
            return replace(
                state,
                ok=False,
                problem=f"{self.key_name} is not the key this chain was started with (its first "
                f"line pins {pinned[:16]}, the key is {str(fingerprint)[:16]}): it was replaced. "
                "Restore the original key from backup",
                bad_line=1,
            )
        for claim in self.claims():
            anchor = _anchor_of(claim)
            if anchor is None:
                continue  # an older claim, or none yet: anchored at the next append
            if fingerprint is None:
                return replace(
                    state,
                    ok=False,
                    problem=f"the audit chain and its key are gone, but the claim {claim} records line "
                    f"{anchor['seq']} of it: restore the state home from backup",
                    bad_line=1,
                )
            if anchor["key"] != fingerprint:
                return replace(
                    state,
                    ok=False,
                    problem=f"{self.key_name} is not the key the claim {claim} records (fingerprint "
                    f"{anchor['key'][:16]}, the key is {str(fingerprint)[:16]}): it was replaced. "
                    "Restore the original key from backup",
                    bad_line=1,
                )
            seq = anchor["seq"]
            if seq > len(lines) or _line_hash(lines[seq - 1]) != anchor["hash"]:
                return replace(
                    state,
                    ok=False,
                    problem=f"the audit chain lacks line {seq} as the claim {claim} recorded it (hash "
                    f"{anchor['hash'][:16]}; the chain has {len(lines)} line(s)): lines were removed or "
                    "rewritten. Restore the chain and its head from backup",
                    bad_line=min(seq, len(lines) + 1),
                )
        return state

    def record(self, key: bytes, seq: int, digest: str) -> None:
        """Record the chain's newest line and key fingerprint in every claim (after the head
        moved: an anchor is never ahead of the chain). A claim that cannot be written is logged
        and anchored at the next append; the line itself is already durable."""
        for claim in self.claims():
            try:
                data = json.loads(claim.read_text())
                if not isinstance(data, dict):
                    continue
                data["audit"] = {"key": key_fingerprint(key), "seq": seq, "hash": digest}
                write_atomic(claim, json.dumps(data, indent=1).encode(), mode=0o644)
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                log.warning("could not anchor audit line %s in %s: %s", seq, claim, exc)
