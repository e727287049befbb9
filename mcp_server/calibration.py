"""Derive each library's decision rule from the library itself: no labels, no per-library constants.

Every index snapshot is scored against two sets of pseudo-queries:
- background tasks (`data/background_tasks.txt`): generic requests from everyday domains, written
  for Ingot. Their median confidence is the library's "nothing fits" anchor A0.
- own pseudo-queries: description sentences of up to `max_pseudo_skills` skills (a deterministic
  sample). Routed with their skill present, their median confidence is the "this fits" anchor A1;
  routed with it removed they are near-domain "nothing fits" requests (reported, not used).
A decision's confidence is then read on the library's own scale, `calibrated = (confidence - A0) /
(A1 - A0)`, and compared with the procedure's `tau_related` / `tau_match`, which are the same for
every library and model (fitted once, leave-one-library-out; see ARCHITECTURE.md). Two anchors
absorb any shift and stretch of the score scale (another embedding model, skills without bodies,
BM25 ranges that depend on document lengths), which one absolute threshold cannot.
Two stages: skills are ordered by a ranking score that may weigh evidence the confidence leaves
out (a body's terms tell two near skills apart but also match requests no skill serves), and the
leader's confidence alone decides. `leaders` is that step, shared by the router's calibration and
scripts/tune_procedure.py.
Labelled cases are not needed; `ingot calibrate --cases` only reports how the rule does on them.
Guarantee: a pure function of the snapshot, the model and the procedure (deterministic).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from importlib import resources

import numpy as np

from mcp_server.index import Index, Scores, terms

BODY_MIN_TERMS = 10  # new terms a body needs before it counts as evidence of its own
CHUNK = 128  # pseudo-queries scored at a time
COMPONENTS = ("dense_description", "dense_body", "dense_sentence", "bm25_description", "bm25_body")


@dataclass(frozen=True)
class Procedure:
    """The calibration procedure's own hyper-parameters: one set for every library and model.

    `w_*` weigh the components in the confidence (the decision); `rank_*` are added to them when
    skills are ordered, and never enter the confidence. Chosen by `scripts/tune_procedure.py`
    on the two dev libraries, with leave-one-library-out results reported (ARCHITECTURE.md)."""

    w_dense_description: float = 0.2
    w_dense_body: float = 0.1
    w_dense_sentence: float = 0.0
    w_bm25_description: float = 0.2
    w_bm25_body: float = 0.0
    rank_dense_description: float = 0.0
    rank_dense_body: float = 0.0
    rank_dense_sentence: float = 0.1
    rank_bm25_description: float = 0.0
    rank_bm25_body: float = 0.1
    bm25_half: float = 0.5  # BM25 saturates as s / (s + bm25_half x the library's own BM25 scale)
    w_margin: float = 0.0
    w_coverage: float = 0.1
    w_unknown: float = 0.0
    tau_related: float = 0.35  # calibrated confidence at which a skill is loaded
    tau_match: float = 0.55  # ... and at which it is a direct match
    tau_lead: float = 0.35  # a loaded skill this far ahead of every other is a direct match too
    max_pseudo_skills: int = 256

    def __post_init__(self) -> None:
        negative = [
            f.name for f in fields(self) if f.name.startswith(("w_", "rank_")) and getattr(self, f.name) < 0
        ]
        if negative:  # a weighted mean of what a skill has (and ranking.py's bounds) needs them >= 0
            raise ValueError(f"procedure weights must not be negative: {', '.join(negative)}")

    @functools.cached_property
    def weights(self) -> np.ndarray:
        """The confidence's component weights, in COMPONENTS order."""
        return np.array([getattr(self, f"w_{c}") for c in COMPONENTS], dtype=np.float64)

    @functools.cached_property
    def rank_weights(self) -> np.ndarray:
        """The ranking score's component weights: the confidence's plus the ranking-only ones."""
        return self.weights + np.array([getattr(self, f"rank_{c}") for c in COMPONENTS], dtype=np.float64)

    @functools.cached_property
    def used(self) -> frozenset[str]:
        """The components either stage weighs (the others need not be computed)."""
        return frozenset(c for c, w in zip(COMPONENTS, self.rank_weights, strict=True) if w > 0)


@dataclass(frozen=True)
class LibraryCalibration:
    """What the procedure derived for one library snapshot (shown by `ingot calibrate`)."""

    background_anchor: float  # A0: median confidence of the background tasks
    own_anchor: float  # A1: median confidence of the own-description pseudo-queries
    bm25_scale_description: float
    bm25_scale_body: float
    tau_related: float
    tau_match: float
    background_tasks: int
    pseudo_queries: int
    body_less_skills: int
    no_route_background: float  # share of background tasks left unrouted by this rule
    no_route_near_domain: float  # share of pseudo-queries unrouted with their own skill removed
    route_own: float  # share of pseudo-queries routed to their own skill
    components: tuple[str, ...] = COMPONENTS  # the components the procedure weighs
    provisional: bool = False  # carried over from the previous snapshot while this one is derived

    @property
    def related_threshold(self) -> float:
        """`tau_related` in raw confidence units for this library."""
        return self.raw(self.tau_related)

    @property
    def match_threshold(self) -> float:
        return self.raw(self.tau_match)

    def calibrated(self, confidence: float | np.ndarray) -> float | np.ndarray:
        return (confidence - self.background_anchor) / self.spread

    def raw(self, calibrated: float) -> float:
        return self.background_anchor + calibrated * self.spread

    @property
    def spread(self) -> float:
        return max(self.own_anchor - self.background_anchor, 1e-6)

    def summary(self) -> dict[str, object]:
        data: dict[str, object] = {
            k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()
        }
        data["components"] = list(self.components)
        for field_name, component in (("bm25_scale_description", "bm25_description"),
                                      ("bm25_scale_body", "bm25_body")):  # fmt: skip
            if component not in self.components:
                data[field_name] = None  # not weighed, so not measured
        data["related_threshold"] = round(self.related_threshold, 4)
        data["match_threshold"] = round(self.match_threshold, 4)
        return data


@functools.cache
def background_tasks() -> tuple[str, ...]:
    """The shipped generic tasks (comments and blank lines skipped)."""
    text = resources.files("mcp_server").joinpath("data/background_tasks.txt").read_text("utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


@dataclass(frozen=True, eq=False)
class Scoring:
    """How raw component scores become one fused score per skill, for one snapshot."""

    procedure: Procedure
    present: np.ndarray  # (5 x skills) which components each skill has
    bm25_scale: tuple[float, float]

    @classmethod
    def for_index(cls, index: Index, procedure: Procedure, bm25_scale: tuple[float, float]) -> Scoring:
        present = np.ones((len(COMPONENTS), len(index)), dtype=bool)
        has_body = np.array([index.body_terms(n) >= BODY_MIN_TERMS for n in index.names], dtype=bool)
        present[1] = present[4] = has_body
        return cls(procedure, present, bm25_scale)

    def _per_skill(self, weights: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """(component, per-skill weight / the skill's total weight) for the weighed components."""
        weights = weights[:, None] * self.present
        total = np.clip(weights.sum(axis=0), 1e-9, None)
        return [
            (c, (weights[c] / total).astype(np.float32)) for c in range(len(COMPONENTS)) if weights[c].any()
        ]

    @functools.cached_property
    def _weights(self) -> list[tuple[int, np.ndarray]]:
        return self._per_skill(self.procedure.weights)

    @functools.cached_property
    def _rank_weights(self) -> list[tuple[int, np.ndarray]] | None:
        """None when ranking weighs exactly what the confidence does (one fusion serves both)."""
        p = self.procedure
        return None if np.array_equal(p.rank_weights, p.weights) else self._per_skill(p.rank_weights)

    def fuse(self, raw: Scores, rows: np.ndarray | None = None) -> np.ndarray:
        """The confidence's score: weighted mean of the components each skill has (renormalised
        over what is present). With `rows`, `raw` holds only those skills' scores."""
        return self._mean(raw, self._weights, rows)

    @functools.cached_property
    def rank_per_skill(self) -> dict[int, np.ndarray]:
        """Each weighed component's per-skill weight in the ranking score (ranking.py folds them)."""
        return dict(self._per_skill(self.procedure.rank_weights))

    def saturate(self, component: int, values: np.ndarray) -> np.ndarray:
        """BM25 component values as s / (s + bm25_half x the library's scale); others unchanged."""
        if component not in (3, 4):
            return values
        return values / (values + np.float32(self.procedure.bm25_half * self.bm25_scale[component - 3]))

    def rank(self, raw: Scores, fused: np.ndarray | None = None) -> np.ndarray:
        """The ranking score (`fused`, the confidence's score, when no component is ranking-only)."""
        if self._rank_weights is None:
            return fused if fused is not None else self.fuse(raw)
        return self._mean(raw, self._rank_weights)

    def _mean(
        self, raw: Scores, weights: list[tuple[int, np.ndarray]], rows: np.ndarray | None = None
    ) -> np.ndarray:
        total: np.ndarray | None = None
        for c, weight in weights:
            term = self.saturate(c, getattr(raw, COMPONENTS[c])) * (weight if rows is None else weight[rows])
            total = term if total is None else total + term
        return total if total is not None else np.zeros_like(raw.dense_description)

    def confidence(self, top, margin, coverage, unknown):  # floats, or arrays of them
        """The leader's confidence: its fused score (not its ranking score), plus its lead in
        ranking score, plus its coverage of the task's terms, minus the task's unknown terms."""
        p = self.procedure
        return top + p.w_margin * margin + p.w_coverage * coverage - p.w_unknown * unknown


def coverage(index: Index, name: str, query_terms: list[str]) -> float:
    """Share of the task's terms found anywhere in the skill's text."""
    if not query_terms:
        return 0.0
    vocabulary = index.vocabulary(name)
    return sum(t in vocabulary for t in query_terms) / len(query_terms)


def _sentences(description: str) -> list[str]:
    from mcp_server.index import _SENTENCE_SPLIT

    parts = [p.strip() for p in _SENTENCE_SPLIT.split(description) if len(p.strip()) > 3]
    return parts or [description.strip()]


def _sample(names: tuple[str, ...], limit: int) -> list[int]:
    """Up to `limit` rows, chosen by a hash of the name: stable as other skills come and go."""
    order = sorted(range(len(names)), key=lambda i: hashlib.sha256(names[i].encode()).digest())
    return sorted(order[:limit])


def _bm25_scale(index: Index, owners: np.ndarray, query_terms: list[list[str]]) -> tuple[float, float]:
    """The library's own BM25 scale: median score of a pseudo-query against its own skill."""
    scales = []
    for component in ("bm25_description", "bm25_body"):
        own: list[np.ndarray] = []
        for part in _chunks(len(query_terms)):
            raw = index.score_many(
                np.zeros((len(part), 1)), [query_terms[q] for q in part], frozenset({component})
            )
            own.append(getattr(raw, component)[np.arange(len(part)), owners[part]])
        values = np.concatenate(own) if own else np.zeros(0)
        values = values[values > 0]
        scales.append(float(np.median(values)) if len(values) else 1.0)
    return scales[0], scales[1]


def _chunks(count: int) -> list[np.ndarray]:
    """Query rows in blocks of CHUNK: a (block x skills) matrix at a time bounds memory at 10k."""
    return [np.arange(start, min(start + CHUNK, count)) for start in range(0, count, CHUNK)]


def leaders(
    scoring: Scoring,
    ranked: np.ndarray,
    fused: np.ndarray,
    covered: Callable[[np.ndarray], np.ndarray],
    unknown: np.ndarray,
    exclude: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(confidence, leader row) per query, from (queries x skills) ranking and confidence scores.

    The leader is the best row by the ranking score (the row in `exclude` removed, if given); its
    confidence is built from the confidence's score of that row. `covered(leader_rows)` gives each
    query's coverage by its leader. The router's calibration and scripts/tune_procedure.py both
    decide through this function."""
    rows = np.arange(len(ranked))
    if exclude is not None:
        ranked = ranked.copy()
        ranked[rows, exclude] = -np.inf
    if ranked.shape[1] > 1:
        two = np.argpartition(-ranked, 1, axis=1)[:, :2]
        swap = ranked[rows, two[:, 0]] < ranked[rows, two[:, 1]]
        first = np.where(swap, two[:, 1], two[:, 0])
        runner_up = ranked[rows, np.where(swap, two[:, 0], two[:, 1])]
        runner_up = np.where(np.isfinite(runner_up), runner_up, 0.0)
    else:
        first, runner_up = np.zeros(len(ranked), dtype=np.int64), np.zeros(len(ranked))
    margin = ranked[rows, first] - runner_up
    conf = scoring.confidence(fused[rows, first], margin, covered(first), unknown)
    return np.asarray(conf, dtype=np.float64), first


def _route_all(
    index: Index,
    scoring: Scoring,
    vectors: np.ndarray,
    query_terms: list[list[str]],
    owners: np.ndarray | None = None,
    never: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(confidence, top row, confidence with the owner removed) per query, CHUNK queries at a time;
    rows in `never` are never the leader."""
    conf, top, near = [], [], []
    for part in _chunks(len(query_terms)):
        part_terms = [query_terms[q] for q in part]
        raw = index.score_many(vectors[part], part_terms, scoring.procedure.used)
        fused = scoring.fuse(raw)
        ranked = scoring.rank(raw, fused)
        if never is not None and len(never):
            ranked = np.array(ranked, dtype=np.float64, copy=True)
            ranked[:, never] = -np.inf
        unknown = np.array([index.unknown_share(t) for t in part_terms])

        def covered(rows: np.ndarray, part_terms: list[list[str]] = part_terms) -> np.ndarray:
            return np.array(
                [coverage(index, index.names[r], t) for r, t in zip(rows, part_terms, strict=True)]
            )

        c, t = leaders(scoring, ranked, fused, covered, unknown)
        conf.append(c)
        top.append(t)
        if owners is not None and len(index) - (len(never) if never is not None else 0) > 1:
            near.append(leaders(scoring, ranked, fused, covered, unknown, owners[part])[0])
    conf_a = np.concatenate(conf) if conf else np.zeros(0)
    return (
        conf_a,
        np.concatenate(top) if top else np.zeros(0, np.int64),
        np.concatenate(near) if near else conf_a,
    )


def calibrate(
    index: Index,
    background_vectors: np.ndarray,
    embed,
    procedure: Procedure,
    routed: np.ndarray | None = None,
) -> tuple[Scoring, LibraryCalibration]:
    """Derive the scoring and the decision rule for `index` (needs at least one skill).

    `embed(texts)` returns unit vectors for the pseudo-queries (the cached embedder's `embed`).
    `routed` marks the rows routing may pick (not `trust: blocked`, not `activation: manual`);
    the others can never be a route, so they neither lead a pseudo-query nor give one."""
    if routed is None or not routed.any():
        routed = np.ones(len(index), dtype=bool)
    never = np.flatnonzero(~routed)
    candidates = np.flatnonzero(routed)
    texts: list[str] = []
    owners: list[int] = []
    for i in candidates[_sample(tuple(index.names[r] for r in candidates), procedure.max_pseudo_skills)]:
        for sentence in _sentences(index.skills[index.names[i]].description):
            texts.append(sentence)
            owners.append(i)
    owner_rows = np.asarray(owners, dtype=np.int64)
    own_terms = [terms(t) for t in texts]
    lexical = {"bm25_description", "bm25_body"} & procedure.used
    scale = _bm25_scale(index, owner_rows, own_terms) if lexical else (1.0, 1.0)
    scoring = Scoring.for_index(index, procedure, scale)
    bg_terms = [terms(t) for t in background_tasks()]
    bg_conf, _, _ = _route_all(index, scoring, background_vectors, bg_terms, never=never)
    own_conf, own_top, near_conf = _route_all(index, scoring, embed(texts), own_terms, owner_rows, never)
    a0, a1 = float(np.median(bg_conf)), float(np.median(own_conf))
    provisional = LibraryCalibration(
        a0, a1, *scoring.bm25_scale, procedure.tau_related, procedure.tau_match,
        len(bg_conf), len(texts), int((~scoring.present[1]).sum()), 0.0, 0.0, 0.0,
        tuple(c for c in COMPONENTS if c in procedure.used),
    )  # fmt: skip
    related = provisional.related_threshold
    return scoring, LibraryCalibration(
        **{
            **asdict(provisional),
            "no_route_background": float(np.mean(bg_conf < related)),
            "no_route_near_domain": float(np.mean(near_conf < related)) if len(candidates) > 1 else 1.0,
            "route_own": float(np.mean((own_conf >= related) & (own_top == owner_rows))),
        }
    )
