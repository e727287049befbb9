"""The gate is pure: the same evidence and thresholds always give the same verdict."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from optimize.control.gate import Thresholds, evaluate, paired_p
from tests.optimize.conftest import ab, checks


def rewrite_evidence(champion, challenger, fail_case=None, **extra):
    return {"kind": "rewrite", "measurements": {**ab(champion, challenger, fail_case)}, **extra}


def test_a_clear_improvement_passes_with_its_margin_and_p_value():
    verdict = evaluate(rewrite_evidence([0.1, 0.2, 0.3, 0.2], [0.9, 0.8, 0.9, 0.7]), Thresholds())
    assert verdict.status == "pass" and "margin +0.625" in verdict.reasons[0]


def test_too_few_samples_and_a_small_margin_block_with_reasons():
    verdict = evaluate(rewrite_evidence([0.5, 0.5], [0.55, 0.6]), Thresholds())
    assert verdict.status == "blocked"
    assert any("at least 3 needed" in r for r in verdict.reasons)
    assert any("below the required 0.150" in r for r in verdict.reasons)


def test_a_paired_test_without_enough_evidence_says_insufficient():
    verdict = evaluate(rewrite_evidence([0.1, 0.5, 0.5], [0.9, 0.5, 0.5]), Thresholds(alpha=0.05))
    assert verdict.status == "insufficient" and "paired t-test" in verdict.reasons[0]


def test_missing_measurements_block_and_are_never_defaulted():
    for kind, expected in (
        ("rewrite", "A/B was not measured"),
        ("description", "router metrics"),
        ("create", "safety checks"),
    ):
        verdict = evaluate({"kind": kind, "measurements": {}}, Thresholds())
        assert verdict.status == "blocked" and expected in verdict.reasons[0]
    partial = {
        "kind": "create",
        "measurements": {"checks": {"status": "measured", "results": {"validation": {"passed": True}}}},
    }
    assert "injection check not measured" in evaluate(partial, Thresholds()).reasons


def test_create_passes_only_when_every_check_passed():
    assert evaluate({"kind": "create", "measurements": checks(True)}, Thresholds()).passed
    assert not evaluate({"kind": "create", "measurements": checks(False)}, Thresholds()).passed


def test_description_changes_need_no_regression_and_one_strict_improvement():
    def routing(before, after, collisions=()):
        return {
            "kind": "description",
            "measurements": {
                "routing": {
                    "status": "measured",
                    "champion": before,
                    "challenger": after,
                    "collisions": list(collisions),
                }
            },
        }

    base = {"top1": 0.8, "recall_at_3": 0.9, "no_route_precision": 0.9}
    assert evaluate(routing(base, {**base, "top1": 0.85}), Thresholds()).passed
    assert (
        "regresses"
        in evaluate(routing(base, {**base, "top1": 0.9, "recall_at_3": 0.8}), Thresholds()).reasons[0]
    )
    assert "strictly improves" in evaluate(routing(base, base), Thresholds()).reasons[0]
    assert "shadow" in " ".join(
        evaluate(routing(base, {**base, "top1": 0.9}, ["other"]), Thresholds()).reasons
    )


def test_paired_p_handles_consistent_noisy_and_degenerate_deltas():
    assert paired_p([0.1, 0.2, 0.1], [0.9, 0.9, 0.8]) < 0.01
    assert paired_p([0.5, 0.5, 0.5], [0.9, 0.1, 0.6]) > 0.3
    assert paired_p([0, 0, 0], [1, 1, 1]) == 0.0 and paired_p([1, 1], [0, 0]) == 1.0
    assert paired_p([0.2], [0.9]) == 1.0


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
        "measurements": {
            "routing": {
                "status": "measured",
                "champion": {"top1": 0.5, "recall_at_3": 0.5, "no_route_precision": 0.5},
                "challenger": {"top1": float("nan"), "recall_at_3": 0.9, "no_route_precision": 0.9},
            }
        },
    }
    assert "top1 not measured" in evaluate(routing, Thresholds()).reasons
