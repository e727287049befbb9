"""The gate is pure: the same evidence and thresholds always give the same verdict."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from optimize.control.gate import Thresholds, evaluate
from optimize.measure.stats import paired_t, sign_flip
from tests.optimize.conftest import ab, checks


def rewrite_evidence(champion, challenger, fail_case=None, **extra):
    return {"kind": "rewrite", "measurements": {**ab(champion, challenger, fail_case)}, **extra}


def impact(before, after, n=6, shadowed=(), collisions=()):
    return {
        "routing_impact": {
            "status": "measured",
            "metrics": {"champion": before, "challenger": after, "n": {m: n for m in before}},
            "shadowed": list(shadowed),
            "collisions": list(collisions),
        }
    }


BASE = {"top1": 0.8, "recall_at_3": 0.9, "no_route_precision": 0.9}


def test_a_clear_improvement_passes_with_its_margin_and_both_tests_as_fields():
    verdict = evaluate(rewrite_evidence([0.1, 0.2, 0.3, 0.2, 0.1], [0.9, 0.8, 0.9, 0.7, 0.8]), Thresholds())
    assert verdict.status == "pass" and "margin +0.640" in verdict.reasons[0]
    tests = {s["test"]: s for s in verdict.statistics}
    assert (
        tests["paired t-test (one-sided)"]["p"] < 0.01 and tests["paired t-test (one-sided)"]["statistic"] > 0
    )
    assert tests["exact sign-flip permutation (one-sided)"]["p"] == 1 / 32
    assert any(rule.startswith("significance") for rule in verdict.rules)


def test_too_few_samples_and_a_small_margin_block_with_reasons():
    verdict = evaluate(rewrite_evidence([0.5, 0.5], [0.55, 0.6]), Thresholds())
    assert verdict.status == "blocked"
    assert any("at least 3 needed" in r for r in verdict.reasons)
    assert any("below the required 0.150" in r for r in verdict.reasons)


def test_three_distinct_equal_gains_are_not_significant_whatever_the_t_test_says():
    verdict = evaluate(rewrite_evidence([0.5, 0.5, 0.5], [0.7, 0.7, 0.7]), Thresholds())
    assert verdict.status == "insufficient"
    assert "undefined" in verdict.reasons[0] and "p = 0.125" in verdict.reasons[0]


def test_a_paired_test_without_enough_evidence_says_insufficient():
    verdict = evaluate(rewrite_evidence([0.1, 0.5, 0.5], [0.9, 0.5, 0.5]), Thresholds(alpha=0.05))
    assert verdict.status == "insufficient" and "paired t-test" in verdict.reasons[0]


def test_pairwise_verdicts_that_contradict_the_rubric_gain_block():
    evidence = rewrite_evidence([0.1, 0.2, 0.3, 0.2, 0.1], [0.9, 0.8, 0.9, 0.7, 0.8])
    evidence["measurements"]["ab"]["pairwise"] = {"status": "measured", "wins": 1, "ties": 1, "losses": 3}
    verdict = evaluate(evidence, Thresholds())
    assert verdict.status == "blocked" and "prefers the champion" in verdict.reasons[0]
    del evidence["measurements"]["ab"]["pairwise"]
    assert "pairwise comparison not measured" in evaluate(evidence, Thresholds()).reasons[0]


def test_missing_measurements_block_and_are_never_defaulted():
    for kind, expected in (
        ("rewrite", "held-out A/B not measured"),
        ("description", "routing impact not measured"),
        ("create", "safety checks not measured"),
    ):
        verdict = evaluate({"kind": kind, "measurements": {}}, Thresholds())
        assert verdict.status == "blocked" and expected in verdict.reasons[0], verdict
    partial = {
        "kind": "create",
        "measurements": {"checks": {"status": "measured", "results": {"validation": {"passed": True}}}},
    }
    assert "injection check not measured" in evaluate(partial, Thresholds()).reasons


def test_a_create_without_quality_evidence_is_admissible_never_pass():
    verdict = evaluate({"kind": "create", "measurements": checks(True)}, Thresholds())
    assert verdict.status == "admissible" and verdict.approvable and not verdict.passed
    assert "quality not measured" in verdict.reasons[0]
    assert not evaluate({"kind": "create", "measurements": checks(False)}, Thresholds()).approvable
    measured = {**checks(True), **ab([0.1, 0.2, 0.1, 0.2, 0.1], [0.9, 0.8, 0.9, 0.7, 0.8])}
    assert evaluate({"kind": "create", "measurements": measured}, Thresholds()).passed


def test_shadowing_blocks_every_kind():
    stolen = [{"task": "Write a commit message for this fix", "expected": "git-commit-messages", "now": "x"}]
    create = {"kind": "create", "measurements": {**checks(True), **impact(BASE, BASE, shadowed=stolen)}}
    assert "shadows 1 routing case" in evaluate(create, Thresholds()).reasons[0]
    description = {
        "kind": "description",
        "measurements": impact(BASE, {**BASE, "top1": 0.9}, shadowed=stolen),
    }
    verdict = evaluate(description, Thresholds())
    assert verdict.status == "blocked" and "git-commit-messages" in " ".join(verdict.reasons)


def test_description_changes_need_no_regression_one_strict_improvement_and_enough_cases():
    def routing(before, after, **kw):
        return {"kind": "description", "measurements": impact(before, after, **kw)}

    assert evaluate(routing(BASE, {**BASE, "top1": 0.85}), Thresholds()).passed
    regressed = evaluate(routing(BASE, {**BASE, "top1": 0.9, "recall_at_3": 0.8}), Thresholds())
    assert "recall_at_3 regresses" in " ".join(regressed.reasons)
    assert "strictly improves" in evaluate(routing(BASE, BASE), Thresholds()).reasons[0]
    assert "shadow" in " ".join(
        evaluate(routing(BASE, {**BASE, "top1": 0.9}, collisions=["other"]), Thresholds()).reasons
    )
    few = evaluate(routing(BASE, {**BASE, "top1": 0.9}, n=1), Thresholds())
    assert few.status == "blocked" and "measured on 1 routing case(s); at least 5 needed" in few.reasons[0]


def test_a_rewrite_that_changes_the_description_needs_routing_impact_too():
    evidence = rewrite_evidence(
        [0.1, 0.2, 0.3, 0.2, 0.1], [0.9, 0.8, 0.9, 0.7, 0.8], changes={"description": True}
    )
    assert "routing impact not measured" in evaluate(evidence, Thresholds()).reasons[0]
    evidence["measurements"].update(impact(BASE, BASE))
    assert evaluate(evidence, Thresholds()).passed


def test_the_exact_test_enumerates_every_sign_pattern():
    assert sign_flip([0.0] * 3, [0.2] * 3).p == 1 / 8
    assert sign_flip([0.0, 0.0], [0.3, -0.1]).p == 2 / 4
    assert paired_t([0.5] * 3, [0.7] * 3).p is None  # zero variance: undefined, never 0
    assert paired_t([0.2], [0.9]).p is None and paired_t([0.1, 0.2, 0.1], [0.9, 0.9, 0.8]).p < 0.01


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=0, max_size=12))
def test_the_verdict_is_recomputable_from_the_stored_json(pairs):
    evidence = rewrite_evidence([a for a, _ in pairs], [b for _, b in pairs])
    stored = json.loads(json.dumps(evidence))
    assert evaluate(stored, Thresholds()) == evaluate(evidence, Thresholds())


def test_non_finite_or_missing_per_case_results_block_as_not_measured():
    nan = rewrite_evidence([0.1, 0.2, 0.1], [float("nan"), 0.9, 0.9])
    assert (
        evaluate(nan, Thresholds()).status == "blocked"
        and "not finite" in evaluate(nan, Thresholds()).reasons[0]
    )
    inf = rewrite_evidence([0.1, 0.2, 0.1], [float("inf"), 0.9, 0.9])
    assert evaluate(inf, Thresholds()).status == "blocked"
    flags = rewrite_evidence([0.1, 0.2, 0.1], [0.9, 0.9, 0.9])
    del flags["measurements"]["ab"]["cases"][0]["challenger_pass"]
    assert "pass/fail not measured" in evaluate(flags, Thresholds()).reasons[0]
    routing = {
        "kind": "description",
        "measurements": impact(BASE, {"top1": float("nan"), "recall_at_3": 0.9, "no_route_precision": 0.9}),
    }
    assert any("top1 measured on" in r for r in evaluate(routing, Thresholds()).reasons)
