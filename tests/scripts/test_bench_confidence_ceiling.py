"""scripts/bench_confidence_ceiling.py bounds what labels could buy the confidence: its classifier
must really fit, its threshold must leave the goal's share of null requests unrouted, and a
cross-validated score must come from a model that never saw the case."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mcp_server.calibration import Procedure
from scripts.bench_confidence_ceiling import (
    FOLDS,
    cross_validated,
    decision,
    features,
    fit,
    folds,
    measure,
    top1_at_goal,
)
from scripts.tune_procedure import load_library
from tests.mcp_server.test_calibration import BODYLESS, BODYRICH, OFF_LIBRARY, REQUESTS


def test_the_classifier_separates_what_is_separable_and_weighs_the_feature_that_matters():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(400, 3))
    y = x[:, 1] > 0.2  # only the second feature decides
    model = fit(x, y)
    assert np.mean((decision(model, x) > 0) == y) > 0.97
    weights = np.abs(model[2][:-1])
    assert weights.argmax() == 1 and weights[1] > 5 * max(weights[0], weights[2])


def test_top1_counts_only_right_leaders_above_the_threshold_that_leaves_the_goal_unrouted():
    positive = np.array([True] * 4 + [False] * 25)
    right = np.array([True, True, True, False] + [False] * 25)
    null_scores = np.arange(25, dtype=float)  # the 92% quantile ("higher") of 0..24 is 23
    score = np.r_[[30.0, 23.5, 10.0, 40.0], null_scores]
    assert top1_at_goal(score, right, positive) == pytest.approx(2 / 4)  # 40 is a wrong leader
    assert np.mean(score[~positive] <= 23) >= 0.92


def test_folds_are_stratified_and_a_cross_validated_score_never_comes_from_its_own_fit():
    labels = np.array([True] * 23 + [False] * 52)
    fold = folds(labels, seed=0)
    for k in range(FOLDS):
        assert abs((fold[labels] == k).sum() - 23 / FOLDS) <= 1
        assert abs((fold[~labels] == k).sum() - 52 / FOLDS) <= 1
    # Pure noise: an in-sample fit memorises some of it, held-out folds cannot.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 40))
    positive = rng.random(300) < 0.5
    right = positive.copy()
    in_sample = top1_at_goal(decision(fit(x, positive), x), right, positive)
    held_out = cross_validated(x, right, positive, seed=0)
    assert held_out < in_sample - 0.1


@pytest.fixture(scope="module")
def libraries(embedder, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ceiling-cases")
    loaded = []
    for root in (BODYLESS, BODYRICH):
        path = folder / f"{root.name}.jsonl"
        rows = [{"task": t, "expected": e} for t, e in REQUESTS[root].items()]
        rows += [{"task": t, "expected": None} for t in OFF_LIBRARY]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        loaded.append(load_library(root.name, [root], [path], embedder, Procedure()))
    return loaded


def test_each_library_is_bounded_in_sample_cross_validated_and_from_the_other(libraries):
    report = measure(libraries, Procedure())
    for lib in libraries:
        x, right, names = features(lib, Procedure())
        assert x.shape == (len(lib.positive), len(names)) and np.isfinite(x).all()
        entry = report["libraries"][lib.name]
        assert entry["cases"] == len(lib.positive)
        assert len(entry["cross_validated"]) == 3
        other = next(o for o in libraries if o is not lib)
        assert f"fitted_on_{other.name}" in entry
        ranking = entry["ranking"]
        assert ranking["ranking_top1"] == pytest.approx(float(np.mean(right[lib.positive])), abs=1e-4)
        # No confidence puts a right skill first more often than the ranking does.
        for value in (entry["in_sample"], entry["shipped_top1_at_goal"], *entry["cross_validated"]):
            assert 0.0 <= value <= ranking["ranking_top1"]
        assert 0.0 < ranking["reranked_top1"] <= ranking["reranked_recall_at_3"] <= 1.0
