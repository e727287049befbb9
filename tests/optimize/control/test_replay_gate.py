"""The replay rule at approval: a BLOCK needs an audited override, a WARN an audited reason, and
the verdict is recomputed from the cell's per-golden findings, never taken on trust."""

from __future__ import annotations

import pytest

from optimize.control.audit import AuditLog
from optimize.control.changes import ApprovalRefused
from optimize.control.replay_rule import replay_rule
from optimize.measure.cascade import JudgeTiers
from optimize.measure.level0 import SIDE_EFFECT_TOOLS
from optimize.measure.regress import ReplaySettings, replay_cell
from tests.optimize.conftest import ab, ready_body
from tests.regress_sim import edited, regress_world

PASSING_AB = ab([0.2, 0.3, 0.1, 0.4], [0.9, 0.8, 0.7, 0.9])


def golden(found: str, **extra) -> dict:
    return {"id": "g-1", "verdict_found": found, "evidence": "", "signature": [], "controls": [], **extra}


def cell(*goldens: dict, verdict: str = "PASS") -> dict:
    return {"measurements": {"replay": {"status": "measured", "verdict": verdict, "goldens": list(goldens)}}}


def test_the_rule_asks_nothing_of_a_pass_a_reason_of_a_warn_and_an_override_of_a_block():
    assert replay_rule(cell(golden("pass"))).needs is None
    assert replay_rule(cell(golden("contested", note="L2 and L3 disagree"), verdict="WARN")).needs == "reason"
    blocked = golden(
        "regressed", evidence="L2+L3", signature=["c1"], cited={"run": "golden", "step": 2, "quote": "x"}
    )
    rule = replay_rule(cell(blocked, verdict="BLOCK"))
    assert (rule.verdict, rule.needs) == ("BLOCK", "override") and "golden step 2" in rule.reasons[0]
    missing = replay_rule(
        {"measurements": {"replay": {"status": "not_measured", "why": "no blessed goldens"}}}
    )
    assert (missing.verdict, missing.needs) == (None, None) and "no blessed goldens" in missing.reasons[0]


def test_the_verdict_is_recomputed_from_the_findings_and_the_stricter_one_counts():
    blocked = golden("regressed", evidence="L0", signature=["missing side effect: send()"])
    assert replay_rule(cell(blocked, verdict="PASS")).verdict == "BLOCK"  # a forged PASS does not pass
    assert replay_rule(cell(golden("pass"), verdict="WARN")).verdict == "WARN"
    assert replay_rule(cell(golden("pass"), verdict="MAYBE")).needs == "override"  # malformed blocks
    assert replay_rule({"measurements": {"replay": {"status": "measured"}}}).verdict == "BLOCK"


def test_a_difference_the_controls_show_and_a_partial_replay_never_block():
    shared = golden(
        "regressed",
        evidence="L2+L3",
        signature=["c1"],
        controls=[{"verdict": "regressed", "signature": ["c1"]}, {"verdict": "pass"}],
    )
    assert replay_rule(cell(shared)).verdict == "PASS"
    partial = golden("regressed", evidence="L2+L3", signature=["c1"], partial=True)
    assert replay_rule(cell(partial, verdict="WARN")).verdict == "WARN"
    stale = golden("pass", controls=[{"verdict": "regressed", "signature": ["c1"]}] * 2)
    assert replay_rule(cell(stale, verdict="WARN")).verdict == "WARN"


def test_the_stale_rule_of_the_live_revision_alone_never_excuses_a_changes_regression():
    """A golden whose world moved is stale when the live revision is replayed alone (`ingot
    replay`); a change's cell claiming to be such a replay (no champion) still blocks."""
    from optimize.measure.replay_verdict import replay_cell_verdict

    moved = {"label": "value from get_latency", "old": "95", "new": "130", "tool": "get_latency", "step": 1}
    regressed = golden("regressed", evidence="L0", signature=["x"], drift=[moved], moved_calls=[{"step": 1}])
    data = cell(regressed, verdict="WARN")
    data["measurements"]["replay"] |= {"champion_revision": None, "coverage": {"status": "not_applicable"}}
    verdict, reasons, _ = replay_cell_verdict(data["measurements"]["replay"])
    assert verdict == "WARN" and reasons[0].startswith("g-1: stale: the world moved since it was recorded")
    assert "value from get_latency 95 -> 130 (get_latency step 1)" in reasons[0]
    rule = replay_rule(data)
    assert (rule.verdict, rule.needs) == ("BLOCK", "override")
    unchanged = {**regressed, "drift": [], "moved_calls": []}
    verdict, reasons, _ = replay_cell_verdict({**data["measurements"]["replay"], "goldens": [unchanged]})
    assert verdict == "BLOCK" and reasons[0].endswith(
        "the world is unchanged (every world tool answered as recorded): a model or harness change"
    )
    # The world moved, but the revision regressed with every call answered as recorded too: the
    # move does not explain it, so it is not stale.
    again = {**regressed, "recorded_world": {"verdict_found": "regressed"}}
    again |= {"recorded_model": "m1", "serving_model": "m2"}
    verdict, reasons, _ = replay_cell_verdict({**data["measurements"]["replay"], "goldens": [again]})
    assert verdict == "BLOCK" and reasons[0].endswith(
        "but replayed with every call answered as recorded it regressed too: the serving model changed "
        "(recorded with m1, replayed with m2)"
    )
    held = {**again, "recorded_world": {"verdict_found": "pass"}}
    verdict, _, _ = replay_cell_verdict({**data["measurements"]["replay"], "goldens": [held]})
    assert verdict == "WARN"


def instruction(**extra) -> dict:
    base = {
        "id": "i1",
        "label": "'go only when green' -> 'go unless red'",
        "served_to": ["g-1"],
        "shown_by": [],
    }
    return {**base, "model": None, **extra}


def covered(*instructions: dict, verdict: str = "PASS") -> dict:
    data = cell(golden("pass"), verdict=verdict)
    data["measurements"]["replay"] |= {
        "champion_revision": "c" * 64,
        "coverage": {"status": "measured", "instructions": list(instructions)},
    }
    return data


def test_coverage_is_recomputed_from_its_evidence_and_a_claimed_exercise_without_any_is_not_one():
    shown = replay_rule(covered(instruction(shown_by=["g-1"], status="exercised")))
    assert (shown.verdict, shown.unexercised) == ("PASS", ())
    forged = replay_rule(covered(instruction(status="exercised")))  # nothing showed it, no model ruled
    assert forged.verdict == "WARN" and forged.needs == "reason"
    assert forged.unexercised == ("'go only when green' -> 'go unless red'",)
    assert forged.reasons[0] == "not exercised by any blessed run: 'go only when green' -> 'go unless red'"
    wording = {"tier": "L3", "model": "m", "behaviour": "unchanged", "exercised_by": []}
    assert replay_rule(covered(instruction(model=wording))).verdict == "PASS"
    elsewhere = {**wording, "behaviour": "changed"}
    assert replay_rule(covered(instruction(model=elsewhere))).verdict == "WARN"
    strangers = {**elsewhere, "exercised_by": ["g-9"]}  # a run that was never served it
    assert replay_rule(covered(instruction(model=strangers))).verdict == "WARN"
    assert replay_rule(covered(instruction(model={**elsewhere, "exercised_by": ["g-1"]}))).verdict == "PASS"
    unread = instruction(served_to=[], model={**wording})
    assert replay_rule(covered(unread)).verdict == "WARN"  # a run never served it cannot exercise it


def test_a_recorded_wording_ruling_is_recomputed_against_the_instructions_text_and_overruled():
    """A bundle whose model ruled wording only, on an instruction whose text changes its action and
    recipient, recomputes to WARN (whatever the bundle recorded); a true rewording keeps it."""
    wording = {
        "tier": "L3",
        "model": "m",
        "behaviour": "unchanged",
        "exercised_by": [],
        "prompt_digest": "d" * 64,
    }
    step = "If the status is red, page the on-call engineer."
    moved = instruction(
        kind="changed", old=step, new=step.replace("page the on-call engineer", "post in the ops channel")
    )
    forged = replay_rule(
        covered({**moved, "model": wording, "status": "wording", "differences": []}, verdict="PASS")
    )
    assert forged.verdict == "WARN" and forged.needs == "reason"
    assert (
        "(it changes actions, objects or recipients: page, on-call, engineer -> post, ops, channel)"
        in forged.reasons[0]
    )
    claimed = {**wording, "behaviour": "changed", "exercised_by": ["g-1"]}  # nothing showed it
    assert replay_rule(covered({**moved, "model": claimed})).verdict == "WARN"
    same = instruction(
        kind="changed", old=step, new=step.replace("the on-call engineer", "the engineer on call")
    )
    assert replay_rule(covered({**same, "model": wording})).verdict == "PASS"


def test_a_change_cell_without_coverage_warns_and_a_malformed_one_blocks():
    data = covered()
    del data["measurements"]["replay"]["coverage"]
    missing = replay_rule(data)
    assert missing.verdict == "WARN" and "coverage was not recorded" in missing.reasons[0]
    data["measurements"]["replay"]["coverage"] = {"status": "measured"}
    assert replay_rule(data).verdict == "BLOCK"
    data["measurements"]["replay"]["coverage"] = {"status": "not_applicable"}
    assert replay_rule(data).verdict == "PASS"


def test_a_blocked_change_cannot_be_approved_without_an_audited_override(tmp_path, library_factory):
    with regress_world(tmp_path, library_factory) as w:
        w.bless(w.record(), ['keeps "no fees"'])
        candidate = edited(w.files(), '3. Mention "no fees" for transfers under 1000 EUR.\n', "")
        replay = replay_cell(
            "fx-quote",
            w.files(),
            candidate,
            w.control.runs_dir / "goldens",
            w.server.client("agent", "judge"),
            JudgeTiers("judge-l1", "judge-l2", "judge-l3"),
            settings=ReplaySettings(side_effects=SIDE_EFFECT_TOOLS | {"send_quote"}),
        )
        assert replay["verdict"] == "BLOCK"
        control = w.control
        change, _ = control.propose("fx-quote", "optimizer", candidate, {**ready_body(), "replay": replay})
        assert control.passport(change).state == "blocked" and control.passport(change).overridable
        with pytest.raises(ApprovalRefused, match=r"is blocked \(replay fail: a blessed run regressed"):
            control.approve("fx-quote", "ana", change.id)
        with pytest.raises(ApprovalRefused, match="--override-reason"):
            control.approve(
                "fx-quote", "ana", change.id, accept_missing="looks fine"
            )  # accepting missing cells is not an override
        refused = [e for e in AuditLog(control.runs_dir).entries() if e.get("action") == "approve-refused"]
        assert len(refused) == 2 and all(
            "is blocked (replay fail: a blessed run regressed" in e.get("reason") for e in refused
        )
        assert control.live_revision("fx-quote") == change.champion_revision
        outcome = control.approve(
            "fx-quote", "ana", change.id, override_reason="fees are now shown on the invoice"
        )
        assert outcome.to_revision == change.candidate_revision
        lines = [e for e in AuditLog(control.runs_dir).entries() if e.get("change_id") == change.id]
        promoted = [e for e in lines if e.get("action") in ("promote-intent", "promote")]
        assert len(promoted) == 2 and all(
            e.get("reason").endswith("overrode failed replay: fees are now shown on the invoice")
            and e.get("override_reason") == "fees are now shown on the invoice"
            and e.get("overridden") == ["replay"]
            and e.get("passport") == "blocked"
            and e.get("actor") == "ana"
            for e in promoted
        )
        assert AuditLog(control.runs_dir).verify().ok


def test_a_warned_change_needs_acknowledgement_whose_reason_is_audited(control):
    files = control.champion_files("alpha")
    files["SKILL.md"] += b"Better.\n"
    warned = cell(golden("contested", note="L2 and L3 disagree"), verdict="WARN")["measurements"]
    change, _ = control.propose("alpha", "optimizer", files, {**ready_body(), **warned})
    verdict = control.passport(change)
    assert verdict.state == "needs-acknowledgement" and [c.name for c in verdict.missing] == ["replay"]
    assert control.refusal(change) is None  # the button stays live: the form asks for the reason
    with pytest.raises(ApprovalRefused, match=r"needs acknowledgement: 1 cell\(s\) missing: replay"):
        control.approve("alpha", "ana", change.id)
    with pytest.raises(ApprovalRefused, match=r'^a reason is required: --accept-missing "REASON"'):
        control.approve("alpha", "ana", change.id, accept_missing="   ")
    control.approve("alpha", "ana", change.id, accept_missing="the contested line is a rewording")
    intent = next(e for e in AuditLog(control.runs_dir).entries() if e.get("action") == "promote-intent")
    assert intent.get("reason").endswith("accepted missing replay: the contested line is a rewording")
    assert intent.get("accepted_missing") == ["replay"]
