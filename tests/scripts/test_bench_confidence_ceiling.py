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
    held_out_scores,
    measure,
    quadratic,
    top1_at_goal,
    transferred,
)
from scripts.tune_procedure import calibrated, load_library
from tests.mcp_server.test_calibration import BODYLESS, BODYRICH, OFF_LIBRARY, REQUESTS


def test_the_classifier_separates_what_is_separable_and_weighs_the_feature_that_matters():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(400, 3))
    y = x[:, 1] > 0.2  # only the second feature decides
    model = fit(x, y)
    assert np.mean((decision(model, x) > 0) == y) > 0.97
    weights = np.abs(model[2][:-1])
    assert weights.argmax() == 1 and weights[1] > 5 * max(weights[0], weights[2])


def test_the_fit_is_the_minimum_of_the_penalised_loss_with_a_free_intercept():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(300, 2)) * [1.0, 50.0] + [0.0, 400.0]  # scales and offsets far from 1 and 0
    y = rng.random(300) < 1 / (1 + np.exp(-(2 * x[:, 0] + 3)))  # mostly true: a large intercept
    mean, scale, w = fit(x, y, c=0.5)
    z = np.column_stack([(x - mean) / scale, np.ones(len(x))])

    def objective(v: np.ndarray) -> float:  # what fit() must minimise: the intercept unpenalised
        return 0.5 * np.logaddexp(0.0, -np.where(y, 1.0, -1.0) * (z @ v)).sum() + 0.5 * v[:-1] @ v[:-1]

    for i in range(len(w)):
        for step in (1e-3, -1e-3):
            moved = w.copy()
            moved[i] += step
            assert objective(moved) > objective(w)
    # Standardised inside: rescaling a feature changes no decision.
    assert decision(fit(x * [1.0, 1e-3], y), x * [1.0, 1e-3]) == pytest.approx(
        decision(fit(x, y), x), abs=1e-4
    )


@pytest.mark.parametrize(
    ("nulls", "leaders", "expected"),
    [
        (25, [22.5, 21.5], 0.5),  # 23 of 25 unrouted is 0.92: the threshold is 22, not 23
        (10, [9.5, 8.5], 0.5),  # 9 of 10 is 0.90: all 10 must stay unrouted, the threshold is 9
    ],
)
def test_the_threshold_is_the_lowest_that_leaves_the_goal_unrouted(nulls, leaders, expected):
    positive = np.array([True] * (len(leaders) + 1) + [False] * nulls)
    right = np.array([True] * len(leaders) + [False] + [False] * nulls)
    score = np.r_[leaders, [99.0], np.arange(nulls, dtype=float)]  # 99 is a wrong leader
    assert top1_at_goal(score, right, positive) == pytest.approx(expected * len(leaders) / (len(leaders) + 1))


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
    # The helper the re-ranker shares: rows outside `train` are scored, never fitted on.
    train = np.arange(300) % 2 == 0
    poisoned = positive.copy()
    poisoned[~train] = ~positive[~train]  # labels a leaking fit would learn from
    score = held_out_scores(x, poisoned, train, folds(poisoned, 1), 1.0)
    clean = held_out_scores(x, positive, train, folds(poisoned, 1), 1.0)
    assert score == pytest.approx(clean)


def test_a_classifier_fitted_on_another_library_is_scored_on_this_one():
    rng = np.random.default_rng(6)
    positive = rng.random(400) < 0.6
    x = np.column_stack([np.where(positive, 2.0, -2.0) + rng.normal(size=400), rng.normal(size=400)])
    right = np.ones(400, dtype=bool)
    this = (x, right, positive)  # here a high first feature means a right leader...
    other = (-x, right, positive)  # ...there a low one
    assert transferred(this, this) > 0.8
    assert transferred(other, this) < 0.1  # learnt the wrong way round for this library


def test_the_quadratic_features_are_the_standardised_ones_and_their_pairwise_products():
    x = np.random.default_rng(2).normal(size=(50, 3)) * 7 + 2
    q = quadratic(x)
    z = (x - x.mean(axis=0)) / x.std(axis=0)
    assert q.shape == (50, 3 + 6)
    assert q[:, :3] == pytest.approx(z)
    assert q[:, 3] == pytest.approx(z[:, 0] ** 2) and q[:, 4] == pytest.approx(z[:, 0] * z[:, 1])


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
        # The features are the router's own leader's: its dense description cosine, its rightness.
        _, three = calibrated(lib, Procedure(), "as_is")
        rows = np.arange(len(right))
        dense = names.index("dense_description")
        assert x[:, dense] == pytest.approx(lib.cases.raw.dense_description[rows, three[:, 0]], abs=1e-6)
        assert (right == lib.right[rows, three[:, 0]]).all()
        entry = report["libraries"][lib.name]
        assert entry["cases"] == len(lib.positive)
        assert len(entry["cross_validated"]) == len(entry["cross_validated_quadratic"]) == 3
        other = next(o for o in libraries if o is not lib)
        xo, ro, _ = features(other, Procedure())
        used = (other.positive & ro) | ~other.positive
        model = fit(xo[used], (other.positive & ro)[used])
        assert entry[f"fitted_on_{other.name}"] == round(
            top1_at_goal(decision(model, x), right, lib.positive), 4
        )
        ranking = entry["ranking"]
        assert ranking["ranking_top1"] == pytest.approx(float(np.mean(right[lib.positive])), abs=1e-4)
        # No confidence puts a right skill first more often than the ranking does.
        values = (entry["in_sample"], entry["shipped_top1_at_goal"], *entry["cross_validated"])
        for value in (*values, *entry["cross_validated_quadratic"]):
            assert 0.0 <= value <= ranking["ranking_top1"]
        assert 0.0 < ranking["reranked_top1"] <= ranking["reranked_recall_at_3"] <= 1.0
