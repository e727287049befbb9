"""Optional author-side web research: one shared, cached brief per optimize run (Tavily).

With TAVILY_API_KEY set, one web search about the skill (its name and description, nothing else:
never task prompts, answers or traces) yields a short brief that every candidate author sees.
The judge never sees it, so answers are not graded against what the web says. The brief is cached
by query for `ttl_s`, so repeated runs make no search calls. Without a key nothing is fetched and
every prompt is byte-identical to a run without research. A failed search is logged (without the
key) and the run goes on without a brief; the evidence records which of these happened.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx
import rfc8785

from ingot.fsutil import write_atomic
from optimize.models.prompting import render

log = logging.getLogger(__name__)

TAVILY_URL = "https://api.tavily.com"
MAX_BRIEF_CHARS = 4000  # the authors' context is for the skill, not a web dump


@dataclass(frozen=True)
class Brief:
    """What the authors get, and what the evidence says about it."""

    status: Literal["off", "fetched", "cached", "failed"]
    text: str = ""
    sources: tuple[str, ...] = ()
    detail: str = ""

    def prompt_section(self) -> str:
        """Text appended to author prompts: empty when there is no brief, so prompts are unchanged."""
        return "\n\n" + render("research_brief", brief=self.text) if self.text else ""

    def evidence(self) -> dict[str, object]:
        return {"status": self.status, "sources": list(self.sources), "detail": self.detail}


OFF = Brief("off", detail="TAVILY_API_KEY not set")


class Researcher:
    """Fetches (or reads from cache) one brief per skill; `api_key=None` means research is off."""

    def __init__(
        self,
        api_key: str | None,
        cache_dir: Path,
        base_url: str = TAVILY_URL,
        max_results: int = 5,
        timeout_s: float = 20.0,
        ttl_s: float = 7 * 86400,
    ) -> None:
        self.api_key, self.cache_dir, self.base_url = api_key, cache_dir, base_url.rstrip("/")
        self.max_results, self.timeout_s, self.ttl_s = max_results, timeout_s, ttl_s

    def brief(self, skill: str, description: str) -> Brief:
        if not self.api_key:
            return OFF
        query = f"{skill}: {description}"[:380]  # Tavily rejects queries over 400 characters
        request = {"query": query, "max_results": self.max_results, "search_depth": "basic"}
        key = hashlib.sha256(rfc8785.dumps({"url": self.base_url, **request})).hexdigest()
        path = self.cache_dir / f"{key}.json"
        cached = self._read_cache(path)
        if cached is not None:
            return Brief("cached", cached["text"], tuple(cached["sources"]), f"query {query!r}")
        try:
            results = self._search(request)
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("web research unavailable, continuing without it: %s", exc)
            return Brief("failed", detail=str(exc)[:300])
        text, sources = _condense(results)
        if not text:
            return Brief("failed", detail=f"no results for {query!r}")
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        record = {"schema_version": 1, "fetched_at": time.time(), "text": text, "sources": list(sources)}
        write_atomic(path, json.dumps(record).encode())
        return Brief("fetched", text, sources, f"query {query!r}")

    def _search(self, request: dict[str, object]) -> list[dict[str, object]]:
        response = httpx.post(
            f"{self.base_url}/search",
            json=request,
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=self.timeout_s,
        )
        if response.status_code != 200:
            raise ValueError(f"search answered HTTP {response.status_code}")
        results = response.json().get("results")
        if not isinstance(results, list):
            raise ValueError("search answered without a results list")
        return [r for r in results if isinstance(r, dict)]

    def _read_cache(self, path: Path) -> dict | None:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        fresh = time.time() - float(record.get("fetched_at", 0)) < self.ttl_s
        ok = isinstance(record.get("text"), str) and isinstance(record.get("sources"), list)
        return record if fresh and ok else None


def _condense(results: list[dict[str, object]]) -> tuple[str, tuple[str, ...]]:
    """Numbered snippets with their sources, capped at MAX_BRIEF_CHARS."""
    parts: list[str] = []
    sources: list[str] = []
    used = 0
    for result in results:
        content, url = str(result.get("content") or "").strip(), str(result.get("url") or "").strip()
        if not content:
            continue
        entry = f"[{len(parts) + 1}] {str(result.get('title') or url).strip()} ({url})\n{content}"
        if used + len(entry) > MAX_BRIEF_CHARS:
            break
        parts.append(entry)
        sources.append(url)
        used += len(entry)
    return "\n\n".join(parts), tuple(sources)
