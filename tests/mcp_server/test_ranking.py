"""The per-query fast path ranks and scores exactly as `Scoring` does on `Index.score`: the
calibration and the tuner use the latter, so a drift here would serve a rule nobody measured."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mcp_server.calibration import COMPONENTS, Procedure, Scoring
from mcp_server.index import Index, terms
from mcp_server.ranking import Ranker
from mcp_server.registry import Registry
from tests.conftest import write_skill
from tests.mcp_server.test_calibration import BODYLESS, BODYRICH, OFF_LIBRARY, REQUESTS

SHIPPED = Procedure()
PROCEDURES = {
    "shipped": SHIPPED,
    "ranking-only dense body and description": replace(
        SHIPPED, rank_dense_body=0.2, rank_dense_description=0.1
    ),
    "sentence in the decision": replace(SHIPPED, w_dense_sentence=0.3, rank_dense_sentence=0.0),
    "no sentence, no lexical": replace(
        SHIPPED, w_bm25_description=0.0, rank_dense_sentence=0.0, rank_bm25_body=0.0
    ),
}


@pytest.fixture(scope="module")
def index(embedder, tmp_path_factory):
    extra = tmp_path_factory.mktemp("one-sentence")
    write_skill(extra, "timezone-convert", "Convert a meeting time between time zones.", body="# Convert\n")
    write_skill(extra, "csv-dedupe", "Remove duplicate rows from a CSV file by chosen columns.")
    registry = Registry((BODYLESS, BODYRICH, extra))
    registry.reload()
    return Index(registry.skills(), embedder)


@pytest.mark.parametrize("name", list(PROCEDURES))
def test_the_fast_path_ranks_and_scores_candidates_as_scoring_does_on_every_component(embedder, index, name):
    procedure = PROCEDURES[name]
    scoring = Scoring.for_index(index, procedure, (1.7, 2.3))
    ranker = Ranker.build(index, scoring)
    _, _, single = index.dense_vectors()
    assert single.any() and not single.all()  # both kinds of description are ranked
    tasks = [*REQUESTS[BODYLESS], *REQUESTS[BODYRICH], *OFF_LIBRARY]
    for task, vector in zip(tasks, embedder.embed(tasks), strict=True):
        raw = index.score(vector, terms(task), procedure.used)
        ranking, computed = ranker.rank(vector, terms(task))
        assert np.allclose(ranking, scoring.rank(raw), atol=1e-5), task
        rows = np.argsort(-ranking)[:5]
        some = ranker.components(vector, list(rows), computed)
        for component in COMPONENTS:
            assert np.allclose(getattr(some, component), getattr(raw, component)[rows], atol=1e-5), component
        assert np.allclose(scoring.fuse(some, rows), scoring.fuse(raw)[rows], atol=1e-5), task


@pytest.mark.parametrize("want", [1, 3, 5])
def test_bounded_sentences_leave_the_best_rows_exact_and_bound_the_others(embedder, index, want):
    """Only skills whose upper bound reaches the best `want` compare their sentences; the best
    `want` allowed rows and their scores are what the full computation gives, and every other
    row holds an upper bound of its score. The test fails if the bound is ever too low."""
    scoring = Scoring.for_index(index, SHIPPED, (1.7, 2.3))
    ranker = Ranker.build(index, scoring, gather_share=1.0)  # never fall back to all: a small library
    multi = set(index.sentence_vectors()[0].tolist())
    tasks = [*REQUESTS[BODYLESS], *REQUESTS[BODYRICH], *OFF_LIBRARY]
    rng = np.random.default_rng(7)
    skipped = 0
    for task, vector in zip(tasks, embedder.embed(tasks), strict=True):
        full, _ = ranker.rank(vector, terms(task))
        for allowed in (np.ones(len(index), dtype=bool), rng.random(len(index)) < 0.6):
            bounded, computed = ranker.rank(vector, terms(task), allowed, want)
            assert np.all(bounded >= full - 1e-6), task  # never below the true score
            rows = np.flatnonzero(allowed)
            best = rows[np.argsort(-np.round(full[rows], 6), kind="stable")[:want]]
            got = rows[np.argsort(-np.round(bounded[rows], 6), kind="stable")[:want]]
            assert set(got) == set(best), task
            assert np.allclose(bounded[best], full[best], atol=1e-5), task
            checked = set(computed.sentences[0].tolist())
            assert {r for r in best if r in multi} <= checked  # their components can be read
            skipped += len(multi - checked)
    assert skipped > 0  # the bound did spare some skills their sentences


def test_negative_weights_are_refused_and_want_zero_ranks_everything_exactly(embedder, index):
    """The centroid bound (and a weighted mean of what a skill has) needs weights >= 0; asking for
    the best 0 rows leaves every row exact rather than failing."""
    with pytest.raises(ValueError, match="rank_dense_sentence"):
        Procedure(rank_dense_sentence=-0.1)
    scoring = Scoring.for_index(index, SHIPPED, (1.7, 2.3))
    ranker = Ranker.build(index, scoring)
    task = OFF_LIBRARY[0]
    vector = embedder.embed([task])[0]
    full, _ = ranker.rank(vector, terms(task))
    none_wanted, _ = ranker.rank(vector, terms(task), np.ones(len(index), dtype=bool), 0)
    assert np.allclose(none_wanted, full, atol=1e-6)
