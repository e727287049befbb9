"""The index: batched scoring gives exactly what one-query scoring gives."""

from __future__ import annotations

import numpy as np

from mcp_server.index import Index, terms
from mcp_server.registry import Registry
from tests.conftest import BUNDLED_SKILLS

TASKS = [
    "EXPLAIN ANALYZE shows a sequential scan on orders; which index should I add?",
    "release notes release notes for 2.4",  # repeated terms count twice, as in get_scores
    "zzz-unknown-word only",
    "",
]


def test_score_many_equals_score_for_each_query(embedder):
    registry = Registry((BUNDLED_SKILLS,))
    registry.reload()
    index = Index(registry.skills(), embedder)
    vectors = embedder.embed(TASKS)
    many = index.score_many(vectors, [terms(t) for t in TASKS])
    for row, task in enumerate(TASKS):
        one = index.score(vectors[row], terms(task))
        for field in ("dense_description", "dense_body", "dense_sentence", "bm25_description", "bm25_body"):
            assert np.allclose(getattr(many, field)[row], getattr(one, field), atol=1e-5), (field, task)
    assert many.bm25_description[0].max() > 0


def test_score_many_leaves_unwanted_components_at_zero(embedder):
    registry = Registry((BUNDLED_SKILLS,))
    registry.reload()
    index = Index(registry.skills(), embedder)
    only = index.score_many(embedder.embed(TASKS[:1]), [terms(TASKS[0])], frozenset({"bm25_description"}))
    assert only.bm25_description.max() > 0 and not only.dense_description.any() and not only.bm25_body.any()
