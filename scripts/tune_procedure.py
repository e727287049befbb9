"""Tune the calibration procedure's hyper-parameters leave-one-library-out; print JSON.

    python scripts/tune_procedure.py \\
        --library corpus=../shared/corpus/skills:../shared/corpus/dev_cases.jsonl \\
        --library tools=../shared/corpus-tools/skills:../shared/corpus-tools/cases.jsonl

The procedure (mcp_server/calibration.py) has a few hyper-parameters: fusion weights, the BM25
saturation point relative to the library's own BM25 scale, the confidence's margin, coverage and
unknown-term weights, and the calibrated threshold tau. They must not be tuned to one library.
This script samples configurations, derives every library's anchors label-free exactly as the
router does (shipped background tasks; sampled own-description pseudo-queries), and scores each
configuration on each library's labelled cases: J = top1 + no-route + recall@3 - 3 x shortfall of
no-route below 0.92, averaged over the library as it is, with all its bodies ignored and with
every other skill's body ignored (a pick must also serve body-less and mixed libraries). Then,
for every library, it picks on the others and reports on it (leave-one-library-out), and prints
the pick over all libraries next to what ships in
`Procedure`). Labels are used only here, to choose the procedure, never by the router.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingot.bench.routing import load_cases  # noqa: E402
from ingot.settings import load_settings  # noqa: E402
from mcp_server.calibration import (  # noqa: E402
    BODY_MIN_TERMS,
    Procedure,
    _bm25_scale,
    _sample,
    _sentences,
    background_tasks,
)
from mcp_server.embedding import load_embedder  # noqa: E402
from mcp_server.index import Index, terms  # noqa: E402
from mcp_server.registry import Registry  # noqa: E402

WEIGHTS = (0.0, 0.1, 0.2, 0.3)
MARGINS, COVERAGES, UNKNOWNS, HALVES = (
    (0.0, 0.25, 0.5),
    (0.0, 0.1, 0.2, 0.3),
    (0.0, 0.1, 0.2),
    (0.5, 1.0, 2.0),
)
TAUS = tuple(round(t, 3) for t in np.arange(0.25, 0.61, 0.025))
NO_ROUTE_GOAL = 0.92


@dataclass
class QuerySet:
    components: np.ndarray  # queries x 5 x skills, raw
    coverage: np.ndarray  # queries x skills (full text)
    coverage_description: np.ndarray  # queries x skills (name + description only)
    unknown: np.ndarray  # queries


@dataclass
class Library:
    name: str
    present: np.ndarray  # 5 x skills
    bm25_scale: tuple[float, float]
    cases: QuerySet
    background: QuerySet
    own: QuerySet
    right: np.ndarray  # cases x skills: a correct answer
    positive: np.ndarray  # cases: has an expected skill
    expected: np.ndarray  # cases: row of the expected skill, -1 if none or not served


def _query_set(index: Index, vectors: np.ndarray, texts: list[str]) -> QuerySet:
    query_terms = [terms(t) for t in texts]
    raw = index.score_many(vectors, query_terms)
    stack = np.stack(
        [raw.dense_description, raw.dense_body, raw.dense_sentence, raw.bm25_description, raw.bm25_body],
        axis=1,
    ).astype(np.float64)
    full = [index.vocabulary(n) for n in index.names]
    short = [frozenset(terms(f"{n.replace('-', ' ')} {index.skills[n].description}")) for n in index.names]
    library_vocabulary = index.library_vocabulary()

    def share(t: list[str], vocabulary: frozenset[str]) -> float:
        return sum(w in vocabulary for w in t) / len(t) if t else 0.0

    return QuerySet(
        stack,
        np.array([[share(t, v) for v in full] for t in query_terms]),
        np.array([[share(t, v) for v in short] for t in query_terms]),
        np.array([1.0 - share(t, library_vocabulary) if t else 1.0 for t in query_terms]),
    )


def load_library(spec: str, embedder, procedure: Procedure) -> Library:
    name, _, paths = spec.partition("=")
    skills_dir, _, cases_path = paths.rpartition(":")
    registry = Registry((Path(skills_dir),))
    registry.reload()
    index = Index(registry.skills(), embedder)
    rows = _sample(index.names, procedure.max_pseudo_skills)
    own_texts, owners = [], []
    for i in rows:
        for sentence in _sentences(index.skills[index.names[i]].description):
            own_texts.append(sentence)
            owners.append(i)
    cases = load_cases(Path(cases_path))
    case_set = _query_set(index, embedder.embed([c.task for c in cases]), [c.task for c in cases])
    own_set = _query_set(index, embedder.embed(own_texts), own_texts)
    own_raw = index.score_many(embedder.embed(own_texts), [terms(t) for t in own_texts])
    present = np.ones((5, len(index)), dtype=bool)
    present[1] = present[4] = [index.body_terms(n) >= BODY_MIN_TERMS for n in index.names]
    position = {n: i for i, n in enumerate(index.names)}
    right = np.zeros((len(cases), len(index)), dtype=bool)
    for k, case in enumerate(cases):
        for skill in case.right:
            if skill in position:
                right[k, position[skill]] = True
    return Library(
        name,
        present,
        _bm25_scale(own_raw, np.asarray(owners)),
        case_set,
        _query_set(index, embedder.embed(list(background_tasks())), list(background_tasks())),
        own_set,
        right,
        np.array([c.expected is not None for c in cases]),
        np.array([position.get(c.expected, -1) if c.expected else -1 for c in cases]),
    )


VARIANTS = ("as_is", "bodies_ignored", "half_bodies_ignored")


def _confidence(qs: QuerySet, lib: Library, config: dict, variant: str) -> tuple[np.ndarray, np.ndarray]:
    present = lib.present.copy()
    ignored = np.zeros(present.shape[1], dtype=bool)
    if variant == "bodies_ignored":
        ignored[:] = True
    elif variant == "half_bodies_ignored":  # a mixed library: every other skill without its body
        ignored[::2] = True
    present[1] &= ~ignored
    present[4] &= ~ignored
    c = qs.components
    parts = [c[:, 0], c[:, 1], c[:, 2]]
    for k, scale in zip((3, 4), lib.bm25_scale, strict=True):
        parts.append(c[:, k] / (c[:, k] + config["half"] * scale))
    weights = np.asarray(config["w"])[:, None] * present
    fused = sum(p * w for p, w in zip(parts, weights, strict=True)) / np.clip(weights.sum(0), 1e-9, None)
    top3 = np.argpartition(-fused, 2, axis=1)[:, :3]
    order = np.take_along_axis(top3, np.argsort(-np.take_along_axis(fused, top3, 1), 1), 1)
    r = np.arange(len(fused))
    first, second = fused[r, order[:, 0]], fused[r, order[:, 1]]
    top = order[:, 0]
    cover = np.where(ignored[top], qs.coverage_description[r, top], qs.coverage[r, top])
    conf = first + config["wm"] * (first - second) + config["wc"] * cover - config["wu"] * qs.unknown
    return order, conf


def evaluate(lib: Library, config: dict, variant: str) -> dict[float, dict[str, float]]:
    order, conf = _confidence(lib.cases, lib, config, variant)
    _, bg = _confidence(lib.background, lib, config, variant)
    _, own = _confidence(lib.own, lib, config, variant)
    a0, a1 = np.median(bg), np.median(own)
    r = np.arange(len(order))
    top_right = lib.right[r, order[:, 0]]
    pos = lib.positive
    recall3 = float(np.mean((order[pos] == lib.expected[pos][:, None]).any(axis=1)))
    out = {}
    for tau in TAUS:
        routed = conf >= a0 + tau * (a1 - a0)
        out[tau] = {
            "top1": float(np.mean((top_right & routed)[pos])),
            "no_route": float(np.mean(~routed[~pos])),
            "recall_at_3": recall3,
        }
    return out


def threshold_for_goal(lib: Library, config: dict, variant: str) -> dict[str, float]:
    """The threshold that leaves NO_ROUTE_GOAL of the null cases unrouted, raw and calibrated:
    if calibration works, the calibrated one barely moves across libraries while the raw one does."""
    _, conf = _confidence(lib.cases, lib, config, variant)
    _, bg = _confidence(lib.background, lib, config, variant)
    _, own = _confidence(lib.own, lib, config, variant)
    a0, a1 = np.median(bg), np.median(own)
    raw = float(np.quantile(conf[~lib.positive], NO_ROUTE_GOAL))
    return {"raw": round(raw, 4), "calibrated": round((raw - a0) / (a1 - a0), 4)}


def objective(m: dict[str, float]) -> float:
    return m["top1"] + m["no_route"] + m["recall_at_3"] - 3 * max(0.0, NO_ROUTE_GOAL - m["no_route"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", action="append", required=True, help="NAME=SKILLS_DIR:CASES_FILE")
    parser.add_argument("--samples", type=int, default=600)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    if len(args.library) < 2:
        parser.error("give at least two libraries: one to pick on, one to measure on")
    settings = load_settings()
    embedder = load_embedder(
        settings.embed_model_dir, settings.embed_model_sha256, settings.vector_cache_path, threads=2
    )
    libraries = [load_library(spec, embedder, Procedure()) for spec in args.library]
    rng = np.random.default_rng(args.seed)
    shipped = Procedure()
    configs = [
        {"w": tuple(shipped.weights.tolist()), "wm": shipped.w_margin, "wc": shipped.w_coverage,
         "wu": shipped.w_unknown, "half": shipped.bm25_half}
    ]  # fmt: skip
    while len(configs) < args.samples:
        w = tuple(float(x) for x in rng.choice(WEIGHTS, 5))
        if w[0] + w[1] + w[2] == 0:
            continue
        configs.append(
            {"w": w, "wm": float(rng.choice(MARGINS)), "wc": float(rng.choice(COVERAGES)),
             "wu": float(rng.choice(UNKNOWNS)), "half": float(rng.choice(HALVES))}
        )  # fmt: skip
    table = [{lib.name: {v: evaluate(lib, c, v) for v in VARIANTS} for lib in libraries} for c in configs]

    def family_score(row: dict, names: list[str], tau: float) -> float:
        return float(np.mean([objective(row[n][v][tau]) for n in names for v in VARIANTS]))

    def pick(names: list[str]) -> tuple[int, float]:
        return max(
            ((i, tau) for i in range(len(configs)) for tau in TAUS),
            key=lambda it: family_score(table[it[0]], names, it[1]),
        )

    def show(i: int, tau: float) -> dict:
        return {
            lib.name: {
                variant: {k: round(v, 4) for k, v in table[i][lib.name][variant][tau].items()}
                for variant in VARIANTS
            }
            for lib in libraries
        }

    names = [lib.name for lib in libraries]
    report = {"configurations": len(configs), "leave_one_library_out": []}
    for held_out in names:
        i, tau = pick([n for n in names if n != held_out])
        report["leave_one_library_out"].append(
            {"picked_on": [n for n in names if n != held_out], "measured_on": held_out,
             "procedure": {**configs[i], "tau": tau}, "results": show(i, tau)}
        )  # fmt: skip
    i, tau = pick(names)
    report["picked_on_all"] = {"procedure": {**configs[i], "tau": tau}, "results": show(i, tau)}
    report["shipped_threshold_for_92_no_route"] = {
        lib.name: {v: threshold_for_goal(lib, configs[0], v) for v in VARIANTS} for lib in libraries
    }
    nearest_tau = min(TAUS, key=lambda t: abs(t - shipped.tau_related))
    report["shipped"] = {"procedure": {**configs[0], "tau": nearest_tau}, "results": show(0, nearest_tau)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
