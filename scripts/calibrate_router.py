"""Calibrate the router's fusion weights and thresholds on labelled routing cases; print JSON.

    python scripts/calibrate_router.py --skills ../shared/corpus/skills \
        --cases ../shared/corpus/dev_cases.jsonl

Stage 1 grid-searches fusion weights for top-1 + recall@3 of the unthresholded ranking and
keeps the best STAGE1_KEEP. Stage 2 picks, for each of those, the confidence formula (margin
and coverage weights) and two thresholds: `related_threshold` is the lowest confidence that
leaves at least --no-route-target of the null cases unrouted; `match_threshold` is the lowest
confidence above which routed cases are right at least --match-precision of the time. Each
choice is also scored by 5-fold cross-validation (thresholds fitted on 4/5, measured on the
held-out 1/5), so the report shows what to expect on unseen cases, not just the fit. Paste the
result into `Calibration` in mcp_server/router.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingot.settings import load_settings  # noqa: E402
from mcp_server.embedding import load_embedder  # noqa: E402
from mcp_server.index import Index, terms  # noqa: E402
from mcp_server.registry import Registry  # noqa: E402

WEIGHT_GRID = (0.0, 0.1, 0.2, 0.3, 0.4)
# Both dense views (description, body opening) always count, as the router's design promises;
# the sentence view and the two BM25 fields may be switched off by the search.
REQUIRED = (0, 1)
HALF_POINTS = (4.0, 6.0, 8.0)
MARGIN_GRID = (0.0, 0.25, 0.5, 1.0)
COVERAGE_GRID = (0.0, 0.1, 0.2, 0.3)
UNKNOWN_GRID = (0.0, 0.1, 0.2, 0.3)
STAGE1_KEEP = 25  # best weightings carried into the decision search


def load_cases(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def component_matrix(index: Index, embedder, cases: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cases x 5 components x skills raw scores, cases x skills coverage, cases unknown share)."""
    queries = embedder.embed([c["task"] for c in cases])
    vocab = [index.vocabulary(n) for n in index.names]
    library = frozenset().union(*vocab)
    comps, cover, unknown = [], [], []
    for case, q in zip(cases, queries, strict=True):
        t = terms(case["task"])
        s = index.score(q, t)
        comps.append([s.dense_description, s.dense_body, s.dense_sentence, s.bm25_description, s.bm25_body])
        cover.append([sum(w in v for w in t) / len(t) if t else 0.0 for v in vocab])
        unknown.append(sum(w not in library for w in t) / len(t) if t else 1.0)
    return np.asarray(comps, dtype=np.float64), np.asarray(cover), np.asarray(unknown)


def fuse(comps: np.ndarray, w: tuple[float, ...], half: float) -> np.ndarray:
    d, b, s, ld, lb = (comps[:, i, :] for i in range(5))
    return w[0] * d + w[1] * b + w[2] * s + w[3] * ld / (ld + half) + w[4] * lb / (lb + half)


def ranking_metrics(fused: np.ndarray, names: list[str], cases: list[dict], rows) -> tuple[float, float]:
    order = np.argsort(-fused, axis=1, kind="stable")
    top1 = r3 = 0
    pos = [i for i in rows if cases[i]["expected"]]
    for i in pos:
        ok = {cases[i]["expected"], *(cases[i].get("acceptable") or [])}
        top1 += names[order[i, 0]] in ok
        r3 += cases[i]["expected"] in {names[j] for j in order[i, :3]}
    return top1 / len(pos), r3 / len(pos)


def confidence(fused, cover, unknown, wm: float, wc: float, wu: float) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-fused, axis=1, kind="stable")
    rows = np.arange(len(fused))
    top, second = fused[rows, order[:, 0]], fused[rows, order[:, 1]]
    return top + wm * (top - second) + wc * cover[rows, order[:, 0]] - wu * unknown, order[:, 0]


def thresholds(conf, correct, null, rows, target, precision) -> tuple[float, float]:
    rows = np.asarray(rows)
    related = max(np.unique(conf[rows]))
    for t in np.unique(conf[rows]):
        if np.mean(conf[rows][null[rows]] < t) >= target:
            related = t
            break
    match = related
    for t in np.unique(conf[rows]):
        above = rows[conf[rows] >= t]
        if t >= related and len(above) and np.mean(correct[above]) >= precision:
            match = t
            break
    return float(related), float(match)


def decision_metrics(conf, correct, null, rows, related) -> tuple[float, float]:
    rows = np.asarray(rows)
    routed = conf[rows] >= related
    pos = ~null[rows]
    return (float(np.sum(correct[rows] & routed) / pos.sum()), float(np.mean(~routed[null[rows]])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skills", type=Path, action="append", required=True)
    parser.add_argument("--cases", type=Path, required=True)
    parser.add_argument("--no-route-target", type=float, default=0.91)
    parser.add_argument("--match-precision", type=float, default=0.95)
    args = parser.parse_args()
    settings = load_settings()
    registry = Registry(tuple(args.skills))
    registry.reload()
    embedder = load_embedder(
        settings.embed_model_dir, settings.embed_model_sha256, settings.vector_cache_path, threads=2
    )
    index = Index(registry.skills(), embedder)
    names = list(index.names)
    cases = load_cases(args.cases)
    comps, cover, unknown = component_matrix(index, embedder, cases)
    everyone = range(len(cases))

    stage1 = []
    for w in itertools.product(WEIGHT_GRID, repeat=5):
        if any(w[i] == 0 for i in REQUIRED):
            continue
        for half in HALF_POINTS:
            t1, r3 = ranking_metrics(fuse(comps, w, half), names, cases, everyone)
            stage1.append((t1 + r3, t1, r3, w, half))
    stage1.sort(key=lambda r: (-r[0], -min(r[3])))

    null = np.array([c["expected"] is None for c in cases])
    folds = np.array_split(np.random.default_rng(0).permutation(len(cases)), 5)
    stage2 = []
    for _, t1, r3, weights, half in stage1[:STAGE1_KEEP]:
        fused = fuse(comps, weights, half)
        for wm, wc, wu in itertools.product(MARGIN_GRID, COVERAGE_GRID, UNKNOWN_GRID):
            conf, top = confidence(fused, cover, unknown, wm, wc, wu)
            correct = np.array(
                [
                    not null[i]
                    and names[top[i]] in {cases[i]["expected"], *(cases[i].get("acceptable") or [])}
                    for i in everyone
                ]
            )
            related, match = thresholds(
                conf, correct, null, everyone, args.no_route_target, args.match_precision
            )
            fit = decision_metrics(conf, correct, null, everyone, related)
            cv = []
            for k in range(5):
                train = np.concatenate([folds[j] for j in range(5) if j != k])
                rel_k, _ = thresholds(conf, correct, null, train, args.no_route_target, args.match_precision)
                cv.append(decision_metrics(conf, correct, null, folds[k], rel_k))
            cv_top1, cv_noroute = (float(np.mean(x)) for x in zip(*cv, strict=True))
            stage2.append(
                {
                    **dict(
                        zip(
                            [
                                "w_dense_description",
                                "w_dense_body",
                                "w_dense_sentence",
                                "w_bm25_description",
                                "w_bm25_body",
                            ],
                            weights,
                            strict=True,
                        )
                    ),
                    "bm25_half_point": half,
                    "w_margin": wm,
                    "w_coverage": wc,
                    "w_unknown": wu,
                    "related_threshold": round(related, 4),
                    "match_threshold": round(match, 4),
                    "ranking_top1": round(t1, 4),
                    "ranking_recall_at_3": round(r3, 4),
                    "fit_top1": round(fit[0], 4),
                    "fit_no_route": round(fit[1], 4),
                    "cv_top1": round(cv_top1, 4),
                    "cv_no_route": round(cv_noroute, 4),
                }
            )
    stage2.sort(
        key=lambda r: (
            -(r["cv_top1"] + r["cv_no_route"] + r["ranking_recall_at_3"]),
            r["w_margin"] + r["w_coverage"] + r["w_unknown"],
        )
    )
    print(
        json.dumps(
            {"skills": len(names), "cases": len(cases), "chosen": stage2[0], "alternatives": stage2[1:6]},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
