"""Caches of paid measurements (the A/B champion's answers and grades, the seed's train
rollout), keyed by everything that conditions them and sealed.

An entry is `{schema_version, conditions, results, mac}`, written atomically, named by the hash
of its conditions (models, endpoints, sandbox mode, prompt templates, revision, task hashes,
judges). On read, an entry whose conditions differ, whose seal does not verify (edited by hand)
or that is unreadable (truncated by a crash) is ignored and recomputed: never trusted, never a
crash. Each hit or write reports the file's digest, which evidence records and approval checks.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rfc8785

from ingot.fsutil import write_atomic
from ingot.seal import Seal

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class CacheEntry:
    results: Any
    path: Path
    digest: str  # sha256 of the file's bytes
    hit: bool  # True: read from disk; False: just computed and written

    def as_json(self) -> dict[str, Any]:
        return {"file": self.path.name, "digest": self.digest, "from_cache": self.hit}


def _body(conditions: Mapping[str, Any], results: Any) -> bytes:
    return rfc8785.dumps({"conditions": dict(conditions), "results": results})


class SealedCache:
    def __init__(self, folder: Path, seal: Seal | None) -> None:
        self.folder, self.seal = folder, seal

    def path(self, conditions: Mapping[str, Any]) -> Path:
        return self.folder / f"{hashlib.sha256(rfc8785.dumps(dict(conditions))).hexdigest()}.json"

    def get(self, conditions: Mapping[str, Any]) -> CacheEntry | None:
        path = self.path(conditions)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cache entry %s unreadable (%s); recomputing", path.name, exc)
            return None
        problem = self._problem(raw, conditions)
        if problem:
            log.warning("cache entry %s %s; recomputing it", path.name, problem)
            return None
        return CacheEntry(json.loads(raw)["results"], path, hashlib.sha256(raw).hexdigest(), True)

    def _problem(self, raw: bytes, conditions: Mapping[str, Any] | None) -> str | None:
        try:
            data = json.loads(raw)
            if data.get("schema_version") != SCHEMA_VERSION:
                return "has another schema"
            if conditions is not None and data.get("conditions") != json.loads(
                rfc8785.dumps(dict(conditions))
            ):
                return "was measured under other conditions"
            if self.seal is not None and not self.seal.verifies(
                _body(data["conditions"], data["results"]), data.get("mac")
            ):
                return "is not sealed by this state home (edited or copied in)"
        except (ValueError, KeyError, TypeError, AttributeError):
            return "is not a readable cache entry"
        return None

    def put(self, conditions: Mapping[str, Any], results: Any) -> CacheEntry:
        self.folder.mkdir(parents=True, exist_ok=True)
        record = {"schema_version": SCHEMA_VERSION, "conditions": dict(conditions), "results": results}
        if self.seal is not None:
            record["mac"] = self.seal.sign(_body(conditions, results))
        raw = json.dumps(record, sort_keys=True).encode()
        path = self.path(conditions)
        write_atomic(path, raw, mode=0o600)
        return CacheEntry(results, path, hashlib.sha256(raw).hexdigest(), False)

    def still_valid(self, name: str, digest: str) -> str | None:
        """Why the entry `name` the evidence recorded with `digest` can no longer be trusted, or
        None. For approval: the bytes must be the same and the seal must still verify."""
        path = self.folder / name
        try:
            raw = path.read_bytes()
        except OSError:
            return f"the cache entry {name} it was measured with is gone"
        if hashlib.sha256(raw).hexdigest() != digest:
            return f"the cache entry {name} changed since it was measured (digest {digest[:12]} recorded)"
        return self._problem(raw, None)
