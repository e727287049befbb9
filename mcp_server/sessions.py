"""Which skill revision served a harness's session: the link between MCP routing and its model calls.

When a caller passes `session` to `route_and_load`, the decision is remembered here (one small
0600 file per session under `runs/sessions/`, named by a hash of the session id). The capture
proxy, given the same id in `X-Ingot-Session`, attributes the session's model calls to that
revision. Entries older than `ttl_s` are ignored. Shared through files so the MCP server and the
proxy may run in different processes.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from ingot.fsutil import write_atomic

DEFAULT_TTL_S = 6 * 3600


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

    def _path(self, session: str) -> Path:
        return self.folder / f"{hashlib.sha256(session.encode()).hexdigest()[:32]}.json"

    def record(self, session: str, route: str, skill: str | None, revision: str | None) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = json.dumps({"route": route, "skill": skill, "revision": revision, "at": time.time()}).encode()
        write_atomic(self._path(session), data, durable=False)  # losing one to a power cut is harmless

    def lookup(self, session: str) -> SessionRoute | None:
        try:
            data = json.loads(self._path(session).read_text())
            found = SessionRoute(
                str(data["route"]), data.get("skill"), data.get("revision"), float(data["at"])
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return found if time.time() - found.at <= self.ttl_s else None
