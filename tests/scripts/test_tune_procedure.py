"""scripts/tune_procedure.py decides exactly as the router does, and reports leave-one-library-out
both ways: a tuner that drifted from the router would tune something that is never served."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mcp_server.calibration import COMPONENTS, Procedure
from mcp_server.library import Library
from scripts.tune_procedure import VARIANTS, calibrated, evaluate, load_library, run, without_ranking_only
from tests.mcp_server.test_calibration import BODYLESS, BODYRICH, OFF_LIBRARY, REQUESTS


def _cases(folder: Path, root: Path) -> Path:
    path = folder / f"{root.name}.jsonl"
    rows = [{"task": t, "expected": e} for t, e in REQUESTS[root].items()]
    rows += [{"task": t, "expected": None} for t in OFF_LIBRARY]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def loaded(embedder, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cases")
    cases = {root: _cases(folder, root) for root in (BODYLESS, BODYRICH)}
    libraries = [load_library(r.name, [r], [cases[r]], embedder, Procedure()) for r in cases]
    mixed = load_library("mixed", list(cases), list(cases.values()), embedder, Procedure())
    return cases, libraries, mixed


@pytest.mark.parametrize("position", [0, 1], ids=["bodyless", "bodyrich"])
def test_the_tuner_ranks_and_scores_every_case_as_the_router_does(loaded, embedder, position):
    cases, libraries, _ = loaded
    root = list(cases)[position]
    library = Library((root,), embedder)
    library.reload()
    score, three = calibrated(libraries[position], Procedure(), "as_is")
    tasks = [*REQUESTS[root], *OFF_LIBRARY]
    for k, task in enumerate(tasks):
        result = library.route(task)
        assert [c.name for c in result.ranked[:3]] == [libraries[position].names[r] for r in three[k]], task
        assert result.score == pytest.approx(score[k], abs=1e-5), task


def test_the_tuner_picks_on_each_library_measures_on_the_other_and_on_both_served_as_one(loaded):
    _, libraries, mixed = loaded
    report = run(libraries, mixed, samples=3, refine=1, seed=1)
    held_out = [(e["picked_on"], e["measured_on"]) for e in report["leave_one_library_out"]]
    assert held_out == [(["bodyrich"], "bodyless"), (["bodyless"], "bodyrich")]
    for entry in [*report["leave_one_library_out"], report["picked_on_all"], report["shipped"]]:
        assert set(entry["results"]) == {"bodyless", "bodyrich", "mixed"}
        assert all(set(entry["results"][n]) == set(VARIANTS) for n in entry["results"])
    for entry in report["leave_one_library_out"]:  # the ablation drops exactly the ranking-only weights
        picked, ablation = entry["procedure"], entry["without_its_ranking_only_weights"]
        assert ablation["procedure"] == {k: 0.0 if k.startswith("rank_") else v for k, v in picked.items()}
        ablated = Procedure(**{k: v for k, v in ablation["procedure"].items() if k != "tau_related"})
        measured = evaluate(libraries[1], ablated, "as_is")[picked["tau_related"]]
        assert ablation["results"]["bodyrich"]["as_is"] == {k: round(v, 4) for k, v in measured.items()}
    shipped = evaluate(libraries[1], Procedure(), "as_is")[0.35]
    assert report["shipped"]["results"]["bodyrich"]["as_is"] == {k: round(v, 4) for k, v in shipped.items()}
    assert report["shipped"]["procedure"]["rank_bm25_body"] == Procedure().rank_bm25_body
    without = report["shipped_without_ranking_only_weights"]["procedure"]
    assert all(v == 0.0 for k, v in without.items() if k.startswith("rank_"))
    ceiling = report["ceiling"]["mixed"]["as_is"]
    assert ceiling["oracle_no_route"] >= 0.92 and 0.0 <= ceiling["oracle_top1"] <= ceiling["ranking_top1"]


def test_the_ablation_drops_the_ranking_only_weights_and_keeps_everything_else():
    shipped = Procedure()
    assert shipped.rank_weights.sum() > shipped.weights.sum()  # the shipped one has some to drop
    ablated = without_ranking_only(shipped)
    assert list(ablated.rank_weights) == list(shipped.weights) == list(ablated.weights)
    assert replace(ablated, **{f"rank_{c}": getattr(shipped, f"rank_{c}") for c in COMPONENTS}) == shipped


def test_the_tuners_recall_counts_acceptable_skills_as_the_routing_benchmark_does(embedder, tmp_path):
    """Cases whose `expected` skill is not among the first three but an `acceptable` one is: the
    tuner's recall@3 and `ingot bench routing`'s agree, so the tuner optimises what is reported."""
    from ingot.bench.routing import Decision, load_cases, score

    requests = list(REQUESTS[BODYRICH].items())
    rows = [{"task": t, "expected": "regex-builder" if e != "regex-builder" else "oauth-integration",
             "acceptable": [e]} for t, e in requests[:3]]  # fmt: skip
    rows += [{"task": t, "expected": e} for t, e in requests[3:]]
    rows += [{"task": t, "expected": None} for t in OFF_LIBRARY]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tuned = load_library("bodyrich", [BODYRICH], [path], embedder, Procedure())
    library = Library((BODYRICH,), embedder)
    library.reload()
    cases = load_cases(path)
    decisions = []
    for case in cases:
        result = library.route(case.task)
        loaded = result.skill.name if result.skill else None
        decisions.append(Decision(loaded, tuple(c.name for c in result.ranked[:3]), result.score))
    reported = score(cases, decisions)["recall_at_3"]
    assert reported == 1.0  # the acceptable skills are found, though the expected ones are not
    assert round(evaluate(tuned, Procedure(), "as_is")[0.35]["recall_at_3"], 4) == reported


def test_the_tau_profile_reports_the_tuners_own_numbers_at_each_threshold(loaded):
    """scripts/tau_profile.py (J flat between the tuner's τ steps, ARCHITECTURE Limits) must show
    what the tuner itself computes at those thresholds, on a grid finer than the tuner's."""
    from scripts.tau_profile import profile
    from scripts.tune_procedure import TAUS, objective

    _, libraries, _ = loaded
    procedure = Procedure()
    taus = (0.3, 0.335, 0.35, 0.4)  # 0.335 is between two of the tuner's steps
    rows = profile(libraries, procedure, taus)
    assert [row["tau"] for row in rows] == list(taus)
    for row in rows:
        for lib in libraries:
            per_variant = evaluate(lib, procedure, "as_is", taus)[row["tau"]]
            assert row["top1_no_route"][lib.name]["as_is"] == [
                round(per_variant["top1"], 4),
                round(per_variant["no_route"], 4),
            ]
            if row["tau"] in TAUS:  # the tuner's own grid gives the same numbers
                assert evaluate(lib, procedure, "as_is")[row["tau"]] == per_variant
            scores = [objective(evaluate(lib, procedure, v, taus)[row["tau"]]) for v in VARIANTS]
            assert row["J"][lib.name] == round(sum(scores) / len(scores), 4)
