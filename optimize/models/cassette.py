"""Record and replay model calls: JSONL cassettes under `runs/cassettes/`.

The key is the SHA-256 of the canonical request (endpoint, model, messages, tools, sampling
parameters, response format) plus the skill revision being served, if any. Files are 0600.
Several responses recorded under one key replay in order (repeated sampling). Streaming
responses are stored assembled. Never headers, so `Authorization` cannot leak into a cassette.

What is kept verbatim, and what is not: replay needs only the key, so the request is stored
redacted like a trace (redaction.py: secrets and e-mail addresses go), for a person to see what
was asked. The response is stored verbatim, because a replay must give back exactly what the
model said; an answer that echoed a secret keeps it. Cassettes are opt-in (CASSETTE_MODE); keep
them off for runs over data you would not write to disk. Modes: off, record, replay (a miss is
an error), record-missing. The capture proxy records in the same format (`cassettes/proxy.jsonl`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import rfc8785

from ingot.errors import IngotError
from optimize.models.redaction import redact_value

KEY_FIELDS = (
    "model",
    "messages",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "n",
    "response_format",
    "presence_penalty",
    "frequency_penalty",
)
MODES = ("off", "record", "replay", "record-missing")


class CassetteMiss(IngotError):
    """Replay mode found no recorded response for a request."""


def request_key(request: Mapping[str, Any], skill_revision: str | None) -> str:
    canonical = {k: request[k] for k in KEY_FIELDS if request.get(k) is not None}
    return hashlib.sha256(rfc8785.dumps({"request": canonical, "skill_revision": skill_revision})).hexdigest()


class Cassette:
    """One cassette file; replays each key's responses in the order they were recorded."""

    def __init__(self, path: Path, mode: str) -> None:
        if mode not in MODES:
            raise IngotError(f"CASSETTE_MODE must be one of {', '.join(MODES)}, not {mode!r}")
        self.path, self.mode = path, mode
        self._recorded: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._cursor: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    entry = json.loads(line)
                    self._recorded[entry["key"]].append(entry["response"])

    def lookup(self, key: str) -> dict[str, Any] | None:
        """The next recorded response for `key`, or None if it should be fetched (and recorded)."""
        if self.mode in ("off", "record"):
            return None
        with self._lock:
            responses, at = self._recorded.get(key, []), self._cursor[key]
            if at < len(responses):
                self._cursor[key] += 1
                return responses[at]
        if self.mode == "replay":
            raise CassetteMiss(
                f"no recorded response for request {key[:12]} in {self.path} "
                f"(call {at + 1} of it); record it with CASSETTE_MODE=record-missing"
            )
        return None

    def store(self, key: str, request: Mapping[str, Any], response: Mapping[str, Any]) -> None:
        if self.mode not in ("record", "record-missing"):
            return
        entry = {
            "key": key,
            "request": redact_value({k: request[k] for k in KEY_FIELDS if request.get(k) is not None}),
            "response": dict(response),
        }
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # prompts are private
            with os.fdopen(fd, "a") as handle:
                handle.write(json.dumps(entry, sort_keys=True) + "\n")
            self._recorded[key].append(dict(response))
            self._cursor[key] += 1
