"""scripts/tune_procedure.py decides exactly as the router does, and reports leave-one-library-out
both ways: a tuner that drifted from the router would tune something that is never served."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from mcp_server.calibration import COMPONENTS, Procedure
from mcp_server.library import Library
from scripts.tune_procedure import (
    VARIANTS,
    a_third,
    calibrated,
    evaluate,
    judged_on,
    load_library,
    objective,
    run,
    without_ranking_only,
)
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
    """scripts/tau_profile.py (J flat between the tuner's τ steps, docs/routing-measurements.md) must show
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


def test_a_library_with_a_third_held_out_turns_their_cases_into_requests_it_cannot_serve(
    loaded, embedder, tmp_path
):
    """The near-domain variant: the held-out skills are gone from the library, a case is a null
    case exactly when every right answer was held out, and every case is decided as the router
    decides it on a folder holding only the other skills (its own anchors, derived without them)."""
    cases, _, _ = loaded
    held = a_third([BODYRICH])
    assert len(held) == 4 and held == a_third([BODYRICH])  # a third of 12, the same every time
    name = "bodyrich, a third held out"
    near = load_library(name, [BODYRICH], [cases[BODYRICH]], embedder, Procedure(), held)
    assert set(near.names) == {p.name for p in BODYRICH.iterdir()} - held
    tasks = [*REQUESTS[BODYRICH], *OFF_LIBRARY]
    expected = [REQUESTS[BODYRICH].get(t) for t in tasks]
    assert list(near.positive) == [e is not None and e not in held for e in expected]
    assert not near.right[~near.positive].any()
    smaller = tmp_path / "bodyrich"
    for skill in near.names:
        shutil.copytree(BODYRICH / skill, smaller / skill)
    library = Library((smaller,), embedder)
    library.reload()
    score, three = calibrated(near, Procedure(), "as_is")
    for k, task in enumerate(tasks):
        result = library.route(task)
        assert [c.name for c in result.ranked[:3]] == [near.names[r] for r in three[k]], task
        assert result.score == pytest.approx(score[k], abs=1e-5), task


def test_the_near_domain_libraries_are_measured_for_every_pick_and_picked_on_only_when_asked(
    loaded, embedder, tmp_path
):
    cases, libraries, mixed = loaded
    near = {
        lib.name: load_library(f"{lib.name}, a third held out", [root], [cases[root]], embedder, Procedure(),
                               a_third([root]))
        for lib, root in zip(libraries, cases, strict=True)
    }  # fmt: skip
    plain = run(libraries, mixed, samples=3, refine=1, seed=1)
    measured = run(libraries, mixed, samples=3, refine=1, seed=1, near=near)
    for entry in [*measured["leave_one_library_out"], measured["picked_on_all"], measured["shipped"]]:
        assert set(entry["results"]) == {"bodyless", "bodyrich", "mixed", *(n.name for n in near.values())}
    # Measured only: every pick is the one made without them.
    assert [e["procedure"] for e in measured["leave_one_library_out"]] == [
        e["procedure"] for e in plain["leave_one_library_out"]
    ]
    assert measured["picked_on_all"]["procedure"] == plain["picked_on_all"]["procedure"]
    assert measured["picked_on_all"]["judged_on"] == ["bodyless", "bodyrich"]
    # Picked on when asked: each pick is scored on the near-domain versions of its libraries too.
    # (The fixtures route perfectly with or without a third of their skills; labels rotated by one
    # give one near-domain library a J of its own, so leaving it out of a pick would show.)
    rotated = tmp_path / "rotated.jsonl"
    requests = list(REQUESTS[BODYRICH].items())
    rows = [
        {"task": t, "expected": requests[(k + 1) % len(requests)][1]} for k, (t, _) in enumerate(requests)
    ]
    rotated.write_text("".join(json.dumps(r) + "\n" for r in rows))
    near["bodyrich"] = load_library(
        "bodyrich, a third held out", [BODYRICH], [rotated], embedder, Procedure(), a_third([BODYRICH])
    )
    picked = run(libraries, mixed, samples=3, refine=1, seed=1, near=near, pick_near=True)
    assert picked["picked_on_all"]["judged_on"] == [
        "bodyless",
        "bodyrich",
        "bodyless, a third held out",
        "bodyrich, a third held out",
    ]
    assert [e["judged_on"] for e in picked["leave_one_library_out"]] == [
        ["bodyrich", "bodyrich, a third held out"],
        ["bodyless", "bodyless, a third held out"],
    ]
    assert judged_on(["bodyrich"], near, pick_near=False) == ["bodyrich"]
    # The J a pick was chosen by is its mean objective over exactly those libraries.
    by_name = {lib.name: lib for lib in [*libraries, *near.values()]}
    for report in (measured, picked):
        entry = report["picked_on_all"]
        chosen = Procedure(**{k: v for k, v in entry["procedure"].items() if k != "tau_related"})
        tau = entry["procedure"]["tau_related"]
        scores = [
            objective(evaluate(by_name[n], chosen, v)[tau]) for n in entry["judged_on"] for v in VARIANTS
        ]
        assert entry["J"] == round(sum(scores) / len(scores), 4)
