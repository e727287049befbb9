"""Decide which skill, if any, serves a task: `match`, `related_match` or `novel`.

Compatibility filters (policy.py) run first, on the caller's context. The remaining skills are
ranked by a ranking score: the weighted mean of the components each skill has (dense
similarities to its description, body opening and best description sentence; saturated BM25 on
its description and body), so a skill without a body is not penalised for it. The decision reads
the leader's confidence, built from a second weighted mean that leaves out what only helps to
order skills, on the library's own calibrated scale (calibration.py): thresholds are derived from
the library at every snapshot, never copied from another library or model. One task's ranking is
computed by ranking.py, the candidates' fused scores and components for those few skills only.
Deterministic for a fixed library: ties are broken by priority, then name.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np

from ingot.errors import IngotError
from mcp_server import policy as policy_mod
from mcp_server.calibration import (
    COMPONENTS,
    LibraryCalibration,
    Procedure,
    Scoring,
    background_tasks,
    calibrate,
    coverage,
)
from mcp_server.decision import NEAREST, Candidate, RouteResult
from mcp_server.embedding import CachedEmbedder
from mcp_server.index import Index, Scores, terms
from mcp_server.policy import CallerContext, Policy, PolicyInvalid
from mcp_server.ranking import Ranker
from mcp_server.registry import Skill

RECALIBRATE_AFTER_S = 0.2  # quiet time after an edit before its rule is re-derived
MIN_SCORE_RANGE = (-1.0, 2.0)  # a per-call min_score (calibrated scale); the MCP tool's bounds too
# The longest task any surface routes (MCP tools, `ingot route`, the Library's routing box): a
# summary of a request, not a conversation; past it a pasted document outvotes the request.
MAX_TASK_CHARS = 8000
log = logging.getLogger(__name__)


class TaskRefused(IngotError):
    """A task to route is empty (nothing alphanumeric) or longer than MAX_TASK_CHARS."""

    exit_code = 2


def check_task(task: str) -> str:
    """`task` unchanged when it may be routed, else `TaskRefused` with the one message every
    surface shows (MCP as a tool error, the CLI as its `Error:` line, the UI as its error page)."""
    if len(task) > MAX_TASK_CHARS:
        raise TaskRefused(
            f"task is {len(task):,} characters; send at most {MAX_TASK_CHARS:,} "
            "(a summary of the request, not the whole conversation)"
        )
    if not any(ch.isalnum() for ch in task):  # blank, NULs, zero-width spaces, punctuation only
        raise TaskRefused("task is empty: describe what you need done in one or two sentences")
    return task


@dataclass
class _State:
    index: Index
    policies: dict[str, Policy]
    disabled: dict[str, str]  # skill name -> why its routing metadata disabled it
    scoring: Scoring | None = None
    calibration: LibraryCalibration | None = None
    ranker: Ranker | None = None  # built with `scoring`: the per-query fast path (ranking.py)
    constrained: list[int] = field(default_factory=list)  # index rows with any routing constraint
    has_conflicts: bool = False
    priorities: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        if self.scoring is not None:
            self.ranker = Ranker.build(self.index, self.scoring)
        default = Policy()
        names = self.index.names
        self.constrained = [i for i, n in enumerate(names) if self.policies[n] != default]
        self.has_conflicts = any(self.policies[n].conflicts for n in names)
        self.priorities = np.array([self.policies[n].priority for n in names], dtype=np.int64)

    def routed(self) -> np.ndarray:
        """Index rows routing may pick at all: not `trust: blocked`, not `activation: manual`."""
        return np.array([self.policies[n].routable for n in self.index.names], dtype=bool)

    def use(self, scoring: Scoring, calibration: LibraryCalibration) -> None:
        """Set this snapshot's scoring and decision rule (before it is served)."""
        self.scoring, self.calibration = scoring, calibration
        self.ranker = Ranker.build(self.index, scoring)


@dataclass
class Router:
    """Holds the current index; `update` swaps in a new one atomically (readers never block)."""

    embedder: CachedEmbedder
    procedure: Procedure = field(default_factory=Procedure)
    _state: _State | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _background: np.ndarray | None = None
    _pending: _State | None = None
    _pending_lock: threading.Lock = field(default_factory=threading.Lock)
    _worker: threading.Thread | None = None

    def update(self, skills: Mapping[str, Skill], defer_calibration: bool = False) -> dict[str, str]:
        """Rebuild the index for `skills` and re-derive its calibration; returns skills disabled
        by malformed metadata.

        With `defer_calibration` (the file watcher's edits), the new snapshot is served at once
        with the previous snapshot's anchors, marked `provisional`, and is re-derived in a
        background thread that swaps in its result unless a newer snapshot replaced it first:
        an edit is served as fast as before, and the rule catches up within one calibration."""
        policies: dict[str, Policy] = {}
        disabled: dict[str, str] = {}
        for name, skill in skills.items():
            try:
                policies[name] = policy_mod.parse_policy(skill.metadata)
            except PolicyInvalid as exc:
                disabled[name] = str(exc)
        routable = {n: s for n, s in skills.items() if n in policies}
        with self._lock:  # one rebuild at a time; readers keep the previous snapshot
            previous = self._state
            index = Index(routable, self.embedder, previous.index if previous else None)
            state = _State(index, policies, disabled)
            carried = previous.calibration if previous is not None else None
            if len(index) and defer_calibration and carried is not None and previous.scoring is not None:
                state.use(
                    Scoring.for_index(index, self.procedure, previous.scoring.bm25_scale),
                    replace(carried, provisional=True),
                )
                self._state = state
                self._recalibrate_later(state)
                return disabled
            if len(index):
                state.use(
                    *calibrate(
                        index, self._background_vectors(), self.embedder.embed, self.procedure, state.routed()
                    )
                )
            self._state = state
        return disabled

    def _recalibrate_later(self, state: _State) -> None:
        with self._pending_lock:
            self._pending = state
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(
                    target=self._recalibrate, name="ingot-calibration", daemon=True
                )
                self._worker.start()

    def _recalibrate(self) -> None:
        """Derive the calibration of the newest deferred snapshot; drop results a newer one replaced."""
        while True:
            # Let the edit's first requests, and the rest of a burst of edits, land first.
            time.sleep(RECALIBRATE_AFTER_S)
            with self._pending_lock:
                state, self._pending = self._pending, None
                if state is None:
                    self._worker = None
                    return
            try:
                scoring, calibration = calibrate(
                    state.index,
                    self._background_vectors(),
                    self.embedder.embed,
                    self.procedure,
                    state.routed(),
                )
            except Exception:  # the provisional rule keeps serving; the next edit tries again
                log.exception("recalibration after an edit failed; keeping the previous anchors")
                continue
            with self._lock:
                if self._state is state:
                    self._state = replace(state, scoring=scoring, calibration=calibration)

    def calibrating(self) -> bool:
        """True while a deferred calibration is pending or running."""
        with self._pending_lock:
            return self._pending is not None or (self._worker is not None and self._worker.is_alive())

    def _background_vectors(self) -> np.ndarray:
        if self._background is None:
            self._background = self.embedder.embed(list(background_tasks()))
        return self._background

    @property
    def calibration(self) -> LibraryCalibration | None:
        """What the current snapshot's decision rule was derived as (None for an empty library)."""
        return self._state.calibration if self._state else None

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

    def route(
        self,
        task: str,
        context: CallerContext | None = None,
        k: int = 5,
        min_score: float | None = None,
    ) -> RouteResult:
        """Rank the compatible skills for `task` and decide match / related / novel.

        `min_score` (calibrated scale) replaces the library's related threshold for this call:
        a skill is loaded only when its score reaches it, and is a match from the larger of it
        and the match threshold. It must be a number from -1 to 2 (ValueError otherwise)."""
        if min_score is not None and not MIN_SCORE_RANGE[0] <= min_score <= MIN_SCORE_RANGE[1]:
            raise ValueError(
                f"min_score must be a number from {MIN_SCORE_RANGE[0]} to {MIN_SCORE_RANGE[1]} "
                f"(calibrated scale), not {min_score}"
            )
        state = self._state
        if state is None or len(state.index) == 0 or not task.strip():
            return RouteResult(None, None, 0.0, None, (), {"reason": "empty library or task"})
        assert state.scoring is not None and state.calibration is not None
        started = time.perf_counter()
        context = context or CallerContext()
        index = state.index
        query_terms = terms(task)
        vector = self.embedder.embed_query(task)
        embedded = time.perf_counter()
        excluded: dict[str, int] = {}
        unchecked: set[str] = set()
        allowed = np.ones(len(index), dtype=bool)
        for i in state.constrained:  # skills without routing metadata pass every filter
            reason, missing = policy_mod.check(state.policies[index.names[i]], context)
            if reason:
                allowed[i] = False
                excluded[reason] = excluded.get(reason, 0) + 1
            unchecked.update(missing)
        want = max(k, NEAREST)
        assert state.ranker is not None
        # Exact for every row that can be among the best `want` (all that is read of it below);
        # with conflicts, any skill may refill the top, so every row.
        ranking, computed = state.ranker.rank(
            vector, query_terms, allowed, None if state.has_conflicts else want
        )
        if state.has_conflicts:  # rank everything so dropping conflicts can refill the top k
            ranked = self._rank(state, ranking, allowed, len(index))
            ranked = self._drop_conflicts(ranked, index, state.policies, want)
        else:
            ranked = self._rank(state, ranking, allowed, want)
        cal = state.calibration
        related_at = cal.tau_related if min_score is None else min_score
        match_at = max(cal.tau_match, related_at)
        unknown = index.unknown_share(query_terms)
        rows = np.asarray(ranked[:want], dtype=np.int64)
        raw = state.ranker.components(vector, ranked[:want], computed)  # the candidates' only
        fused = state.scoring.fuse(raw, rows)
        candidates = [
            self._candidate(
                state, raw, (fused, ranking), ranked, pos, query_terms, unknown, related_at, match_at
            )
            for pos in range(len(rows))
        ]
        components: dict[str, object] = {
            "filtered_out": excluded,
            "unchecked_constraints": sorted(unchecked),
            "candidates_considered": int(allowed.sum()),
        }
        calibrated = {  # what any score here would be compared with, also when nothing is left
            "background_anchor": round(cal.background_anchor, 6),
            "own_anchor": round(cal.own_anchor, 6),
            "related_at": round(related_at, 6),
            "match_at": round(match_at, 6),
            "calibration_provisional": cal.provisional,
        }
        if not candidates:
            return RouteResult(None, None, 0.0, None, (), {**components, **calibrated}, ())
        best = candidates[0]
        components.update(best.components)
        components.update(calibrated)
        lead = best.score - candidates[1].score if len(candidates) > 1 else best.score
        if best.fit == "related" and lead >= self.procedure.tau_lead:  # nothing else is even near
            best = replace(best, fit="match")
        components["lead"] = round(lead, 6)
        chosen = index.skills[best.name] if best.fit != "none" else None
        match = best.name if best.fit == "match" else None
        related = best.name if best.fit == "related" else None
        others = tuple(c for c in candidates[1:k] if c.fit != "none")
        finished = time.perf_counter()
        components["embed_ms"] = round((embedded - started) * 1000, 3)
        components["route_ms"] = round((finished - started) * 1000, 3)
        return RouteResult(
            match, related, best.score, chosen, others, components, (best, *candidates[1 : max(k, 1)])
        )

    def suggest(
        self, task: str, k: int = 5, context: CallerContext | None = None, min_score: float | None = None
    ) -> list[Candidate]:
        """Up to k skills at least related to `task` (at `min_score`, when given), best first;
        empty when none is."""
        result = self.route(task, context, k, min_score)
        if result.skill is None:
            return []
        return [c for c in result.ranked[:k] if c.fit != "none"]

    @staticmethod
    def _rank(state: _State, scores: np.ndarray, allowed: np.ndarray, want: int) -> list[int]:
        """Rows of the best `want` allowed skills by ranking score (plus any exact ties), best first.

        Exact ties are decided by priority, then name (rows are in name order), never by float
        noise or sort instability, so the ranking is deterministic for a fixed library."""
        rows = np.flatnonzero(allowed)
        if len(rows) == 0:
            return []
        rounded = np.round(scores[rows], 6)
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
        state: _State,
        raw: Scores,  # the candidates' raw components, in ranked order
        scores: tuple[np.ndarray, np.ndarray],  # (the candidates' fused, every skill's ranking)
        ranked: list[int],
        pos: int,
        query_terms: list[str],
        unknown: float,
        related_at: float,
        match_at: float,
    ) -> Candidate:
        assert state.scoring is not None and state.calibration is not None
        index, cal = state.index, state.calibration
        fused, ranking = scores
        i = ranked[pos]
        rival = ranking[ranked[1]] if pos == 0 and len(ranked) > 1 else ranking[ranked[0]]
        if len(ranked) == 1:
            rival = 0.0
        margin = float(ranking[i] - rival)
        covered = coverage(index, index.names[i], query_terms)
        confidence = state.scoring.confidence(float(fused[pos]), margin, covered, unknown)
        score = round(float(cal.calibrated(confidence)), 6)
        fit = "match" if score >= match_at else "related" if score >= related_at else "none"
        components = {  # the weighed components only: the others are not computed
            **{c: float(getattr(raw, c)[pos]) for c in COMPONENTS if c in self.procedure.used},
            "body_used": float(state.scoring.present[1, i]),
            "ranking": float(ranking[i]),
            "fused": float(fused[pos]),
            "margin": margin,
            "coverage": float(covered),
            "unknown_terms": float(unknown),
            "confidence": confidence,
            "calibrated": score,
        }
        return Candidate(index.names[i], score, fit, components)
