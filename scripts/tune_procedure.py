"""Pick the routing procedure's hyper-parameters on labelled libraries, leave-one-library-out; print JSON.

    python scripts/tune_procedure.py --mixed \\
        --library corpus=../shared/corpus/skills:../shared/corpus/dev_cases.jsonl \\
        --library tools=../shared/corpus-tools/skills:../shared/corpus-tools/cases.jsonl

The procedure (`Procedure` in mcp_server/calibration.py) has a few hyper-parameters: the
confidence's component weights, the ranking-only weights, the BM25 saturation point relative to
the library's own BM25 scale, the confidence's margin, coverage and unknown-term weights, and the
calibrated threshold tau. They must not be tuned to one library. Every library's anchors are
derived label-free exactly as the router derives them, and every decision goes through the
router's own `Scoring` and `leaders` (so the two cannot drift apart); labels are used only here,
to choose the procedure, never by the router.

Each configuration is scored on each library's cases with J = top1 + no-route + recall@3 (a right
skill, expected or acceptable, among the first three) - 3 x shortfall of no-route below 0.92,
averaged over the library as it is, with all its bodies ignored
and with every other body ignored (a pick must also serve body-less and mixed libraries). Search:
random confidence configurations (ranking = confidence), then, for the best few of each pick, every
combination of ranking-only weights on the body and sentence components. For every library it
picks on the others and reports on it (leave-one-library-out), then picks on all of them.
Each leave-one-library-out pick is also measured without its ranking-only weights: what the
second stage buys on a library it was not picked on.
`--mixed` also serves all the libraries together as one (each one's skills are distractors for the
others' cases): measured for every reported pick, never picked on. `--near-domain` also serves each
library with a third of its skills held out (chosen by a hash of the name), so the cases that ask
for a held-out skill become requests the library cannot serve although it has that skill's
neighbours: the near-domain "nothing fits" of a one-vendor library. Measured for every reported
pick; `--pick-near-domain` also picks on it. `ceiling` is what labels could
buy the shipped procedure: its ranking's top-1 with no threshold, and its top-1 with the threshold
fitted on the library's own cases to leave 92% of their null tasks unrouted.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingot.bench.routing import load_cases, threshold_for_no_route  # noqa: E402
from mcp_server.calibration import (  # noqa: E402
    BODY_MIN_TERMS,
    COMPONENTS,
    Procedure,
    Scoring,
    _bm25_scale,
    _sample,
    _sentences,
    background_tasks,
    leaders,
)
from mcp_server.embedding import CachedEmbedder  # noqa: E402
from mcp_server.index import Index, Scores, humanise, terms  # noqa: E402
from mcp_server.registry import Registry  # noqa: E402

WEIGHTS = (0.0, 0.1, 0.2, 0.3)
MARGINS, COVERAGES, UNKNOWNS, HALVES = (
    (0.0, 0.25, 0.5),
    (0.0, 0.1, 0.2, 0.3),
    (0.0, 0.1, 0.2),
    (0.5, 1.0, 2.0),
)
RANK_ONLY = ("dense_body", "dense_sentence", "bm25_body")  # searched ranking-only weights
RANK_STEPS = (0.0, 0.1, 0.2)
TAUS = tuple(round(float(t), 3) for t in np.arange(0.25, 0.61, 0.025))
VARIANTS = ("as_is", "bodies_ignored", "half_bodies_ignored")
NO_ROUTE_GOAL = 0.92


@dataclass
class QuerySet:
    """One set of queries scored against every skill once; configurations only re-weigh it."""

    raw: Scores  # (queries x skills) per component, every component computed
    coverage: np.ndarray  # (queries x skills) share of the query's terms in the skill's text
    coverage_description: np.ndarray  # ... in its name and description only (body ignored)
    unknown: np.ndarray  # (queries) share of the query's terms nowhere in the library


@dataclass
class Library:
    name: str
    names: tuple[str, ...]  # skill rows, as the router's index orders them
    has_body: np.ndarray  # (skills) the body counts as evidence (BODY_MIN_TERMS)
    bm25_scale: tuple[float, float]
    cases: QuerySet
    background: QuerySet
    own: QuerySet
    right: np.ndarray  # (cases x skills) a correct answer
    positive: np.ndarray  # (cases) has an expected skill
    expected: np.ndarray  # (cases) row of the expected skill, -1 if none or not served


def _query_set(index: Index, embedder: CachedEmbedder, texts: list[str]) -> QuerySet:
    query_terms = [terms(t) for t in texts]
    raw = index.score_many(embedder.embed(texts), query_terms)
    full = [index.vocabulary(n) for n in index.names]
    short = [frozenset(terms(f"{humanise(n)} {index.skills[n].description}")) for n in index.names]

    def shares(vocabularies: list[frozenset[str]]) -> np.ndarray:
        return np.array(
            [[sum(w in v for w in t) / len(t) if t else 0.0 for v in vocabularies] for t in query_terms]
        )

    return QuerySet(raw, shares(full), shares(short), np.array([index.unknown_share(t) for t in query_terms]))


def load_library(
    name: str,
    roots: list[Path],
    case_files: list[Path],
    embedder: CachedEmbedder,
    procedure: Procedure,
    hold_out: frozenset[str] = frozenset(),
) -> Library:
    """Score a library's cases, background tasks and own pseudo-queries (as `calibrate` samples them).

    Skills named in `hold_out` are left out of the library; a case whose every right skill is
    held out becomes a null case (the library cannot serve it)."""
    registry = Registry(tuple(roots))
    registry.reload()
    index = Index({n: s for n, s in registry.skills().items() if n not in hold_out}, embedder)
    own_texts, owners = [], []
    for i in _sample(index.names, procedure.max_pseudo_skills):
        for sentence in _sentences(index.skills[index.names[i]].description):
            own_texts.append(sentence)
            owners.append(i)
    cases = [case for path in case_files for case in load_cases(path)]
    position = {n: i for i, n in enumerate(index.names)}
    right = np.zeros((len(cases), len(index)), dtype=bool)
    for k, case in enumerate(cases):
        for skill in case.right:
            if skill in position:
                right[k, position[skill]] = True
    return Library(
        name,
        index.names,
        np.array([index.body_terms(n) >= BODY_MIN_TERMS for n in index.names]),
        _bm25_scale(index, np.asarray(owners), [terms(t) for t in own_texts]),
        _query_set(index, embedder, [c.task for c in cases]),
        _query_set(index, embedder, list(background_tasks())),
        _query_set(index, embedder, own_texts),
        right,
        np.array([c.expected is not None and not c.right <= hold_out for c in cases]),
        np.array([position.get(c.expected, -1) if c.expected else -1 for c in cases]),
    )


def a_third(roots: list[Path]) -> frozenset[str]:
    """A third of the skills under `roots` (rounded down), chosen by a hash of the name: stable and
    label-free, like the router's own pseudo-query sample."""
    registry = Registry(tuple(roots))
    registry.reload()
    names = sorted(registry.skills(), key=lambda n: hashlib.sha256(n.encode()).digest())
    return frozenset(names[: len(names) // 3])


def _ignored(lib: Library, variant: str) -> np.ndarray:
    ignored = np.zeros(len(lib.has_body), dtype=bool)
    if variant == "bodies_ignored":
        ignored[:] = True
    elif variant == "half_bodies_ignored":  # a mixed library: every other skill without its body
        ignored[::2] = True
    return ignored


def _decide(qs: QuerySet, scoring: Scoring, ignored: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(confidence, leader, ranking score) per query, through the router's own `leaders`."""
    fused = scoring.fuse(qs.raw)
    ranked = scoring.rank(qs.raw, fused)
    rows = np.arange(len(fused))

    def covered(top: np.ndarray) -> np.ndarray:
        return np.where(ignored[top], qs.coverage_description[rows, top], qs.coverage[rows, top])

    conf, top = leaders(scoring, ranked, fused, covered, qs.unknown)
    return conf, top, ranked


def calibrated(lib: Library, procedure: Procedure, variant: str) -> tuple[np.ndarray, np.ndarray]:
    """Each case's calibrated confidence and the ranking's top three rows, as the router would give."""
    ignored = _ignored(lib, variant)
    present = np.ones((len(COMPONENTS), len(ignored)), dtype=bool)
    present[1] = present[4] = lib.has_body & ~ignored
    scoring = Scoring(procedure, present, lib.bm25_scale)
    conf, top, ranked = _decide(lib.cases, scoring, ignored)
    a0 = float(np.median(_decide(lib.background, scoring, ignored)[0]))
    a1 = float(np.median(_decide(lib.own, scoring, ignored)[0]))
    three = np.argsort(-ranked, axis=1, kind="stable")[:, :3]
    three[:, 0] = top
    return (conf - a0) / max(a1 - a0, 1e-6), three


def evaluate(
    lib: Library, procedure: Procedure, variant: str, taus: tuple[float, ...] = TAUS
) -> dict[float, dict[str, float]]:
    cal, three = calibrated(lib, procedure, variant)
    pos = lib.positive
    top_right = lib.right[np.arange(len(cal)), three[:, 0]]
    recall3 = float(np.mean(lib.right[np.arange(len(cal))[:, None], three].any(axis=1)[pos]))
    out = {}
    for tau in taus:
        routed = cal >= tau
        out[tau] = {
            "top1": float(np.mean((top_right & routed)[pos])),
            "no_route": float(np.mean(~routed[~pos])),
            "recall_at_3": recall3,
        }
    return out


def ceiling(lib: Library, procedure: Procedure, variant: str) -> dict[str, float]:
    """What labels could buy: the ranking's top-1 (no threshold), and top-1 with the related
    threshold fitted on this library's own cases to leave NO_ROUTE_GOAL of its null tasks unrouted."""
    cal, three = calibrated(lib, procedure, variant)
    pos = lib.positive
    top_right = lib.right[np.arange(len(cal)), three[:, 0]]
    threshold = threshold_for_no_route(cal[~pos], NO_ROUTE_GOAL)
    routed = cal > threshold
    return {
        "ranking_top1": round(float(np.mean(top_right[pos])), 4),
        "oracle_top1": round(float(np.mean((top_right & routed)[pos])), 4),
        "oracle_no_route": round(float(np.mean(~routed[~pos])), 4),
        "calibrated_threshold": round(threshold, 4),
    }


def objective(m: dict[str, float]) -> float:
    return m["top1"] + m["no_route"] + m["recall_at_3"] - 3 * max(0.0, NO_ROUTE_GOAL - m["no_route"])


def _random_confidence(rng: np.random.Generator, base: Procedure) -> Procedure:
    while True:
        w = [float(x) for x in rng.choice(WEIGHTS, len(COMPONENTS))]
        if w[0] + w[2] > 0:  # a dense component every skill has
            break
    return replace(
        base,
        **{f"w_{c}": v for c, v in zip(COMPONENTS, w, strict=True)},
        **{f"rank_{c}": 0.0 for c in COMPONENTS},
        w_margin=float(rng.choice(MARGINS)),
        w_coverage=float(rng.choice(COVERAGES)),
        w_unknown=float(rng.choice(UNKNOWNS)),
        bm25_half=float(rng.choice(HALVES)),
    )


def without_ranking_only(procedure: Procedure) -> Procedure:
    """`procedure` ranking by its confidence alone (the ablation of its ranking-only weights)."""
    return replace(procedure, **{f"rank_{c}": 0.0 for c in COMPONENTS})


def _with_ranking_only(procedure: Procedure) -> list[Procedure]:
    return [
        replace(procedure, **{f"rank_{c}": v for c, v in zip(RANK_ONLY, steps, strict=True)})
        for steps in itertools.product(RANK_STEPS, repeat=len(RANK_ONLY))
    ]


def _shown(procedure: Procedure, tau: float) -> dict:
    keep = [f"w_{c}" for c in COMPONENTS] + [f"rank_{c}" for c in COMPONENTS]
    keep += ["bm25_half", "w_margin", "w_coverage", "w_unknown"]
    return {**{k: v for k, v in asdict(procedure).items() if k in keep}, "tau_related": tau}


def judged_on(on: list[str], near: dict[str, Library], pick_near: bool) -> list[str]:
    """The libraries a pick made on `on` is scored on: `on`, and with `pick_near` each one's
    near-domain version (a third of its skills held out) too."""
    return [*on, *(near[n].name for n in on if n in near)] if pick_near else list(on)


def run(
    libraries: list[Library],
    mixed: Library | None,
    samples: int,
    refine: int,
    seed: int,
    near: dict[str, Library] | None = None,
    pick_near: bool = False,
) -> dict:
    """`near` maps a library's name to that library with a third of its skills held out: measured
    for every reported pick, and picked on too with `pick_near`."""
    shipped = Procedure()
    rng = np.random.default_rng(seed)
    names = [lib.name for lib in libraries]
    near = near or {}
    scored = [*libraries, *near.values()]
    scores: dict[Procedure, dict] = {}

    def table(p: Procedure) -> dict:
        if p not in scores:
            scores[p] = {lib.name: {v: evaluate(lib, p, v) for v in VARIANTS} for lib in scored}
        return scores[p]

    def family(p: Procedure, on: list[str], tau: float) -> float:
        judged = judged_on(on, near, pick_near)
        return float(np.mean([objective(table(p)[n][v][tau]) for n in judged for v in VARIANTS]))

    def best(candidates: list[Procedure], on: list[str]) -> tuple[Procedure, float]:
        return max(((p, t) for p in candidates for t in TAUS), key=lambda pt: family(pt[0], on, pt[1]))

    confidences = [shipped, without_ranking_only(shipped)]
    confidences += [_random_confidence(rng, shipped) for _ in range(samples)]

    def pick(on: list[str]) -> tuple[Procedure, float]:
        top = sorted(confidences, key=lambda p: -max(family(p, on, t) for t in TAUS))[:refine]
        return best([q for p in top for q in _with_ranking_only(p)] + confidences, on)

    def show(p: Procedure, tau: float) -> dict:
        results = {
            lib.name: {v: {k: round(x, 4) for k, x in table(p)[lib.name][v][tau].items()} for v in VARIANTS}
            for lib in scored
        }
        if mixed is not None:
            results[mixed.name] = {
                v: {k: round(x, 4) for k, x in evaluate(mixed, p, v)[tau].items()} for v in VARIANTS
            }
        return {"procedure": _shown(p, tau), "results": results}

    report: dict = {"leave_one_library_out": []}
    for held_out in names:
        on = [n for n in names if n != held_out]
        chosen, chosen_tau = pick(on)
        ablated = without_ranking_only(chosen)
        report["leave_one_library_out"].append(
            {"picked_on": on, "judged_on": judged_on(on, near, pick_near), "measured_on": held_out,
             "J": round(family(chosen, on, chosen_tau), 4), **show(chosen, chosen_tau),
             "without_its_ranking_only_weights": show(ablated, chosen_tau)}
        )  # fmt: skip
    chosen, chosen_tau = pick(names)
    report["picked_on_all"] = {
        "judged_on": judged_on(names, near, pick_near),
        "J": round(family(chosen, names, chosen_tau), 4),
        **show(chosen, chosen_tau),
    }
    tau = min(TAUS, key=lambda t: abs(t - shipped.tau_related))
    report["shipped"] = show(shipped, tau)
    report["shipped_without_ranking_only_weights"] = show(confidences[1], tau)
    everything = [*scored, *([mixed] if mixed is not None else [])]
    report["ceiling"] = {lib.name: {v: ceiling(lib, shipped, v) for v in VARIANTS} for lib in everything}
    report["configurations"] = len(scores)
    return report


def _parse(spec: str) -> tuple[str, Path, Path]:
    name, _, paths = spec.partition("=")
    skills_dir, _, cases_path = paths.rpartition(":")
    if not (name and skills_dir and cases_path):
        raise SystemExit(f"--library {spec!r}: expected NAME=SKILLS_DIR:CASES_FILE")
    return name, Path(skills_dir), Path(cases_path)


def main() -> None:
    import tempfile

    from ingot.settings import load_settings
    from mcp_server.embedding import load_embedder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", action="append", required=True, help="NAME=SKILLS_DIR:CASES_FILE")
    parser.add_argument("--mixed", action="store_true", help="also measure all libraries served as one")
    parser.add_argument(
        "--near-domain",
        action="store_true",
        help="also measure each library with a third of its skills held out",
    )
    parser.add_argument("--pick-near-domain", action="store_true", help="... and pick on those too")
    parser.add_argument("--samples", type=int, default=600, help="random confidence configurations")
    parser.add_argument("--refine", type=int, default=10, help="best ones given ranking-only weights")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    if len(args.library) < 2:
        parser.error("give at least two libraries: one to pick on, one to measure on")
    settings = load_settings()
    cache = Path(tempfile.gettempdir()) / "ingot-bench" / "cache" / "vectors.sqlite"  # the benches' cache
    embedder = load_embedder(settings.embed_model_dir, settings.embed_model_sha256, cache, threads=2)
    specs = [_parse(spec) for spec in args.library]
    libraries = [load_library(n, [s], [c], embedder, Procedure()) for n, s, c in specs]
    mixed = None
    if args.mixed:
        mixed = load_library(
            "mixed", [s for _, s, _ in specs], [c for _, _, c in specs], embedder, Procedure()
        )
    near = {}
    if args.near_domain or args.pick_near_domain:
        near = {
            n: load_library(f"{n}, a third held out", [s], [c], embedder, Procedure(), a_third([s]))
            for n, s, c in specs
        }
    report = run(libraries, mixed, args.samples, args.refine, args.seed, near, args.pick_near_domain)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
