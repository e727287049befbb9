"""Rank every skill for one task with one matrix-vector product over the library.

`Scoring.rank` is a per-skill weighted mean of component scores. For one task its linear dense
parts (the description and body-opening cosines, and the best-sentence cosine of a skill whose
description is one sentence, which is its description's cosine) are a single product with a
matrix folded once per snapshot: each skill's weighted sum of its vectors. What is left per
component is the best sentence of multi-sentence descriptions and BM25. The decision's fused
score and the raw components are then computed for the few candidates only.

The best sentence is bounded before it is computed. A skill's sentence vectors lie within a
radius r of their centroid c, so for a unit query q its best sentence cosine is at most q.c + r
(Cauchy-Schwarz). The centroid is folded into the matrix too, so one product gives every skill an
upper bound of its ranking score; only the skills whose bound reaches the score of the best
`want` have their sentences compared with the task (about 20 of 10,000 on the synthetic library
of `ingot bench latency`, instead of 20,000 sentence rows). The others cannot be among the best
`want` and keep their bound.
Guarantee: on every row that can be among the best `want` allowed rows (and every row when
`want` is None), the same values as `Scoring.rank` and `Scoring.fuse` on `Index.score` (float32
rounding aside); on the other allowed rows an upper bound below those rows' scores; on
disallowed rows an upper bound only (never read).
tests/mcp_server/test_ranking.py holds them together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mcp_server.calibration import COMPONENTS, Scoring
from mcp_server.index import Index, Scores

_DESCRIPTION, _BODY, _SENTENCE = 0, 1, 2
_LEXICAL = (3, 4)
_SLACK = 1e-5  # bounds within this of the cut-off are checked too (the router rounds to 1e-6)
GATHER_SHARE = 0.25  # checking more than this share of the sentence skills: compare them all


@dataclass(frozen=True, eq=False)
class Sentences:
    """The multi-sentence skills' sentence vectors, grouped per skill, with their bounds."""

    rows: np.ndarray  # (m) index rows of the skills, ascending
    bounds: np.ndarray  # (m + 1) skill j's vectors are vectors[bounds[j]:bounds[j + 1]]
    vectors: np.ndarray  # (sentences x dim)
    weight: np.ndarray  # (m) the best sentence's weight in each skill's ranking score
    centroids: np.ndarray  # (m x dim) mean of each skill's sentence vectors
    slack: np.ndarray  # (m) weight x radius: how far the folded centroid term may fall short

    @classmethod
    def build(cls, index: Index, weight: np.ndarray) -> Sentences:
        rows, bounds, vectors = index.sentence_vectors()
        centroids, radius = index.sentence_spread
        w = weight[rows].astype(np.float32)
        # A hair over the exact radius, so float32 rounding can never make the bound too low.
        slack = w * (radius * np.float32(1 + 1e-5) + np.float32(1e-6))
        return cls(rows, bounds, vectors, w, centroids, slack)

    def best(self, query: np.ndarray, which: np.ndarray | None = None) -> np.ndarray:
        """Best sentence cosine of the skills at positions `which` (every skill when None)."""
        if which is None:
            return np.maximum.reduceat(self.vectors @ query, self.bounds[:-1])
        if not len(which):
            return np.zeros(0, dtype=np.float32)
        sizes = self.bounds[which + 1] - self.bounds[which]
        offsets = np.r_[0, np.cumsum(sizes)[:-1]]
        picked = np.repeat(self.bounds[which] - offsets, sizes) + np.arange(sizes.sum())
        return np.maximum.reduceat(self.vectors[picked] @ query, offsets)


@dataclass(frozen=True, eq=False)
class Ranker:
    """One snapshot's ranking, precomputed for single queries."""

    index: Index
    scoring: Scoring
    folded: np.ndarray  # (skills x dim): per skill, its linear dense parts' weights x vectors
    sentences: Sentences | None  # None when the ranking does not weigh the best sentence
    gather_share: float = GATHER_SHARE

    @classmethod
    def build(cls, index: Index, scoring: Scoring, gather_share: float = GATHER_SHARE) -> Ranker:
        weights = scoring.rank_per_skill
        description, body, single = index.dense_vectors()
        per_description = weights.get(_DESCRIPTION, 0.0) + weights.get(_SENTENCE, 0.0) * single
        folded = np.asarray(per_description, dtype=np.float32)[:, None] * description
        if _BODY in weights:
            folded += weights[_BODY][:, None] * body
        sentences = None
        if _SENTENCE in weights:
            sentences = Sentences.build(index, weights[_SENTENCE])
            folded[sentences.rows] += sentences.weight[:, None] * sentences.centroids
        return cls(index, scoring, np.ascontiguousarray(folded, dtype=np.float32), sentences, gather_share)

    def rank(
        self,
        vector: np.ndarray,
        query_terms: list[str],
        allowed: np.ndarray | None = None,
        want: int | None = None,
    ) -> tuple[np.ndarray, Computed]:
        """Every skill's ranking score, and what was computed on the way (for `components`).

        With `want`, only the rows that can be among the best `want` of the `allowed` rows (every
        row when None) are exact; the other allowed rows hold an upper bound below those rows'
        scores, disallowed rows an upper bound."""
        weights = self.scoring.rank_per_skill
        ranking = self.folded @ vector
        lexical = {}
        for c in _LEXICAL:
            if c in weights:
                lexical[c] = self.index.lexical(COMPONENTS[c], query_terms)
                ranking += weights[c] * self.scoring.saturate(c, lexical[c])
        sentences = _NONE
        if self.sentences is not None and len(self.sentences.rows):
            sentences = self._best_sentences(vector, ranking, allowed, want)
        return ranking, Computed(sentences, lexical)

    def _best_sentences(
        self, vector: np.ndarray, ranking: np.ndarray, allowed: np.ndarray | None, want: int | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Turn the multi-sentence skills' folded centroid terms into their best sentence, for the
        skills that can be among the best `want`; the others get their upper bound. In place."""
        s = self.sentences
        assert s is not None
        ranking[s.rows] += s.slack  # every multi-sentence skill's score is now an upper bound
        check: np.ndarray | None = None  # positions in s.rows; None = all
        if want is not None:
            pool = np.flatnonzero(allowed) if allowed is not None else np.arange(len(ranking))
            if len(pool) > want > 0:
                position = np.full(len(ranking), -1, dtype=np.int64)
                position[s.rows] = np.arange(len(s.rows))
                top = pool[np.argpartition(-ranking[pool], want - 1)[:want]]
                exact, several = ranking[top], position[top] >= 0
                exact[several] += self._correction(vector, position[top][several])[0]
                floor = exact.min()  # the best `want` allowed can score no lower
                reach = ranking[s.rows] >= floor - _SLACK
                if allowed is not None:
                    reach &= allowed[s.rows]
                check = np.flatnonzero(reach)
                if len(check) > self.gather_share * len(s.rows):
                    check = None
        correction, best = self._correction(vector, check)
        ranking[s.rows if check is None else s.rows[check]] += correction
        return (s.rows if check is None else s.rows[check]), best

    def _correction(self, vector: np.ndarray, which: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(exact score minus bound, best sentence cosine) of the skills at positions `which`
        (all when None): w x (best - centroid cosine) - slack, never positive."""
        s = self.sentences
        assert s is not None
        best = s.best(vector, which)
        picked = slice(None) if which is None else which
        return s.weight[picked] * (best - s.centroids[picked] @ vector) - s.slack[picked], best

    def components(self, vector: np.ndarray, rows: list[int], computed: Computed) -> Scores:
        """The raw component scores of `rows` only (the candidates), in that order; components
        neither stage weighs are zeros, as `Index.score` leaves them."""
        used = self.scoring.procedure.used
        picked = np.asarray(rows, dtype=np.int64)
        description, body, single = self.index.dense_vectors()
        zeros = np.zeros(len(picked), dtype=np.float32)
        desc = description[picked] @ vector
        sentence = zeros
        if "dense_sentence" in used:
            several, best = computed.sentences
            sentence = desc.copy()
            hit = ~single[picked]
            sentence[hit] = best[np.searchsorted(several, picked[hit])]
        lexical = computed.lexical
        return Scores(
            dense_description=desc if "dense_description" in used else zeros,
            dense_body=body[picked] @ vector if "dense_body" in used else zeros,
            dense_sentence=sentence,
            bm25_description=lexical[3][picked] if 3 in lexical else zeros,
            bm25_body=lexical[4][picked] if 4 in lexical else zeros,
        )


@dataclass(frozen=True)
class Computed:
    """What `Ranker.rank` computed besides the ranking: reused for the candidates' components."""

    sentences: tuple[np.ndarray, np.ndarray]  # (rows, best sentence cosine) of the checked skills
    lexical: dict[int, np.ndarray]  # raw BM25 per component index, every skill


_NONE = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
