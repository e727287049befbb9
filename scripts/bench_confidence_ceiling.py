"""What labels could buy the router's confidence: a classifier fitted on a library's own cases; prints JSON.

    python scripts/bench_confidence_ceiling.py \\
        --library corpus=../shared/corpus/skills:../shared/corpus/dev_cases.jsonl \\
        --library tools=../shared/corpus-tools/skills:../shared/corpus-tools/cases.jsonl

The router decides from one confidence built label-free (calibration.py). This asks how far a
confidence built from the same evidence goes when labels are allowed: for the leader the router's
ranking picks, 17 features (each component's value and its gap to the runner-up, the fused score,
the ranking gap, coverage, unknown terms, the runner-up's and the library's mean description
cosine, and the leader's z-score among them), then an L2 logistic regression fitted with the
labels (a right leader against a null request), and the lowest threshold that leaves 92% of the
null requests unrouted, fitted on the same labels. Reported per library: top-1 scored on the
cases it was fitted on (optimistic), 5-fold cross-validated over three shuffles (only the
classifier is cross-validated; the threshold is fitted on the labels, as the tuner's `ceiling`
does), the same with every pairwise product of the features (a fit that can bend), and the
classifier fitted on the other library (its threshold still this library's). These are estimates
for two kinds of model, not a proof that nothing could do better; top-1 can never exceed the
ranking's own top-1 (its leader is right), whatever the confidence.
`ranking` asks the same of the ranking: each answerable case's best RERANK_DEPTH skills by the
router's ranking, re-ordered by a logistic regression on their components (5-fold over cases),
reported as top-1 and recall@3 next to the router's own ranking.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingot.bench.routing import threshold_for_no_route  # noqa: E402
from mcp_server.calibration import COMPONENTS, Procedure, Scoring  # noqa: E402
from mcp_server.embedding import load_embedder  # noqa: E402
from scripts import tune_procedure as tuner  # noqa: E402

NO_ROUTE_GOAL = tuner.NO_ROUTE_GOAL
FOLDS, SHUFFLES = 5, (0, 1, 2)
QUADRATIC_C = 0.01  # 170 features on 170-829 cases: a strong penalty
RERANK_DEPTH = 20


def _scoring(lib: tuner.Library, procedure: Procedure) -> Scoring:
    """The router's scoring for the library as it is (bodies counted where they are evidence)."""
    present = np.ones((len(COMPONENTS), len(lib.names)), dtype=bool)
    present[1] = present[4] = lib.has_body
    return Scoring(procedure, present, lib.bm25_scale)


def features(lib: tuner.Library, procedure: Procedure) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(cases x features) for each case's ranking leader, whether that leader is right, and names."""
    scoring = _scoring(lib, procedure)
    qs = lib.cases
    fused = scoring.fuse(qs.raw)
    ranked = scoring.rank(qs.raw, fused)
    rows = np.arange(len(fused))
    order = np.argsort(-ranked, axis=1, kind="stable")
    top, second = order[:, 0], order[:, 1] if ranked.shape[1] > 1 else order[:, 0]
    columns: dict[str, np.ndarray] = {}
    for c, name in enumerate(COMPONENTS):
        values = scoring.saturate(c, getattr(qs.raw, name))
        columns[name] = values[rows, top]
        columns[f"{name}_gap"] = values[rows, top] - values[rows, second]
    dense = qs.raw.dense_description
    columns["fused"] = fused[rows, top]
    columns["ranking_gap"] = ranked[rows, top] - ranked[rows, second]
    columns["coverage"] = qs.coverage[rows, top]
    columns["unknown_terms"] = qs.unknown
    columns["runner_up_dense"] = dense[rows, second]
    columns["mean_dense"] = dense.mean(axis=1)
    columns["dense_z"] = (dense[rows, top] - dense.mean(axis=1)) / np.clip(dense.std(axis=1), 1e-9, None)
    return np.column_stack(list(columns.values())), lib.right[rows, top], list(columns)


def fit(x: np.ndarray, y: np.ndarray, c: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """L2 logistic regression on standardised features: (mean, scale, weights with intercept last)."""
    mean, scale = x.mean(axis=0), np.clip(x.std(axis=0), 1e-9, None)
    z = np.column_stack([(x - mean) / scale, np.ones(len(x))])
    sign = np.where(y, 1.0, -1.0)

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        margin = sign * (z @ w)
        value = c * np.logaddexp(0.0, -margin).sum() + 0.5 * w[:-1] @ w[:-1]
        grad = -c * z.T @ (sign / (1.0 + np.exp(margin)))
        grad[:-1] += w[:-1]
        return float(value), grad

    result = minimize(loss, np.zeros(z.shape[1]), jac=True, method="L-BFGS-B")
    return mean, scale, result.x


def decision(model: tuple[np.ndarray, np.ndarray, np.ndarray], x: np.ndarray) -> np.ndarray:
    mean, scale, w = model
    return ((x - mean) / scale) @ w[:-1] + w[-1]


def top1_at_goal(score: np.ndarray, right: np.ndarray, positive: np.ndarray) -> float:
    """top-1 with the lowest threshold that leaves NO_ROUTE_GOAL of the null requests unrouted
    (a case is routed when its score is above the threshold)."""
    threshold = threshold_for_no_route(score[~positive], NO_ROUTE_GOAL)
    return float(np.mean((right & (score > threshold))[positive]))


def folds(labels: np.ndarray, seed: int) -> np.ndarray:
    """A fold number per item, stratified by label."""
    out = np.zeros(len(labels), dtype=np.int64)
    rng = np.random.default_rng(seed)
    for value in (False, True):
        members = rng.permutation(np.flatnonzero(labels == value))
        out[members] = np.arange(len(members)) % FOLDS
    return out


def held_out_scores(
    x: np.ndarray, label: np.ndarray, train: np.ndarray, fold: np.ndarray, c: float
) -> np.ndarray:
    """Every row's score from a model fitted on the `train` rows of the other folds only."""
    score = np.empty(len(x))
    for k in range(FOLDS):
        fitted_on = train & (fold != k)
        score[fold == k] = decision(fit(x[fitted_on], label[fitted_on], c), x[fold == k])
    return score


def quadratic(x: np.ndarray) -> np.ndarray:
    """The features, standardised, with every pairwise product: a fit that can bend."""
    z = (x - x.mean(axis=0)) / np.clip(x.std(axis=0), 1e-9, None)
    left, right = np.triu_indices(z.shape[1])
    return np.column_stack([z, z[:, left] * z[:, right]])


def cross_validated(
    x: np.ndarray, right: np.ndarray, positive: np.ndarray, seed: int, c: float = 1.0
) -> float:
    """Fitted on the cases that say what a confidence must separate (a right leader, a null request);
    every case is scored by a model that did not see it. Only the classifier is cross-validated:
    the threshold is then fitted on the labels, as `top1_at_goal` does."""
    label = positive & right
    score = held_out_scores(x, label, label | ~positive, folds(label, seed), c)
    return top1_at_goal(score, right, positive)


Labelled = tuple[np.ndarray, np.ndarray, np.ndarray]  # features, leader is right, has an expected skill


def transferred(source: Labelled, target: Labelled) -> float:
    """top-1 on `target` of the classifier fitted on `source` (the threshold fitted on `target`)."""
    x, right, positive = source
    label = positive & right
    model = fit(x[label | ~positive], label[label | ~positive])
    return top1_at_goal(decision(model, target[0]), target[1], target[2])


def reranked(lib: tuner.Library, procedure: Procedure, seed: int = 0) -> dict[str, float]:
    """top-1 and recall@3 of the router's ranking, and of its best RERANK_DEPTH re-ordered by a
    classifier fitted (5-fold over the answerable cases) on their components."""
    scoring = _scoring(lib, procedure)
    qs = lib.cases
    ranked = scoring.rank(qs.raw, scoring.fuse(qs.raw))
    answerable = np.flatnonzero(lib.positive)
    order = np.argsort(-ranked, axis=1, kind="stable")[answerable, :RERANK_DEPTH]
    q = np.repeat(answerable, order.shape[1])  # one row per (case, candidate)
    rows = order.ravel()
    parts = [scoring.saturate(c, getattr(qs.raw, name))[q, rows] for c, name in enumerate(COMPONENTS)]
    leader = np.repeat(ranked[answerable, order[:, 0]], order.shape[1])
    x = np.column_stack(
        [*parts, ranked[q, rows], ranked[q, rows] - leader, qs.coverage[q, rows], scoring.present[1, rows]]
    )
    label = lib.right[q, rows]
    case_fold = np.repeat(folds(np.zeros(len(answerable), dtype=bool), seed), order.shape[1])
    score = held_out_scores(x, label, np.ones(len(x), dtype=bool), case_fold, 1.0)
    best = np.take_along_axis(order, np.argsort(-score.reshape(order.shape), axis=1, kind="stable"), axis=1)
    right = lib.right[answerable[:, None], best[:, :3]]
    shipped = lib.right[answerable[:, None], order[:, :3]]
    return {
        "ranking_top1": round(float(np.mean(shipped[:, 0])), 4),
        "ranking_recall_at_3": round(float(np.mean(shipped.any(axis=1))), 4),
        "reranked_top1": round(float(np.mean(right[:, 0])), 4),
        "reranked_recall_at_3": round(float(np.mean(right.any(axis=1))), 4),
    }


def measure(libraries: list[tuner.Library], procedure: Procedure) -> dict:
    data = {lib.name: features(lib, procedure) for lib in libraries}
    report: dict[str, dict] = {}
    for lib in libraries:
        x, right, _ = data[lib.name]
        positive = lib.positive
        shipped, _ = tuner.calibrated(lib, procedure, "as_is")
        entry = {
            "cases": int(len(x)),
            "shipped_top1_at_goal": round(top1_at_goal(shipped, right, positive), 4),
            "in_sample": round(transferred((x, right, positive), (x, right, positive)), 4),
            "cross_validated": [round(cross_validated(x, right, positive, s), 4) for s in SHUFFLES],
            "cross_validated_quadratic": [
                round(cross_validated(quadratic(x), right, positive, s, QUADRATIC_C), 4) for s in SHUFFLES
            ],
        }
        for other in libraries:
            if other is not lib:
                xo, ro, _ = data[other.name]
                entry[f"fitted_on_{other.name}"] = round(
                    transferred((xo, ro, other.positive), (x, right, positive)), 4
                )
        entry["ranking"] = reranked(lib, procedure)
        report[lib.name] = entry
    return {
        "features": data[libraries[0].name][2],
        "no_route_goal": NO_ROUTE_GOAL,
        "libraries": report,
    }


def main() -> None:
    from ingot.settings import load_settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", action="append", required=True, help="NAME=SKILLS_DIR:CASES_FILE")
    args = parser.parse_args()
    settings = load_settings()
    cache = Path(tempfile.gettempdir()) / "ingot-bench" / "cache" / "vectors.sqlite"
    embedder = load_embedder(settings.embed_model_dir, settings.embed_model_sha256, cache, threads=2)
    specs = [tuner._parse(spec) for spec in args.library]
    libraries = [tuner.load_library(n, [s], [c], embedder, Procedure()) for n, s, c in specs]
    inputs = {  # what the numbers were computed from, so they can be recomputed
        "embedding_model": embedder.model_digest,
        "procedure": asdict(Procedure()),
        "libraries": {
            n: {"skills": str(s), "served": len(lib.names), "cases": str(c),
                "cases_sha256": hashlib.sha256(c.read_bytes()).hexdigest()}
            for (n, s, c), lib in zip(specs, libraries, strict=True)
        },
    }  # fmt: skip
    print(json.dumps({"inputs": inputs, **measure(libraries, Procedure())}, indent=2))


if __name__ == "__main__":
    main()
