"""The passport: every change's evidence as cells, heading EVIDENCE.md and the review card.
"No evidence is missing" appears only when it is true; stale, n/a and missing each say why."""

from __future__ import annotations

from optimize.control.evidence import write_bundle
from optimize.control.gate import Thresholds
from optimize.control.passport import passport
from tests.optimize.conftest import ab, checks
from tests.optimize.control.test_autonomy import green, impact

CHAMPION, CANDIDATE = "a" * 64, "b" * 64
ALL_CLEAR = "No evidence is missing"


def bundle(tmp_path, kind: str, measurements: dict):
    return write_bundle(tmp_path, "alpha", kind, CHAMPION, CANDIDATE, measurements, Thresholds())


def cells(data: dict, live: str = CHAMPION) -> dict[str, tuple[str, str]]:
    return {c.name: (c.state, c.why) for c in passport(data, live, Thresholds()).cells}


def test_an_all_green_description_change_says_nothing_is_missing_at_the_top_of_evidence_md(tmp_path):
    stored = bundle(tmp_path, "description", green())
    text = (stored.path.parent / "EVIDENCE.md").read_text()
    assert ALL_CLEAR in text and text.index("## Passport") < text.index("## Measurements")
    assert "| held-out A/B | n/a | a description change leaves the served body unchanged |" in text
    assert "| routing impact | pass |" in text and "| safety | pass |" in text


def test_one_unmeasured_cell_makes_the_claim_false_and_says_which_and_why(tmp_path):
    measurements = {**checks(), "ab": {"status": "not_applicable", "why": "description"}}
    measurements["routing_impact"] = {"status": "not_measured", "why": "no routing cases: add some"}
    stored = bundle(tmp_path, "description", measurements)
    text = (stored.path.parent / "EVIDENCE.md").read_text()
    assert ALL_CLEAR not in text
    assert "Not green: routing impact missing." in text
    assert "| routing impact | missing | no routing cases: add some |" in text


def test_a_failing_check_fails_its_cell_and_never_reads_as_missing(tmp_path):
    stored = bundle(tmp_path, "description", {**green(), **checks(passed=False)})
    assert cells(stored.data)["safety"][0] == "fail"
    assert ALL_CLEAR not in (stored.path.parent / "EVIDENCE.md").read_text()


def test_evidence_measured_on_another_champion_is_stale_in_every_cell(tmp_path):
    stored = bundle(tmp_path, "description", green())
    stale = cells(stored.data, live="c" * 64)
    assert {state for state, _ in stale.values()} == {"stale"}
    assert "re-evaluate" in stale["routing impact"][1]
    assert not passport(stored.data, "c" * 64, Thresholds()).all_green


def test_a_rewrite_without_replay_or_prices_has_those_cells_missing_and_a_costlier_one_fails(tmp_path):
    measured = ab([0.2, 0.3, 0.2, 0.3, 0.25], [0.9, 0.8, 0.9, 0.85, 0.9])
    rewrite = {**checks(), **impact(), **measured}
    found = cells(bundle(tmp_path, "rewrite", rewrite).data)
    assert found["held-out A/B"][0] == "pass"
    assert found["replay"][0] == "missing" and found["cost"][0] == "missing"
    assert "no price" in found["cost"][1]
    measured["ab"] |= {"champion_usd": 0.010, "challenger_usd": 0.020}
    costly = cells(bundle(tmp_path, "rewrite", rewrite).data)
    assert costly["cost"] == ("fail", "serving cost +100% over the holdout (limit +25%)")
    measured["ab"] |= {"challenger_usd": 0.011}
    assert cells(bundle(tmp_path, "rewrite", rewrite).data)["cost"][0] == "pass"


def test_a_new_skill_has_no_replay_or_cost_to_compare_and_says_so(tmp_path):
    found = cells(bundle(tmp_path, "create", {**checks(), **impact()}).data | {"champion_revision": CHAMPION})
    assert found["replay"] == ("n/a", "a new skill has no blessed runs to replay")
    assert found["cost"][0] == "n/a" and found["held-out A/B"][0] == "missing"
