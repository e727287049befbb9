"""What labels could buy the router's confidence: a classifier fitted on a library's own cases; prints JSON.

    python scripts/bench_confidence_ceiling.py \\
        --library corpus=../shared/corpus/skills:../shared/corpus/dev_cases.jsonl \\
        --library tools=../shared/corpus-tools/skills:../shared/corpus-tools/cases.jsonl

The router decides from one confidence built label-free (calibration.py). This asks how far any
confidence built from the same evidence could go: for the leader the router's ranking picks, 17
features (each component's value and its gap to the runner-up, the fused score, the ranking gap,
coverage, unknown terms, the runner-up's and the library's mean description cosine, and the
leader's z-score among them), then an L2 logistic regression fitted with the labels (a right
leader against a null request), its threshold fitted on the same labels to leave 92% of the null
requests unrouted. Reported per library: top-1 in sample (an optimistic bound), 5-fold
cross-validated (three shuffles), and fitted on the other library (leave-one-library-out). The
router never sees labels; this bounds what a label-free rule on these signals can reach, and
top-1 can never exceed the ranking's own top-1 (its leader is right), whatever the confidence.
`ranking` bounds the ranking the same way: each answerable case's best RERANK_DEPTH skills by the
router's ranking, re-ordered by a logistic regression on their components (5-fold over cases),
reported as top-1 and recall@3 next to the router's own ranking.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.calibration import COMPONENTS, Procedure, Scoring  # noqa: E402
from mcp_server.embedding import load_embedder  # noqa: E402
from scripts import tune_procedure as tuner  # noqa: E402

NO_ROUTE_GOAL = tuner.NO_ROUTE_GOAL
FOLDS, SHUFFLES = 5, (0, 1, 2)
RERANK_DEPTH = 20


def features(lib: tuner.Library, procedure: Procedure) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(cases x features) for each case's ranking leader, whether that leader is right, and names."""
    present = np.ones((len(COMPONENTS), len(lib.names)), dtype=bool)
    present[1] = present[4] = lib.has_body
    scoring = Scoring(procedure, present, lib.bm25_scale)
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
    """top-1 with the threshold that leaves NO_ROUTE_GOAL of the null requests unrouted."""
    threshold = float(np.quantile(score[~positive], NO_ROUTE_GOAL, method="higher"))
    return float(np.mean((right & (score > threshold))[positive]))


def folds(labels: np.ndarray, seed: int) -> np.ndarray:
    """A fold number per item, stratified by label."""
    out = np.zeros(len(labels), dtype=np.int64)
    rng = np.random.default_rng(seed)
    for value in (False, True):
        members = rng.permutation(np.flatnonzero(labels == value))
        out[members] = np.arange(len(members)) % FOLDS
    return out


def cross_validated(x: np.ndarray, right: np.ndarray, positive: np.ndarray, seed: int) -> float:
    """Fitted on the cases that say what a confidence must separate (a right leader, a null request);
    every case is scored by a model that did not see it."""
    used = (positive & right) | ~positive
    label = positive & right
    fold = folds(label, seed)
    score = np.empty(len(x))
    for k in range(FOLDS):
        train = used & (fold != k)
        held = fold == k
        score[held] = decision(fit(x[train], label[train]), x[held])
    return top1_at_goal(score, right, positive)


def reranked(lib: tuner.Library, procedure: Procedure, seed: int = 0) -> dict[str, float]:
    """top-1 and recall@3 of the router's ranking, and of its best RERANK_DEPTH re-ordered by a
    classifier fitted (5-fold over the answerable cases) on their components."""
    present = np.ones((len(COMPONENTS), len(lib.names)), dtype=bool)
    present[1] = present[4] = lib.has_body
    scoring = Scoring(procedure, present, lib.bm25_scale)
    qs = lib.cases
    ranked = scoring.rank(qs.raw, scoring.fuse(qs.raw))
    order = np.argsort(-ranked, axis=1, kind="stable")[:, :RERANK_DEPTH]
    parts = [scoring.saturate(c, getattr(qs.raw, name)) for c, name in enumerate(COMPONENTS)]

    def candidates(q: int) -> np.ndarray:
        rows = order[q]
        return np.column_stack(
            [*(p[q, rows] for p in parts), ranked[q, rows], ranked[q, rows] - ranked[q, rows[0]],
             qs.coverage[q, rows], present[1, rows].astype(float)]
        )  # fmt: skip

    answerable = np.flatnonzero(lib.positive)
    fold = np.random.default_rng(seed).permutation(len(answerable)) % FOLDS
    top1, recall3 = [], []
    for k in range(FOLDS):
        train = answerable[fold != k]
        x = np.vstack([candidates(q) for q in train])
        y = np.concatenate([lib.right[q, order[q]] for q in train])
        model = fit(x, y)
        for q in answerable[fold == k]:
            best = order[q][np.argsort(-decision(model, candidates(q)), kind="stable")]
            top1.append(lib.right[q, best[0]])
            recall3.append(lib.right[q, best[:3]].any())
    return {
        "ranking_top1": round(float(np.mean([lib.right[q, order[q, 0]] for q in answerable])), 4),
        "ranking_recall_at_3": round(
            float(np.mean([lib.right[q, order[q, :3]].any() for q in answerable])), 4
        ),
        "reranked_top1": round(float(np.mean(top1)), 4),
        "reranked_recall_at_3": round(float(np.mean(recall3)), 4),
    }


def measure(libraries: list[tuner.Library], procedure: Procedure) -> dict:
    data = {lib.name: features(lib, procedure) for lib in libraries}
    report: dict[str, dict] = {}
    for lib in libraries:
        x, right, _ = data[lib.name]
        positive = lib.positive
        used, label = (positive & right) | ~positive, positive & right
        shipped, _ = tuner.calibrated(lib, procedure, "as_is")
        entry = {
            "cases": int(len(x)),
            "shipped_top1_at_goal": round(top1_at_goal(shipped, right, positive), 4),
            "in_sample": round(top1_at_goal(decision(fit(x[used], label[used]), x), right, positive), 4),
            "cross_validated": [round(cross_validated(x, right, positive, s), 4) for s in SHUFFLES],
        }
        for other in libraries:
            if other is lib:
                continue
            xo, ro, _ = data[other.name]
            uo = (other.positive & ro) | ~other.positive
            model = fit(xo[uo], (other.positive & ro)[uo])
            entry[f"fitted_on_{other.name}"] = round(top1_at_goal(decision(model, x), right, positive), 4)
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
    print(json.dumps(measure(libraries, Procedure()), indent=2))


if __name__ == "__main__":
    main()
