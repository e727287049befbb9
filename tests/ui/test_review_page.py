"""The review page decides at a glance, in headless Chromium against the real UI and MCP servers:
the queue on top (ready changes first), champion and challenger score cards with their n, one
passport whose state is the only verdict, a change-risk summary from the diff for every change,
compact blocked cards, a chart with its axis and values, EVIDENCE.md inline, and an approval that
restates what will be served (and what missing evidence it accepts) before it serves it."""

from __future__ import annotations

import datetime as dt

from tests.conftest import wait_for
from tests.optimize.conftest import checks, skill_md
from tests.ui.conftest import BLOCKED, GOOD
from tests.ui.test_browser import card, served_revision
from ui.queue import age

NEW = "kiln-firing"


def propose_new_skill(world) -> None:
    """An agent's new skill with admission checks only: its quality and routing unmeasured."""
    files = {"SKILL.md": skill_md(NEW, "Plans glaze firings for an electric ceramic kiln.", "Ramp slowly.")}
    world.control.propose(NEW, "agent", files, checks())


def test_the_queue_lists_every_waiting_change_ready_first(world, page):
    propose_new_skill(world)
    page.goto(f"{world.ui}/review")
    rows = page.get_by_test_id("queue-row")
    # By name the blocked change would come first; by decision it comes last.
    assert [rows.nth(i).get_attribute("data-queue-skill") for i in range(rows.count())] == [
        GOOD,
        NEW,
        BLOCKED,
    ]
    states = [rows.nth(i).get_attribute("data-state") for i in range(3)]
    assert states == ["ready", "needs-acknowledgement", "blocked"]
    first = rows.first.inner_text()
    assert "body" in first and "optimizer" in first and "just now" in first and "a click" in first
    assert "create" in rows.nth(1).inner_text() and "a reason" in rows.nth(1).inner_text()
    assert rows.nth(2).inner_text().rstrip().endswith("cannot be approved")
    cards = page.get_by_test_id("review-card")
    assert [cards.nth(i).get_attribute("data-skill") for i in range(3)] == [GOOD, NEW, BLOCKED]
    rows.nth(2).get_by_role("link", name=BLOCKED).click()
    assert page.url.endswith(f"#change-{BLOCKED}")


def test_age_reads_as_a_reviewer_says_it():
    now = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
    assert age("2026-12-01T11:59:30+00:00", now) == "just now"
    assert age("2026-12-01T11:55:00+00:00", now) == "5 min ago"
    assert age("2026-12-01T09:00:00+00:00", now) == "3 h ago"
    assert age("2026-11-28T12:00:00+00:00", now) == "3 d ago"
    assert age("not a time", now) == "unknown"


def test_score_cards_show_champion_and_challenger_with_their_n(world, page):
    page.goto(f"{world.ui}/review")
    good = card(page, GOOD)
    champion = good.locator("[data-testid=scorecard][data-arm=champion]")
    challenger = good.locator("[data-testid=scorecard][data-arm=challenger]")
    assert champion.get_by_test_id("scorecard-value").inner_text() == "0.260"
    assert challenger.get_by_test_id("scorecard-value").inner_text() == "0.900"
    assert champion.get_by_test_id("scorecard-n").inner_text() == "n = 4"
    assert "passed 4/4" in challenger.inner_text() and "passed 0/4" in champion.inner_text()
    change = world.change(GOOD)
    assert change.champion_revision[:12] in champion.inner_text()
    assert change.candidate_revision[:12] in challenger.inner_text()
    assert good.get_by_test_id("scorecard-shift").inner_text().splitlines()[1] == "+0.640"
    # A new skill whose quality was not measured has no score: said, not drawn as zero.
    propose_new_skill(world)
    page.reload()
    assert "no score measured" in card(page, NEW).get_by_test_id("scorecards").inner_text()


def test_one_passport_is_the_verdict_in_one_vocabulary_with_p_values_people_read(world, page):
    propose_new_skill(world)
    page.goto(f"{world.ui}/review")
    good = card(page, GOOD)
    assert good.get_by_test_id("passport").count() == 1 and good.get_attribute("data-state") == "ready"
    assert good.get_by_test_id("state").inner_text() == "ready"
    assert good.get_by_test_id("passport-summary").inner_text().startswith("Passport: ready")
    cells = good.get_by_test_id("passport-cell")
    assert cells.count() == 6 and {c.get_attribute("data-state") for c in cells.all()} <= {"pass", "n/a"}
    statistics = " ".join(s.inner_text() for s in good.get_by_test_id("statistic").all())
    assert "p < 0.001" in statistics and "p = 0.062" in statistics
    text = page.locator("main").inner_text()
    assert "p = 0.000" not in text and "p=" not in text
    assert "gate" not in text.lower()  # the passport is the only verdict on the page
    for raw in ("routing_impact", "no_route_precision", "recall_at_3", "top1", "sandbox_checks", " ab "):
        assert raw not in text, raw  # cells and metrics are named as people read them
    new = card(page, NEW)
    assert new.get_attribute("data-state") == "needs-acknowledgement"
    missing = new.locator("[data-testid=passport-cell][data-state=missing]")
    assert {m.get_attribute("data-cell") for m in missing.all()} == {
        "held-out A/B",
        "routing impact",
        "sandbox checks",
    }
    assert "to measure:" in missing.first.inner_text()
    assert new.locator("[data-testid=passport-cell][data-cell=replay]").get_attribute("data-state") == "n/a"


def test_the_risk_summary_is_computed_from_the_diff_for_every_change_whatever_its_source(world, page):
    propose_new_skill(world)
    # An operator's rewrite with no evidence at all that keeps one line of the live body.
    folder = world.root / "git-commit-messages"
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    head, _, _ = files["SKILL.md"].decode().partition("\n---\n")
    files["SKILL.md"] = f"{head}\n---\n# Git commit messages\n\nWrite one line.\n".encode()
    world.control.propose("git-commit-messages", "operator", files, {})
    page.goto(f"{world.ui}/review")
    good = card(page, GOOD).get_by_test_id("risk").inner_text()
    assert "+2 / −0 lines in 1 file" in good and "live body lines kept word for word: 100%" in good
    assert card(page, GOOD).get_by_test_id("retention-warning").count() == 0
    new = card(page, NEW).get_by_test_id("risk").inner_text()
    assert "+7 / −0 lines in 1 file" in new and "a new skill" in new
    operator = card(page, "git-commit-messages")
    risky = operator.get_by_test_id("risk").inner_text()
    assert "lines changed in the SKILL.md body (diff):" in risky and "−" in risky
    assert "below RETENTION_WARN 50%" in operator.get_by_test_id("retention-warning").inner_text()


def test_a_blocked_card_is_compact_says_its_reason_once_and_no_element_calls_it_passing(world, page):
    page.goto(f"{world.ui}/review")
    blocked = card(page, BLOCKED)
    visible = blocked.inner_text()
    reason = "regresses held-out task(s) the champion passed: h1"
    assert visible.count(reason) == 1  # in the A/B cell only: the details are folded
    assert "Cannot be approved" not in visible  # the refusal would only repeat the failed cell
    assert blocked.get_attribute("data-state") == "blocked"
    assert blocked.get_by_test_id("state").inner_text() == "blocked"
    assert blocked.get_by_test_id("passport-summary").inner_text().startswith("Passport: blocked")
    details = blocked.get_by_test_id("details")
    assert details.get_attribute("open") is None and not blocked.get_by_test_id("diffs").is_visible()
    assert blocked.get_by_test_id("approve").get_attribute("title") == (
        "cannot be approved: see the passport above"
    )
    ab_cell = blocked.locator("[data-testid=passport-cell][data-cell='held-out A/B']")
    assert ab_cell.get_attribute("data-state") == "fail"
    # "pass" appears only as the state of a cell that passed, never as the change's verdict.
    elsewhere = blocked.evaluate(
        """card => [...card.querySelectorAll('*')].filter(e => /^\\s*pass(ed)?\\s*$/i.test(e.textContent)
             && !e.closest('[data-testid=passport-cell]')).map(e => e.outerHTML)"""
    )
    assert elsewhere == []
    passing = [c.get_attribute("data-cell") for c in blocked.locator("[data-state=pass]").all()]
    assert passing == ["safety"]
    assert card(page, GOOD).get_by_test_id("details").count() == 0  # a ready card keeps its evidence open


def test_the_delta_chart_has_an_axis_ticks_and_a_value_per_case(world, page):
    page.goto(f"{world.ui}/review")
    chart = card(page, GOOD).get_by_test_id("delta-chart")
    ticks = [t.text_content() for t in chart.get_by_test_id("chart-tick").all()]
    assert ticks == ["+1.0", "+0.5", "0", "-0.5", "-1.0"]
    values = [v.text_content() for v in chart.get_by_test_id("chart-value").all()]
    assert values == ["+0.70", "+0.55", "+0.70", "+0.61"]
    assert "Δ score" in chart.text_content() and chart.locator("rect").count() == 4


def test_evidence_md_is_rendered_inline(world, page):
    page.goto(f"{world.ui}/review")
    card(page, GOOD).get_by_test_id("evidence-link").click()
    page.wait_for_url("**/evidence/release-notes/*")
    rendered = page.get_by_test_id("evidence-md")
    assert rendered.locator("h1").inner_text().startswith("Evidence for release-notes (body change)")
    assert rendered.locator("h2", has_text="Significance").count() == 1
    assert "p < 0.001" in rendered.inner_text()
    assert not page.get_by_test_id("evidence-json").locator("pre").is_visible()  # folded, one click away


def test_approve_asks_for_a_confirmation_that_restates_what_will_be_served_then_returns_to_the_queue(
    world, page, screenshots
):
    change = world.change(GOOD)
    page.goto(f"{world.ui}/review")
    card(page, GOOD).get_by_test_id("approve").click()
    page.wait_for_url(f"**/changes/{GOOD}/confirm?change_id={change.id}")
    summary = page.get_by_test_id("confirm-summary").inner_text()
    assert f"serves {GOOD} at revision {change.candidate_revision[:12]}" in summary
    assert f"in place of {change.champion_revision[:12]}" in summary
    assert "+2 / −0 lines" in page.get_by_test_id("risk").inner_text()
    page.screenshot(path=str(screenshots / "confirm.png"), full_page=True)
    # Nothing is served on the way to the confirmation, and going back changes nothing.
    assert served_revision(world, GOOD) == change.champion_revision
    page.get_by_test_id("confirm-cancel").click()
    page.wait_for_url("**/review#change-release-notes")
    assert world.control.queue.get(GOOD) == change
    card(page, GOOD).get_by_test_id("approve").click()
    page.get_by_test_id("confirm-approve").click()
    page.wait_for_url(f"**/review?done=approved&skill={GOOD}")
    assert "Approved and promoted" in page.get_by_role("status").inner_text()
    wait_for(lambda: served_revision(world, GOOD) == change.candidate_revision)
    assert [r.get_attribute("data-queue-skill") for r in page.get_by_test_id("queue-row").all()] == [BLOCKED]
    page.get_by_test_id("decided").get_by_role("link").click()
    page.wait_for_url(f"**/history/{GOOD}")
    actions = [e.get_attribute("data-action") for e in page.get_by_test_id("timeline-entry").all()]
    assert [a for a in actions if a != "autonomy"][0] == "promote"


def test_a_confirmation_for_a_change_that_is_no_longer_waiting_is_a_conflict(world):
    change = world.change(GOOD)
    world.control.approve(GOOD, "tester", change.id)
    response = world.http.get(f"{world.ui}/changes/{GOOD}/confirm", params={"change_id": change.id})
    assert response.status_code == 409 and "no longer the one waiting" in response.text
    blocked = world.change(BLOCKED)
    page = world.http.get(f"{world.ui}/changes/{BLOCKED}/confirm", params={"change_id": blocked.id}).text
    assert 'data-testid="confirm-approve" disabled' in page


def test_approving_a_change_that_needs_acknowledgement_asks_which_cells_it_accepts_and_why(world, page):
    propose_new_skill(world)
    change = world.change(NEW)
    page.goto(f"{world.ui}/review")
    card(page, NEW).get_by_test_id("approve").click()
    page.wait_for_url(f"**/changes/{NEW}/confirm?change_id={change.id}")
    assert page.get_by_test_id("confirm-state").inner_text() == "needs-acknowledgement"
    accepted = [c.get_attribute("data-cell") for c in page.get_by_test_id("accepted-cell").all()]
    assert accepted == ["held-out A/B", "routing impact", "sandbox checks"]
    reason = page.get_by_test_id("accept-missing")
    assert reason.get_attribute("required") is not None
    page.get_by_test_id("confirm-approve").click()  # the browser refuses an empty reason
    assert page.url.endswith(f"confirm?change_id={change.id}") and world.control.live_revision(NEW) is None
    reason.fill("a first draft from the agent; we watch its traffic")
    page.get_by_test_id("confirm-approve").click()
    page.wait_for_url(f"**/review?done=approved&skill={NEW}")
    wait_for(lambda: served_revision(world, NEW) == change.candidate_revision)
    page.goto(f"{world.ui}/history/{NEW}")
    row = page.locator(f"[data-testid=change-life][data-change='{change.id}']")
    note = row.get_by_test_id("accepted-missing").inner_text()
    assert "accepting missing held-out A/B, routing impact, sandbox checks" in note
    assert "we watch its traffic" in note
    assert "needs-acknowledgement" in row.inner_text()
    timeline = page.get_by_test_id("timeline").inner_text()
    assert "accepted missing held-out A/B, routing impact, sandbox checks: a first draft" in timeline
    page.goto(f"{world.ui}/evidence/{NEW}/{change.evidence_path.split('/')[-2]}")
    approval = page.get_by_test_id("approval").inner_text()
    assert "while its passport was needs-acknowledgement" in approval
    assert "accepting missing held-out A/B, routing impact, sandbox checks" in approval


def test_a_forged_approval_without_a_reason_is_refused_and_audited(world):
    propose_new_skill(world)
    change = world.change(NEW)
    response = world.http.post(
        f"{world.ui}/changes/{NEW}/approve", data={"change_id": change.id}, follow_redirects=False
    )
    assert response.status_code == 422 and "needs acknowledgement" in response.text
    assert world.control.live_revision(NEW) is None
    refused = [e for e in world.control.history(NEW) if e.get("action") == "approve-refused"]
    assert refused and "held-out A/B" in refused[-1].get("reason")
