"""The index: batched scoring gives exactly what one-query scoring gives."""

from __future__ import annotations

import numpy as np
import pytest

from mcp_server.index import Index, description_text, sentence_texts, terms
from mcp_server.registry import Registry
from tests.conftest import BUNDLED_SKILLS, write_skill

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


def test_each_skills_sentence_score_is_its_best_sentence_whether_it_has_one_or_several(embedder, tmp_path):
    write_skill(tmp_path, "query-plans", "Read EXPLAIN output and suggest the index a slow query needs.")
    write_skill(tmp_path, "release-notes", "Draft release notes. Group merged PRs by kind. Credit authors.")
    write_skill(tmp_path, "sql-review", "Review a migration. Flag locks on big tables; suggest online DDL.")
    registry = Registry((tmp_path,))
    registry.reload()
    skills = registry.skills()
    index = Index(skills, embedder)
    single = [n for n in index.names if sentence_texts(skills[n]) == [description_text(skills[n])]]
    assert single == ["query-plans"]  # both kinds are checked
    vectors = embedder.embed(TASKS)
    many = index.score_many(vectors, [terms(t) for t in TASKS], frozenset({"dense_sentence"}))
    for i, name in enumerate(index.names):
        best = (vectors @ embedder.embed(sentence_texts(skills[name])).T).max(axis=1)
        assert np.allclose(many.dense_sentence[:, i], best, atol=1e-5), name
        one = index.score(vectors[0], terms(TASKS[0]), frozenset({"dense_sentence"}))
        assert one.dense_sentence[i] == pytest.approx(best[0], abs=1e-5), name
