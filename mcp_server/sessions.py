"""Which skill revision served a harness's session: the link between MCP routing and its model calls.

When a caller passes `session` to `route_and_load`, the decision is remembered here (one small
0600 file per session under `runs/sessions/`, named by a hash of the session id). The capture
proxy, given the same id in `X-Ingot-Session`, attributes the session's model calls to that
revision. Entries older than `ttl_s` are ignored, and deleted from disk: `record` prunes the folder at
most once per `PRUNE_EVERY_S`, so it never grows with every session ever seen. Shared through
files so the MCP server and the proxy may run in different processes.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from ingot.fsutil import write_atomic

DEFAULT_TTL_S = 6 * 3600
PRUNE_EVERY_S = 300.0


@dataclass(frozen=True)
class SessionRoute:
    route: str  # "match" | "related" | "novel"
    skill: str | None
    revision: str | None
    at: float


class SessionRoutes:
    def __init__(self, runs_dir: Path, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.folder = runs_dir / "sessions"
        self.ttl_s = ttl_s
        self._pruned_at = float("-inf")  # monotonic time of the last prune

    def _path(self, session: str) -> Path:
        return self.folder / f"{hashlib.sha256(session.encode()).hexdigest()[:32]}.json"

    def record(self, session: str, route: str, skill: str | None, revision: str | None) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = json.dumps({"route": route, "skill": skill, "revision": revision, "at": time.time()}).encode()
        write_atomic(self._path(session), data, durable=False)  # losing one to a power cut is harmless
        if time.monotonic() - self._pruned_at >= PRUNE_EVERY_S:
            self.prune()

    def prune(self) -> int:
        """Delete session files older than the TTL (by modification time); returns how many."""
        self._pruned_at = time.monotonic()
        cutoff = time.time() - self.ttl_s
        removed = 0
        for path in self.folder.glob("*.json"):
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:
                continue  # another process pruned it first
        return removed

    def lookup(self, session: str) -> SessionRoute | None:
        try:
            data = json.loads(self._path(session).read_text())
            found = SessionRoute(
                str(data["route"]), data.get("skill"), data.get("revision"), float(data["at"])
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return found if time.time() - found.at <= self.ttl_s else None
