"""The cell rules are pure: the same evidence and thresholds always judge a cell the same way, and
too little evidence is `missing`, never a pass."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from optimize.control.gate import Thresholds, ab_cell, routing_cell
from optimize.measure.stats import paired_t, sign_flip
from tests.optimize.conftest import ab


def ab_evidence(champion, challenger, fail_case=None):
    return {"measurements": {**ab(champion, challenger, fail_case)}}


def impact(before, after, n=6, shadowed=(), collisions=(), leakage=None):
    block = {
        "status": "measured",
        "metrics": {"champion": before, "challenger": after, "n": {m: n for m in before}},
        "shadowed": list(shadowed),
        "collisions": list(collisions),
    }
    if leakage is not None:
        block["leakage"] = leakage
    return {"measurements": {"routing_impact": block}}


BASE = {"top1": 0.8, "recall_at_3": 0.9, "no_route_precision": 0.9, "others_top1": 0.8}


def test_a_clear_improvement_passes_with_its_margin_and_both_tests_as_fields():
    cell = ab_cell(ab_evidence([0.1, 0.2, 0.3, 0.2, 0.1], [0.9, 0.8, 0.9, 0.7, 0.8]), Thresholds())
    assert cell.state == "pass" and "margin +0.640" in cell.why
    tests = {s["test"]: s for s in cell.statistics}
    assert (
        tests["paired t-test (one-sided)"]["p"] < 0.01 and tests["paired t-test (one-sided)"]["statistic"] > 0
    )
    assert tests["exact sign-flip permutation (one-sided)"]["p"] == 1 / 32
    assert any(rule.startswith("significance") for rule in cell.rules)


def test_too_few_samples_are_missing_no_gain_is_an_overridable_fail_and_a_drop_a_hard_one():
    few = ab_cell(ab_evidence([0.5, 0.5], [0.9, 0.95]), Thresholds())
    assert few.state == "missing" and "at least 3 needed" in few.why  # not enough measured
    small = ab_cell(ab_evidence([0.5, 0.5, 0.5], [0.55, 0.6, 0.55]), Thresholds())
    assert (small.state, small.overridable) == ("fail", True)  # measured: the answer was no
    assert "measured no gain of the required size" in small.why and "below 0.150" in small.why
    same = ab_cell(ab_evidence([0.6, 0.6, 0.6], [0.6, 0.6, 0.6]), Thresholds())  # a typo fix, say
    assert (same.state, same.overridable) == ("fail", True) and "nothing got worse" in same.why
    worse = ab_cell(ab_evidence([0.45, 0.45, 0.45], [0.25, 0.3, 0.3]), Thresholds())
    assert (worse.state, worse.overridable) == ("fail", False) and "the mean score drops -0.167" in worse.why


def test_three_distinct_equal_gains_are_not_significant_whatever_the_t_test_says():
    cell = ab_cell(ab_evidence([0.5, 0.5, 0.5], [0.7, 0.7, 0.7]), Thresholds())
    assert (cell.state, cell.overridable) == ("fail", True)  # measured, not shown better: never "missing"
    assert "undefined" in cell.why and "p = 0.125" in cell.why and "not shown better" in cell.why


def test_a_paired_test_without_a_significant_gain_fails_saying_more_cases_could_show_it():
    cell = ab_cell(ab_evidence([0.1, 0.5, 0.5], [0.9, 0.5, 0.5]), Thresholds(alpha=0.05))
    assert cell.state == "fail" and "not significant" in cell.why and "paired t-test" in cell.why
    assert "more distinct held-out cases could show it" in cell.why


def test_pairwise_verdicts_that_contradict_the_rubric_gain_fail_and_unmeasured_ones_are_missing():
    evidence = ab_evidence([0.1, 0.2, 0.3, 0.2, 0.1], [0.9, 0.8, 0.9, 0.7, 0.8])
    evidence["measurements"]["ab"]["pairwise"] = {"status": "measured", "wins": 1, "ties": 1, "losses": 3}
    cell = ab_cell(evidence, Thresholds())
    assert cell.state == "fail" and "prefers the champion" in cell.why
    del evidence["measurements"]["ab"]["pairwise"]
    missing = ab_cell(evidence, Thresholds())
    assert missing.state == "missing" and "pairwise comparison not measured" in missing.why


def test_a_regressed_case_fails_even_with_a_large_margin():
    cell = ab_cell(ab_evidence([0.6, 0.1, 0.1, 0.1], [0.4, 0.9, 0.9, 0.9], fail_case=0), Thresholds())
    assert cell.state == "fail" and "regresses held-out task(s) the champion passed: h0" in cell.why


def test_shadowing_fails_every_kind_but_a_removal():
    stolen = [{"task": "Write a commit message for this fix", "expected": "git-commit-messages"}]
    for kind in ("create", "body", "description", "both"):
        cell = routing_cell(impact(BASE, {**BASE, "top1": 0.9}, shadowed=stolen), kind, Thresholds())
        assert cell.state == "fail" and "git-commit-messages" in cell.why, kind
    assert routing_cell(impact(BASE, BASE, shadowed=stolen), "removal", Thresholds()).state == "pass"


def test_description_changes_need_no_regression_one_strict_improvement_and_enough_held_out_cases():
    def judged(before, after, **kw):
        return routing_cell(impact(before, after, **kw), "description", Thresholds())

    assert judged(BASE, {**BASE, "top1": 0.85}).state == "pass"
    regressed = judged(BASE, {**BASE, "top1": 0.9, "recall_at_3": 0.8})
    assert regressed.state == "fail" and "recall@3 regresses" in regressed.why
    flat = judged(BASE, BASE)
    assert (flat.state, flat.overridable) == ("fail", True)
    assert "no metric strictly improves" in flat.why and "nothing regressed" in flat.why
    assert "shadow" in judged(BASE, {**BASE, "top1": 0.9}, collisions=["other"]).why
    leaked = {"excluded": 4, "seen": 3, "in_candidate": 1, "cases": []}
    few = judged(BASE, {**BASE, "top1": 0.9}, n=1, leakage=leaked)
    assert few.state == "missing"
    assert "top-1 on 1 held-out routing case(s) (4 case(s) the candidate was written from left out" in few.why
    lost = judged(BASE, {**BASE, "no_route_precision": 0.25}, n=1)  # one case, and it routes wrong now
    assert (
        lost.state == "fail" and "no-route precision regresses 0.900 -> 0.250 on 1 held-out case" in lost.why
    )


def test_every_kind_needs_enough_held_out_cases_and_fails_on_any_route_it_loses():
    for kind in ("body", "create", "both"):
        thin = routing_cell(impact(BASE, BASE, n=2), kind, Thresholds())
        assert thin.state == "missing" and "at least 5 needed" in thin.why, kind
    assert routing_cell(impact(BASE, {**BASE, "top1": 0.5}), "body", Thresholds()).state == "fail"
    taken = routing_cell(impact(BASE, {**BASE, "no_route_precision": 0.25}, n=4), "create", Thresholds())
    assert taken.state == "fail" and "no-route precision regresses" in taken.why  # null cases taken


def test_a_removal_must_not_cost_another_skill_its_routes():
    lost = routing_cell(impact(BASE, {**BASE, "others_top1": 0.6}), "removal", Thresholds())
    assert lost.state == "fail" and "top-1 of other skills' cases regresses" in lost.why
    thin = routing_cell(impact(BASE, BASE, n=2), "removal", Thresholds())
    assert thin.state == "missing"


def test_the_exact_test_enumerates_every_sign_pattern():
    assert sign_flip([0.0] * 3, [0.2] * 3).p == 1 / 8
    assert sign_flip([0.0, 0.0], [0.3, -0.1]).p == 2 / 4
    assert paired_t([0.5] * 3, [0.7] * 3).p is None  # zero variance: undefined, never 0
    assert paired_t([0.2], [0.9]).p is None and paired_t([0.1, 0.2, 0.1], [0.9, 0.9, 0.8]).p < 0.01


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=0, max_size=12))
def test_the_cell_is_recomputable_from_the_stored_json(pairs):
    evidence = ab_evidence([a for a, _ in pairs], [b for _, b in pairs])
    stored = json.loads(json.dumps(evidence))
    assert ab_cell(stored, Thresholds()) == ab_cell(evidence, Thresholds())


def test_non_finite_or_missing_per_case_results_fail_saying_what_was_not_measured():
    nan = ab_cell(ab_evidence([0.1, 0.2, 0.1], [float("nan"), 0.9, 0.9]), Thresholds())
    assert nan.state == "fail" and "not finite" in nan.why
    assert ab_cell(ab_evidence([0.1, 0.2, 0.1], [float("inf"), 0.9, 0.9]), Thresholds()).state == "fail"
    flags = ab_evidence([0.1, 0.2, 0.1], [0.9, 0.9, 0.9])
    del flags["measurements"]["ab"]["cases"][0]["challenger_pass"]
    assert "pass/fail not measured" in ab_cell(flags, Thresholds()).why
    routing = impact(BASE, {**BASE, "top1": float("nan")})
    assert "top-1 on 6 held-out" in routing_cell(routing, "description", Thresholds()).why


def test_malformed_evidence_is_a_failed_cell_never_an_exception():
    broken = {"measurements": {"ab": {"status": "measured", "cases": [{"champion": "x"}], "pairwise": 3}}}
    assert ab_cell(broken, Thresholds()).state == "fail"
    bad_routing = {"measurements": {"routing_impact": {"status": "measured", "shadowed": 7}}}
    cell = routing_cell(bad_routing, "description", Thresholds())
    assert cell.state == "fail" and "malformed" in cell.why
