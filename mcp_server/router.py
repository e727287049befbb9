"""Decide which skill, if any, serves a task: `match`, `related_match` or `novel`.

Compatibility filters (policy.py) run first, on the caller's context. The remaining skills are
ranked by a fused score: a weighted sum of dense similarities (description, body opening, best
description sentence) and saturated BM25 scores (description field, body field). The decision
uses a confidence that adds how far the leader stands out from the runner-up and how much of
the task's vocabulary the skill's text covers. Weights and thresholds were calibrated on the
dev routing cases by `scripts/calibrate_router.py` (see ARCHITECTURE.md); they are specific to
the embedding model, so another model needs its own calibration. Deterministic for a fixed
library: ties are broken by priority, then name.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from mcp_server import policy as policy_mod
from mcp_server.embedding import CachedEmbedder
from mcp_server.index import Index, Scores, terms
from mcp_server.policy import CallerContext, Policy, PolicyInvalid
from mcp_server.registry import Skill


@dataclass(frozen=True)
class Calibration:
    """Fusion weights and decision thresholds for one embedding model."""

    # Chosen by scripts/calibrate_router.py on ../shared/corpus (70 valid skills, 170 cases) for
    # all-MiniLM-L6-v2 int8: fit top-1 0.847, recall@3 0.939, no-route 0.917; 5-fold CV top-1
    # 0.851, no-route 0.937. See ARCHITECTURE.md, "Routing calibration".
    w_dense_description: float = 0.2
    w_dense_body: float = 0.1
    w_dense_sentence: float = 0.1
    w_bm25_description: float = 0.2
    w_bm25_body: float = 0.1
    bm25_half_point: float = 4.0  # BM25 score mapped to 0.5 by s / (s + half_point)
    w_margin: float = 0.25
    w_coverage: float = 0.2
    w_unknown: float = 0.2
    match_threshold: float = 0.4175
    related_threshold: float = 0.3606


@dataclass(frozen=True)
class Candidate:
    """One ranked skill with its confidence and the components behind it."""

    name: str
    score: float
    related: bool  # True: close enough to compose or extend, not a direct match
    components: Mapping[str, float]


@dataclass(frozen=True)
class RouteResult:
    """The routing decision for one task. At most one skill (the chosen one) carries a body."""

    match: str | None
    related_match: str | None
    score: float
    skill: Skill | None
    alternatives: tuple[Candidate, ...]
    components: Mapping[str, object]
    ranked: tuple[Candidate, ...] = ()  # the top k before any threshold (diagnostics, benchmarks)

    @property
    def novel(self) -> bool:
        return self.skill is None


@dataclass
class _State:
    index: Index
    policies: dict[str, Policy]
    disabled: dict[str, str]  # skill name -> why its routing metadata disabled it
    constrained: list[int] = field(default_factory=list)  # index rows with any routing constraint
    has_conflicts: bool = False
    priorities: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        default = Policy()
        names = self.index.names
        self.constrained = [i for i, n in enumerate(names) if self.policies[n] != default]
        self.has_conflicts = any(self.policies[n].conflicts for n in names)
        self.priorities = np.array([self.policies[n].priority for n in names], dtype=np.int64)


@dataclass
class Router:
    """Holds the current index; `update` swaps in a new one atomically (readers never block)."""

    embedder: CachedEmbedder
    calibration: Calibration = field(default_factory=Calibration)
    _state: _State | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, skills: Mapping[str, Skill]) -> dict[str, str]:
        """Rebuild the index for `skills`; returns skills disabled by malformed metadata."""
        policies: dict[str, Policy] = {}
        disabled: dict[str, str] = {}
        for name, skill in skills.items():
            try:
                policies[name] = policy_mod.parse_policy(skill.metadata)
            except PolicyInvalid as exc:
                disabled[name] = str(exc)
        routable = {n: s for n, s in skills.items() if n in policies}
        with self._lock:  # one rebuild at a time; readers keep the previous snapshot
            previous = self._state.index if self._state else None
            self._state = _State(Index(routable, self.embedder, previous), policies, disabled)
        return disabled

    @property
    def disabled(self) -> Mapping[str, str]:
        return dict(self._state.disabled) if self._state else {}

    def served(self) -> Mapping[str, Skill]:
        """The skills of the current snapshot (what get_skill and skill:// serve)."""
        return MappingProxyType(self._state.index.skills) if self._state else MappingProxyType({})

    def similar_descriptions(self, name: str, description: str) -> dict[str, float]:
        """How close a would-be description is to each served skill's (for collision checks)."""
        state = self._state
        if state is None or len(state.index) == 0:
            return {}
        text = f"{name.replace('-', ' ')}: {description}"
        return state.index.description_similarity(self.embedder.embed([text])[0])

    def policy(self, name: str) -> Policy | None:
        return self._state.policies.get(name) if self._state else None

    def route(self, task: str, context: CallerContext | None = None, k: int = 5) -> RouteResult:
        """Rank the compatible skills for `task` and decide match / related / novel."""
        state = self._state
        if state is None or len(state.index) == 0 or not task.strip():
            return RouteResult(None, None, 0.0, None, (), {"reason": "empty library or task"})
        started = time.perf_counter()
        context = context or CallerContext()
        index = state.index
        query_terms = terms(task)
        vector = self.embedder.embed_query(task)
        embedded = time.perf_counter()
        raw = index.score(vector, query_terms)
        fused = self._fuse(raw)
        excluded: dict[str, int] = {}
        unchecked: set[str] = set()
        allowed = np.ones(len(index), dtype=bool)
        for i in state.constrained:  # skills without routing metadata pass every filter
            reason, missing = policy_mod.check(state.policies[index.names[i]], context)
            if reason:
                allowed[i] = False
                excluded[reason] = excluded.get(reason, 0) + 1
            unchecked.update(missing)
        if state.has_conflicts:  # rank everything so dropping conflicts can refill the top k
            ranked = self._rank(state, fused, allowed, len(index))
            ranked = self._drop_conflicts(ranked, index, state.policies, max(k, 2))
        else:
            ranked = self._rank(state, fused, allowed, max(k, 2))
        candidates = [
            self._candidate(index, raw, fused, ranked, pos, query_terms)
            for pos in range(min(max(k, 1), len(ranked)))
        ]
        components: dict[str, object] = {
            "filtered_out": excluded,
            "unchecked_constraints": sorted(unchecked),
            "candidates_considered": int(allowed.sum()),
        }
        if not candidates:
            return RouteResult(None, None, 0.0, None, (), components, ())
        best = candidates[0]
        components.update(best.components)
        cal = self.calibration
        chosen = index.skills[best.name] if best.score >= cal.related_threshold else None
        match = best.name if chosen is not None and best.score >= cal.match_threshold else None
        related = best.name if chosen is not None and match is None else None
        others = tuple(c for c in candidates[1:] if c.score >= cal.related_threshold)
        finished = time.perf_counter()
        components["embed_ms"] = round((embedded - started) * 1000, 3)
        components["route_ms"] = round((finished - started) * 1000, 3)
        return RouteResult(match, related, best.score, chosen, others, components, tuple(candidates))

    def suggest(self, task: str, k: int = 5, context: CallerContext | None = None) -> list[Candidate]:
        """Up to k skills at least related to `task`, best first; empty when none is."""
        result = self.route(task, context, k)
        if result.skill is None:
            return []
        head = Candidate(
            result.skill.name,
            result.score,
            result.match is None,
            {k_: v for k_, v in result.components.items() if isinstance(v, float)},
        )
        return [head, *result.alternatives]

    def _fuse(self, raw: Scores) -> np.ndarray:
        cal = self.calibration
        half = cal.bm25_half_point
        return (
            cal.w_dense_description * raw.dense_description
            + cal.w_dense_body * raw.dense_body
            + cal.w_dense_sentence * raw.dense_sentence
            + cal.w_bm25_description * raw.bm25_description / (raw.bm25_description + half)
            + cal.w_bm25_body * raw.bm25_body / (raw.bm25_body + half)
        )

    @staticmethod
    def _rank(state: _State, fused: np.ndarray, allowed: np.ndarray, want: int) -> list[int]:
        """Rows of the best `want` allowed skills (plus any exact ties), best first.

        Exact ties are decided by priority, then name (rows are in name order), never by float
        noise or sort instability, so the ranking is deterministic for a fixed library."""
        rows = np.flatnonzero(allowed)
        if len(rows) == 0:
            return []
        rounded = np.round(fused[rows], 6)
        if len(rows) > want:
            cutoff = np.partition(rounded, len(rows) - want)[len(rows) - want]
            keep = rounded >= cutoff
            rows, rounded = rows[keep], rounded[keep]
        order = np.lexsort((rows, -state.priorities[rows], -rounded))
        return rows[order].tolist()

    @staticmethod
    def _drop_conflicts(
        ranked: list[int], index: Index, policies: Mapping[str, Policy], want: int
    ) -> list[int]:
        """Of two skills that declare a conflict, keep the higher priority (then the better rank).

        Walks the ranking only until `want` skills are kept, so its cost does not grow with the
        library."""
        kept: list[int] = []
        for i in ranked:
            name, pol = index.names[i], policies[index.names[i]]
            clash = [
                j
                for j in kept
                if name in policies[index.names[j]].conflicts or index.names[j] in pol.conflicts
            ]
            if not clash:
                kept.append(i)
            elif all(pol.priority > policies[index.names[j]].priority for j in clash):
                kept = [j for j in kept if j not in clash]
                kept.append(i)
            if len(kept) >= want + 1:
                break
        return kept

    def _candidate(
        self,
        index: Index,
        raw: Scores,
        fused: np.ndarray,
        ranked: list[int],
        pos: int,
        query_terms: list[str],
    ) -> Candidate:
        cal = self.calibration
        i = ranked[pos]
        rival = fused[ranked[1]] if pos == 0 and len(ranked) > 1 else fused[ranked[0]]
        if len(ranked) == 1:
            rival = 0.0
        margin = float(fused[i] - rival)
        skill = index.skills[index.names[i]]
        vocabulary = index.vocabulary(skill.name)
        coverage = (sum(t in vocabulary for t in query_terms) / len(query_terms)) if query_terms else 0.0
        unknown = index.unknown_share(query_terms)
        score = float(fused[i]) + cal.w_margin * margin + cal.w_coverage * coverage - cal.w_unknown * unknown
        components = {
            "dense_description": float(raw.dense_description[i]),
            "dense_body": float(raw.dense_body[i]),
            "dense_sentence": float(raw.dense_sentence[i]),
            "bm25_description": float(raw.bm25_description[i]),
            "bm25_body": float(raw.bm25_body[i]),
            "fused": float(fused[i]),
            "margin": margin,
            "coverage": float(coverage),
            "unknown_terms": float(unknown),
            "confidence": score,
        }
        return Candidate(skill.name, round(score, 6), score < cal.match_threshold, components)
