"""Rank every skill for one task with one matrix-vector product over the library.

`Scoring.rank` is a per-skill weighted mean of component scores. For one task its linear dense
parts (the description and body-opening cosines, and the best-sentence cosine of a skill whose
description is one sentence, which is its description's cosine) are a single product with a
matrix folded once per snapshot: each skill's weighted sum of its vectors. What is left per
component is the best sentence of multi-sentence descriptions and BM25. The decision's fused
score and the raw components are then computed for the few candidates only.
Guarantee: the same values as `Scoring.rank` and `Scoring.fuse` on `Index.score` (float32
rounding aside); tests/mcp_server/test_ranking.py holds them together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mcp_server.calibration import COMPONENTS, Scoring
from mcp_server.index import Index, Scores

_DESCRIPTION, _BODY, _SENTENCE = 0, 1, 2
_LEXICAL = (3, 4)


@dataclass(frozen=True, eq=False)
class Ranker:
    """One snapshot's ranking, precomputed for single queries."""

    index: Index
    scoring: Scoring
    folded: np.ndarray  # (skills x dim): per skill, its linear dense parts' weights x vectors

    @classmethod
    def build(cls, index: Index, scoring: Scoring) -> Ranker:
        weights = scoring.rank_per_skill
        description, body, single = index.dense_vectors()
        per_description = weights.get(_DESCRIPTION, 0.0) + weights.get(_SENTENCE, 0.0) * single
        folded = np.asarray(per_description, dtype=np.float32)[:, None] * description
        if _BODY in weights:
            folded += weights[_BODY][:, None] * body
        return cls(index, scoring, np.ascontiguousarray(folded, dtype=np.float32))

    def rank(self, vector: np.ndarray, query_terms: list[str]) -> tuple[np.ndarray, Computed]:
        """Every skill's ranking score, and what was computed on the way (for `components`)."""
        weights = self.scoring.rank_per_skill
        ranking = self.folded @ vector
        sentences = _NONE
        if _SENTENCE in weights:
            sentences = self.index.best_sentences(vector)
            ranking[sentences[0]] += weights[_SENTENCE][sentences[0]] * sentences[1]
        lexical = {}
        for c in _LEXICAL:
            if c in weights:
                lexical[c] = self.index.lexical(COMPONENTS[c], query_terms)
                ranking += weights[c] * self.scoring.saturate(c, lexical[c])
        return ranking, Computed(sentences, lexical)

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

    sentences: tuple[np.ndarray, np.ndarray]  # (rows, best sentence cosine) of multi-sentence skills
    lexical: dict[int, np.ndarray]  # raw BM25 per component index, every skill


_NONE = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
