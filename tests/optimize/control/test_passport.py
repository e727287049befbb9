"""The passport is the one verdict: four cell states, three change states, and one table saying
which cell applies to which kind of change. Nothing unmeasured reads as a pass."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingot.cli.main import main
from optimize.control.evidence import write_bundle
from optimize.control.gate import Thresholds
from optimize.control.kinds import APPLIES, CELLS, KINDS, table_rows
from optimize.control.passport import passport
from tests.optimize.conftest import ab, checks
from tests.optimize.control.test_autonomy import green, impact

CHAMPION, CANDIDATE = "a" * 64, "b" * 64
REPO = Path(__file__).resolve().parents[3]


def bundle(tmp_path, kind: str, measurements: dict, changes: dict | None = None):
    changes = changes or {"kind": kind}
    champion = None if kind == "create" else CHAMPION
    return write_bundle(
        tmp_path, "alpha", kind, champion, CANDIDATE, measurements, Thresholds(), changes=changes
    )


def cells(data: dict, live: str | None = CHAMPION) -> dict[str, tuple[str, str]]:
    return {c.name: (c.state, c.why) for c in passport(data, live, Thresholds()).cells}


def replay(verdict: str) -> dict:
    found = {"PASS": "pass", "WARN": "contested", "BLOCK": "regressed"}[verdict]
    golden = {"id": "g1", "verdict_found": found, "evidence": "L0", "signature": ["s"], "controls": []}
    return {"replay": {"status": "measured", "verdict": verdict, "goldens": [golden]}}


BODY_OK = {
    **checks(),
    **impact(),
    **ab([0.2, 0.3, 0.2, 0.3, 0.25], [0.9, 0.8, 0.9, 0.85, 0.9]),
    "sandbox_checks": {"status": "not_applicable", "why": "nothing in this skill runs code"},
}


def test_a_ready_description_change_heads_evidence_md_with_its_state(tmp_path):
    stored = bundle(tmp_path, "description", green())
    text = (stored.path.parent / "EVIDENCE.md").read_text()
    assert "**ready: every cell that applies passed**" in text
    assert text.index("## Passport") < text.index("## Measurements")
    assert "| held-out A/B | n/a |" in text and "| routing impact | pass |" in text
    assert stored.data["passport"]["state"] == "ready"


def test_a_missing_cell_makes_it_need_acknowledgement_and_says_why_and_what_would_measure_it(tmp_path):
    measurements = {**checks(), "routing_impact": {"status": "not_measured", "why": "no routing cases"}}
    stored = bundle(tmp_path, "description", measurements)
    verdict = passport(stored.data, CHAMPION, Thresholds())
    assert verdict.state == "needs-acknowledgement" and [c.name for c in verdict.missing] == [
        "routing impact"
    ]
    assert "no routing cases" in verdict.missing[0].why and "routing:" in verdict.missing[0].measure
    text = (stored.path.parent / "EVIDENCE.md").read_text()
    assert "needs-acknowledgement: routing impact missing" in text and "to measure:" in text


def test_a_failing_cell_blocks_and_never_reads_as_missing(tmp_path):
    stored = bundle(tmp_path, "description", {**green(), **checks(passed=False)})
    verdict = passport(stored.data, CHAMPION, Thresholds())
    assert verdict.state == "blocked" and cells(stored.data)["safety"][0] == "fail"
    assert not verdict.overridable


def test_evidence_measured_on_another_champion_is_stale_in_every_cell_that_applies_never_failed(tmp_path):
    stored = bundle(tmp_path, "description", green())
    stale = cells(stored.data, live="c" * 64)
    assert {state for state, _ in stale.values()} == {"stale", "n/a"}
    assert stale["routing impact"][1] == (
        f"the live skill changed since this evidence was measured (measured on {CHAMPION[:12]}, live now "
        f"{'c' * 12}): re-measure with `ingot evaluate alpha --change chg-1`"
    ).replace("chg-1", "ID")
    assert stale["held-out A/B"][0] == "n/a"
    verdict = passport(stored.data, "c" * 64, Thresholds(), "chg-1")
    assert verdict.state == "stale" and not verdict.ready and not verdict.failed
    assert verdict.summary.startswith("stale: the live skill changed since")
    assert "--change chg-1`" in verdict.summary
    assert verdict.as_json()["state"] == "stale"


def test_the_vocabulary_is_written_down_once_with_a_meaning_for_every_word():
    from optimize.control.passport import CELL_MEANING, CELL_STATES, STATE_MEANING, STATES

    assert set(CELL_MEANING) == set(CELL_STATES) == {"pass", "fail", "missing", "n/a", "stale"}
    assert set(STATE_MEANING) == set(STATES) == {"ready", "needs-acknowledgement", "blocked", "stale"}


def test_a_body_change_without_replay_or_prices_needs_acknowledgement_and_a_costlier_one_is_blocked(tmp_path):
    found = cells(bundle(tmp_path, "body", BODY_OK).data)
    assert found["held-out A/B"][0] == "pass" and found["sandbox checks"][0] == "n/a"
    assert found["replay"][0] == "missing" and found["cost"][0] == "missing"
    assert "no price" in found["cost"][1]
    priced = {
        **BODY_OK,
        **replay("PASS"),
        "ab": {**BODY_OK["ab"], "champion_usd": 0.01, "challenger_usd": 0.02},
    }
    costly = passport(bundle(tmp_path, "body", priced).data, CHAMPION, Thresholds())
    assert costly.state == "blocked"
    assert costly.cell("cost").why == "serving cost +100% over the holdout (limit +25%)"
    priced["ab"] |= {"challenger_usd": 0.011}
    assert passport(bundle(tmp_path, "body", priced).data, CHAMPION, Thresholds()).state == "ready"


def test_a_replay_warn_is_missing_and_a_block_is_the_one_overridable_failure(tmp_path):
    warned = passport(bundle(tmp_path, "body", {**BODY_OK, **replay("WARN")}).data, CHAMPION, Thresholds())
    assert warned.cell("replay").state == "missing" and "could not decide" in warned.cell("replay").why
    blocked = passport(bundle(tmp_path, "body", {**BODY_OK, **replay("BLOCK")}).data, CHAMPION, Thresholds())
    assert blocked.state == "blocked" and blocked.cell("replay").state == "fail" and blocked.overridable
    worse = {**BODY_OK, **replay("BLOCK"), **checks(passed=False)}
    assert not passport(bundle(tmp_path, "body", worse).data, CHAMPION, Thresholds()).overridable


def test_a_new_skill_has_no_replay_or_cost_and_its_missing_quality_needs_acknowledgement(tmp_path):
    stored = bundle(tmp_path, "create", {**checks(), **impact()})
    found = cells(stored.data, live=None)
    assert found["replay"] == ("n/a", "a new skill has no blessed runs to replay")
    assert found["cost"][0] == "n/a" and found["held-out A/B"][0] == "missing"
    assert passport(stored.data, None, Thresholds()).state == "needs-acknowledgement"


def test_a_bundle_cannot_declare_a_cell_that_applies_not_applicable(tmp_path):
    forged = {**BODY_OK, **replay("PASS"), "ab": {"status": "not_applicable", "why": "trust me"}}
    cell = passport(bundle(tmp_path, "body", forged).data, CHAMPION, Thresholds()).cell("held-out A/B")
    assert cell.state == "missing" and "but it applies to a body change" in cell.why


def test_sandbox_checks_apply_where_code_runs_and_are_missing_when_nothing_ran_them(tmp_path):
    scripted = {**BODY_OK, "sandbox_checks": {"status": "not_measured", "why": "the skill has scripts"}}
    assert cells(bundle(tmp_path, "body", scripted).data)["sandbox checks"][0] == "missing"
    ran = {**BODY_OK, "sandbox_checks": {"status": "measured", "challenger": {"passed": 2, "failed": 1}}}
    assert cells(bundle(tmp_path, "body", ran).data)["sandbox checks"] == ("fail", "1 failed")


def test_the_table_has_a_row_per_cell_and_a_column_per_kind_and_every_n_a_says_why():
    assert set(APPLIES) == set(KINDS) and all(set(APPLIES[k]) == set(CELLS) for k in KINDS)
    for kind in KINDS:
        for cell, rule in APPLIES[kind].items():
            assert rule in ("applies", "applies when code runs") or re.match(r"n/a: \w", rule), (kind, cell)
    assert APPLIES["both"] == {c: APPLIES["body"][c] for c in CELLS}


def test_the_help_epilogue_and_architecture_md_show_the_same_table_as_the_code():
    from click.testing import CliRunner

    shown = CliRunner().invoke(main, ["--help"]).output
    docs = (REPO / "ARCHITECTURE.md").read_text()
    for cell, *rules in table_rows():
        assert re.search(r"\s+".join(map(re.escape, [cell, *rules])), shown), cell
        assert f"| {cell} | " + " | ".join(rules) + " |" in docs, cell


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_gets_six_cells_in_the_table_s_order(tmp_path, kind):
    data = bundle(tmp_path, kind, {}).data
    live = None if kind == "create" else CHAMPION
    verdict = passport(data, live, Thresholds())
    assert tuple(c.name for c in verdict.cells) == CELLS
    for cell in verdict.cells:
        assert (cell.state == "n/a") == APPLIES[kind][cell.name].startswith("n/a"), (kind, cell)


def test_autonomy_never_approves_a_stale_change_and_says_nobody_can_until_it_is_re_measured(tmp_path):
    import datetime as dt

    from optimize.control.autonomy import Trust, decide

    stored = bundle(tmp_path, "description", green())
    verdict = passport(stored.data, "c" * 64, Thresholds(), "chg-1")
    long_ago = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    decision = decide(Trust("auto", "auto"), verdict, long_ago, 0, dt.datetime.now(dt.UTC))
    assert decision.action == "human"
    assert decision.why.startswith("stale: the live skill changed since this evidence was measured")
    assert decision.why.endswith("until then neither autonomy nor a person can approve it")


def test_evidence_md_reports_every_rule_in_the_cells_own_words(tmp_path):
    measurements = {**BODY_OK, **checks(passed=False)}
    text = (bundle(tmp_path, "body", measurements).path.parent / "EVIDENCE.md").read_text()
    rules = text.split("## Rules applied")[1].split("##")[0]
    assert "no case the champion passed fails: pass" in rules
    assert not re.search(r": (ok|FAILED|NOT SHOWN|too few)\b", rules), rules
    assert "- validation check: fail test" in text and "FAILED" not in text


def test_a_significance_rule_with_an_undefined_test_says_which_why_and_what_it_used(tmp_path):
    same_gain = ab([0.2, 0.3, 0.2, 0.3], [0.7, 0.8, 0.7, 0.8])  # every delta +0.5: the t-test is undefined
    verdict = passport(bundle(tmp_path, "body", {**BODY_OK, **same_gain}).data, CHAMPION, Thresholds())
    (rule,) = [r for r in verdict.rules if r.startswith("significance")]
    assert "both tests" not in rule
    assert "paired t-test (one-sided) undefined: every delta is the same: zero variance" in rule
    assert "so the rule used the exact sign-flip permutation (one-sided) alone" in rule


def test_the_help_shows_the_vocabulary_as_passport_py_writes_it_down():
    from click.testing import CliRunner

    from optimize.control.passport import CELL_MEANING, STATE_MEANING

    shown = " ".join(CliRunner().invoke(main, ["--help"]).output.split())
    for word, meaning in (*CELL_MEANING.items(), *STATE_MEANING.items()):
        assert f"{word} {meaning}" in shown, word
