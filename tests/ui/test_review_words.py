"""Every word on the review card is so, in headless Chromium against the real UI: stale evidence
reads stale (never failed) and says how to re-measure, commands render as code, nothing blocked
is green, the headline names a failure it would otherwise hide, a new skill's score cards agree
with its routing cell, a removal's warning fits a removal, and the replay section reads as
prose with no saving claimed for judging that failed."""

from __future__ import annotations

from optimize.control.quarantine import propose_removal
from tests.optimize.conftest import NO_CODE, ab, checks, ready_body, replay_blocked, routing, skill_md
from tests.ui.conftest import GOOD, TOKEN, rewrite
from tests.ui.test_browser import card

GREEN = "rgb(23, 128, 61)"  # --ok in ingot.css
OTHER = "git-commit-messages"
NEW = "kiln-firing"


def text_colour(locator) -> str:
    return locator.evaluate("e => getComputedStyle(e).color")


def background(locator) -> str:
    return locator.evaluate("e => getComputedStyle(e).backgroundColor")


def test_a_hand_edit_of_the_live_skill_makes_the_card_stale_with_how_to_re_measure(world, page):
    change = world.change(GOOD)
    measured_on = world.control.live_revision(GOOD)
    skill_md_path = world.root / GOOD / "SKILL.md"
    skill_md_path.write_text(skill_md_path.read_text() + "\nEdited by hand.\n")
    live_now = world.control.live_revision(GOOD)
    page.goto(f"{world.ui}/review")
    stale = card(page, GOOD)
    assert stale.get_attribute("data-state") == "stale"
    assert stale.get_by_test_id("state").inner_text() == "stale"
    summary = stale.get_by_test_id("passport-summary").inner_text()
    assert summary.startswith(
        f"Passport: stale — the live skill changed since this evidence was measured (measured on "
        f"{measured_on[:12]}, live now {live_now[:12]}): re-measure with ingot evaluate {GOOD} "
        f"--change {change.id}"
    ), summary
    assert "failed" not in summary and "`" not in summary
    states = {c.get_attribute("data-state") for c in stale.get_by_test_id("passport-cell").all()}
    assert states <= {"stale", "n/a"} and "stale" in states
    assert stale.get_by_test_id("passport-summary").locator("code").inner_text() == (
        f"ingot evaluate {GOOD} --change {change.id}"
    )
    assert stale.get_by_test_id("approve").is_disabled()
    row = page.locator(f"[data-testid=queue-row][data-queue-skill='{GOOD}']")
    assert row.get_attribute("data-state") == "stale" and "cannot be approved" in row.inner_text()
    # The confirmation page says the same, with the command as code, not in backticks.
    page.goto(f"{world.ui}/changes/{GOOD}/confirm?change_id={change.id}")
    refusal = page.get_by_test_id("refusal")
    assert "is stale: the live skill changed since this evidence was measured" in refusal.inner_text()
    assert "`" not in page.locator("main").inner_text()
    assert refusal.locator("code").inner_text() == f"ingot evaluate {GOOD} --change {change.id}"


def test_passport_cells_render_their_commands_as_code_not_backticks(world, page):
    files = {"SKILL.md": skill_md(NEW, "Plans glaze firings for an electric ceramic kiln.", "Ramp slowly.")}
    world.control.propose(NEW, "agent", files, checks())
    page.goto(f"{world.ui}/review")
    new = card(page, NEW)
    cells = new.get_by_test_id("passport")
    assert "`" not in cells.inner_text()
    codes = [c.inner_text() for c in cells.locator("code").all()]
    assert "ingot evaluate SKILL --change ID" in codes and "routing:" in codes


def test_a_blocked_card_with_a_flat_headline_is_not_green_and_names_what_fails(world, page):
    flat = ab([0.9, 0.6, 0.9], [0.9, 0.6, 0.9], fail_case=1)  # same scores; case h1 now fails
    world.control.propose(OTHER, "optimizer", rewrite(world.root, OTHER, "FLAT"), {**checks(), **flat})
    page.goto(f"{world.ui}/review")
    blocked = card(page, OTHER)
    assert blocked.get_attribute("data-state") == "blocked"
    shift = blocked.get_by_test_id("scorecard-shift")
    assert shift.inner_text().splitlines()[1] == "+0.000" and shift.get_attribute("data-trend") == "flat"
    assert text_colour(shift.locator(".value")) != GREEN
    failing = blocked.get_by_test_id("scorecard-failing")
    assert failing.inner_text() == ("held-out A/B fails: regresses held-out task(s) the champion passed: h1")
    assert failing.is_visible()  # beside the headline, not in the folded evidence


def test_the_override_button_is_a_warning_not_the_green_approve(world, page):
    measurements = {**ready_body(), **replay_blocked()}
    world.control.propose(OTHER, "optimizer", rewrite(world.root, OTHER, "OVERRIDE"), measurements)
    page.goto(f"{world.ui}/review")
    button = card(page, OTHER).get_by_test_id("approve")
    assert button.inner_text() == "Override & promote…"
    assert background(button) != GREEN
    assert background(card(page, GOOD).get_by_test_id("approve")) == GREEN
    button.click()
    confirm = page.get_by_test_id("confirm-approve")
    assert confirm.inner_text().startswith("Override and ") and background(confirm) != GREEN


def test_a_new_skill_s_score_cards_show_what_its_routing_cell_was_judged_on(world, page):
    files = {"SKILL.md": skill_md(NEW, "Plans glaze firings for an electric ceramic kiln.", "Ramp slowly.")}
    world.control.propose(NEW, "agent", files, {**checks(), **routing(), **NO_CODE})
    page.goto(f"{world.ui}/review")
    new = card(page, NEW)
    routing_cell = new.locator("[data-testid=passport-cell][data-cell='routing impact']")
    assert routing_cell.get_attribute("data-state") == "pass"
    cards = new.get_by_test_id("scorecards")
    assert "missing" not in cards.inner_text()
    assert "top-1 of other skills' cases" in cards.inner_text()
    assert [n.inner_text() for n in cards.get_by_test_id("scorecard-n").all()] == ["n = 8", "n = 8"]


def test_a_removal_card_warns_about_what_goes_not_a_new_body(world, page):
    propose_removal(world.control, OTHER, "retired")
    page.goto(f"{world.ui}/review")
    risk = card(page, OTHER).get_by_test_id("risk")
    assert "new body" not in risk.inner_text()
    assert f"removes {OTHER}: agents that route to it get no skill" in risk.inner_text()
    assert "removes the skill: every line of it goes" in risk.inner_text()


def test_the_risk_summary_names_each_of_its_two_measures(world, page):
    page.goto(f"{world.ui}/review")
    risk = card(page, GOOD).get_by_test_id("risk").inner_text()
    assert "lines changed in the SKILL.md body (diff):" in risk
    assert "live body lines kept word for word: 100%" in risk
    assert "keeps 100% of its lines" not in risk


PAYLOAD = '{"model": "judge-l1", "messages": [{"role": "user", "content": "Judge this\\\\nreplay"}]}'


def failed_judging() -> dict:
    """A replay whose one judge call failed with an HTTP 500 echoing the request: contested."""
    error = f"L1 failed: http://127.0.0.1:9/v1 answered 500 for the judge role: no scripted answer {PAYLOAD}"
    golden = {
        "id": "g-1",
        "task": "Quote EUR/USD",
        "verdict_found": "contested",
        "evidence": "L0",
        "signature": ["s"],
        "controls": [],
        "tier": "L0",
        "verdict": "WARN",
        "why": f"contested: the judges did not settle it: L1 failed to answer ({error})",
        "decisions": [{"tier": "L1", "model": "judge-l1", "verdict": "skipped", "rationale": error}],
    }
    return {
        "replay": {
            "status": "measured",
            "verdict": "WARN",
            "goldens": [golden],
            "rationale": "undecided: 1 golden(s) replayed; decided without a model (L0). g-1: contested.",
            "rationale_by": {"tier": "L0", "model": None},
            "counterfactual": {"all_strongest_usd": 0.02, "judging_usd": 0.0, "saving": 1.0},
        }
    }


def test_the_replay_section_reads_as_prose_and_claims_no_saving_when_judging_failed(world, page):
    measurements = {**ready_body(), **failed_judging()}
    world.control.propose(OTHER, "optimizer", rewrite(world.root, OTHER, "REPLAYED"), measurements)
    page.goto(f"{world.ui}/review")
    replay = card(page, OTHER).get_by_test_id("replay")
    text = replay.inner_text()
    assert "\\n" not in text and '{"model"' not in text and "messages" not in text
    assert "(the model's request and reply are left out)" in text
    level = replay.get_by_test_id("replay-level").inner_text()
    assert level == "undecided: 1 judge call(s) failed (reached L0)"
    assert "decided without a model" not in text
    assert "not settled: no model decided them (L0 findings only)" in text
    assert "saved" not in text and "judging everything with the strongest tier" not in text
    assert replay.get_by_test_id("judging-failed").inner_text() == (
        "judging failed (1 judge call did not answer): no saving to claim"
    )


def test_the_optimize_disabled_note_renders_its_command_as_code(world, page):
    import os

    from ingot.cli.serve import UIOptions, ui_app
    from tests.conftest import running_asgi

    reasons = {
        "body": "no agent or teacher or judge model configured: set BASE_URL and AGENT_MODEL, TEACHER_MODEL, "
        "JUDGE_MODEL (see .env.example), then restart `ingot serve`",
        "description": "no teacher model configured: set BASE_URL and TEACHER_MODEL (see .env.example), "
        "then restart `ingot serve`",
    }  # what optimize_missing says on a machine with no model settings
    options = UIOptions("tester", TOKEN, runs_env=dict(os.environ), optimize=reasons)
    with running_asgi(ui_app(world.library, world.control, world.mcp, (), options), lifespan="off") as ui:
        for path, testid in ((f"/skills/{GOOD}", "optimize-blocked"), ("/runs", "run-blocked")):
            page.goto(f"{ui}{path}")
            note = page.get_by_test_id(testid)
            assert "`" not in note.inner_text() and note.inner_text().endswith("then restart ingot serve")
            assert note.locator("code").inner_text() == "ingot serve"


def test_the_card_says_which_significance_test_was_undefined_why_and_what_the_rule_used(world, page):
    same_gain = ab([0.2, 0.3, 0.2, 0.3], [0.7, 0.8, 0.7, 0.8])  # every delta +0.5: no variance
    measurements = {**ready_body(), **same_gain}
    world.control.propose(OTHER, "optimizer", rewrite(world.root, OTHER, "SAME"), measurements)
    page.goto(f"{world.ui}/review")
    scores = card(page, OTHER).get_by_test_id("scores")
    statistics = [s.inner_text() for s in scores.get_by_test_id("statistic").all()]
    assert "p undefined (every delta is the same: zero variance)" in statistics[0]
    rule = scores.get_by_test_id("significance-rule").inner_text()
    assert "both tests" not in rule
    assert "paired t-test (one-sided) undefined: every delta is the same: zero variance" in rule
    assert "so the rule used the exact sign-flip permutation (one-sided) alone" in rule


def test_the_traces_page_without_a_drafter_does_not_claim_no_teacher_is_configured(world, page):
    page.goto(f"{world.ui}/traces")  # the UI may have TEACHER_MODEL set and a client that could not start
    text = page.locator("main").inner_text()
    assert "No teacher model is configured" not in text
    assert (
        "No teacher drafts criteria in this UI (TEACHER_MODEL is unset, or its client could not start" in text
    )


def test_an_approved_removal_says_the_skill_is_no_longer_served(world, page):
    """Approving a removal serves nothing: the notice must not claim a new revision is served."""
    change = propose_removal(world.control, OTHER, "retired").change
    page.goto(f"{world.ui}/review")
    card(page, OTHER).get_by_test_id("approve").click()
    page.wait_for_url(f"**/changes/{OTHER}/confirm?change_id={change.id}")
    reason = page.get_by_test_id("accept-missing")
    if reason.count():
        reason.fill("retired on purpose")
    page.get_by_test_id("confirm-approve").click()
    page.wait_for_url(f"**/review?done=removed&skill={OTHER}")
    notice = page.get_by_role("status").inner_text()
    assert "Removed; the skill is no longer served" in notice, notice
    assert "new revision is being served" not in notice
    assert world.control.live_revision(OTHER) is None
