"""Regression replay in the UI: the Traces page (bless, review the teacher's criteria, approve,
retire) and the replay cell on the review card, with the override a BLOCK needs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass

import httpx
import pytest

from ingot.cli.serve import UIOptions, ui_app
from optimize.control import evidence
from optimize.control.audit import AuditLog
from optimize.measure.cascade import JudgeTiers
from optimize.measure.golden_criteria import draft_review
from optimize.measure.level0 import SIDE_EFFECT_TOOLS
from optimize.measure.regress import ReplaySettings, replay_cell
from optimize.measure.replay_verdict import ruling_text
from optimize.models.ledger import UsageLedger
from scripts.bench_regress import PRICES
from tests.conftest import running_asgi
from tests.optimize.conftest import ready_body
from tests.regress_sim import NO_FEES_STEP, TIERS, edited, regress_world
from tests.ui.conftest import TOKEN, signed_in


@dataclass
class UIWorld:
    ui: str
    w: object
    options: UIOptions  # its sign-in links
    http: httpx.Client  # signed in, as a person's browser is


@pytest.fixture
def ui_world(tmp_path, library_factory) -> Iterator[UIWorld]:
    with regress_world(tmp_path, library_factory) as w:
        teacher = w.server.client("teacher")
        options = UIOptions(
            "tester",
            TOKEN,
            runs_env=dict(os.environ),
            traces=w.store,
            drafter=lambda golden: draft_review(teacher, golden)[0],
        )
        app = ui_app(w.library, w.control, "http://127.0.0.1:1/mcp", (), options)
        with running_asgi(app, lifespan="off") as ui, closing(signed_in(ui, options)) as http:
            yield UIWorld(ui, w, options, http)


def blocked_change(w):
    """A pending rewrite that drops a required step, with its real replay cell (BLOCK)."""
    candidate = edited(w.files(), NO_FEES_STEP, "")
    replay = replay_cell(
        "fx-quote",
        w.files(),
        candidate,
        w.control.runs_dir / "goldens",
        w.server.client("agent", "judge", ledger=UsageLedger("ui", PRICES)),
        JudgeTiers(TIERS["L1"], TIERS["L2"], TIERS["L3"]),
        settings=ReplaySettings(side_effects=SIDE_EFFECT_TOOLS | {"send_quote"}),
    )
    measurements = {**ready_body(), "replay": replay}
    return w.control.propose("fx-quote", "optimizer", candidate, measurements)[0]


def test_bless_a_run_review_the_teachers_criteria_and_approve_them_in_the_browser(
    ui_world, page, screenshots
):
    w = ui_world.w
    record = w.record()
    page.goto(f"{ui_world.ui}/traces")
    row = page.locator(f"[data-testid=trace][data-trace='{record.id}']")
    row.get_by_test_id("bless").click()
    page.wait_for_url("**/traces?skill=fx-quote&done=blessed*")
    golden = page.get_by_test_id("golden").first
    assert "criteria teacher-drafted" in golden.get_by_test_id("criteria-status").inner_text()
    drafted = golden.get_by_test_id("criteria").input_value()
    assert 'keeps "no fees"' in drafted  # the term the answer quotes
    facts = golden.get_by_test_id("facts").input_value()
    assert facts.startswith("1 | get_rate result | 1.0842")
    golden.get_by_test_id("criteria").fill('keeps "no fees"\nkeeps "State the amount in both currencies"')
    golden.get_by_test_id("approve-criteria").click()
    page.wait_for_url("**done=criteria*")
    assert "human-approved by tester (ui)" in page.get_by_test_id("criteria-status").first.inner_text()
    assert page.locator(f"[data-trace='{record.id}'] a.chip").inner_text().startswith("golden g-")
    page.screenshot(path=str(screenshots / "traces.png"), full_page=True)
    (stored,), _ = w.admin.store.active("fx-quote")
    assert [c.text for c in stored.review.criteria] == [
        'keeps "no fees"',
        'keeps "State the amount in both currencies"',
    ]
    actions = [e.get("action") for e in AuditLog(w.control.runs_dir).entries()]
    assert actions == ["golden-bless", "golden-approve"]


def test_a_blocked_change_shows_its_replay_cell_and_needs_an_audited_override(ui_world, page, screenshots):
    w = ui_world.w
    w.bless(w.record(), ['keeps "no fees"'], [{"step": 1, "label": "EUR/USD rate", "value": "1.0842"}])
    change = blocked_change(w)
    page.goto(f"{ui_world.ui}/review")
    page.get_by_test_id("details").locator("summary").first.click()  # a blocked card folds its evidence
    cell = page.get_by_test_id("replay")
    assert cell.get_by_test_id("replay-verdict").inner_text() == "fail"  # the passport's word
    assert "regressed" in [f.inner_text() for f in cell.get_by_test_id("replay-finding").all()]
    state = page.locator("[data-testid=review-card][data-skill=fx-quote]").get_attribute("data-state")
    replay_cell_state = page.locator("[data-testid=passport-cell][data-cell=replay]").get_attribute(
        "data-state"
    )
    assert (state, replay_cell_state) == ("blocked", "fail")
    card = page.locator("[data-testid=review-card][data-skill=fx-quote]")
    # "pass" appears only as the state of a cell that passed, never as the change's or the replay's verdict.
    elsewhere = card.evaluate(
        """card => [...card.querySelectorAll('*')]
             .filter(e => /^\\s*(pass(ed|es)?|ok)\\s*$/i.test(e.textContent))
             .filter(e => !e.closest('[data-testid=passport-cell]')).map(e => e.outerHTML)"""
    )
    assert elsewhere == []
    row = cell.get_by_test_id("replay-golden")
    assert row.get_attribute("data-tier") == "L3" and "no fees" in row.inner_text()
    assert "passes its own goldens in 100% of 2 controls" in cell.get_by_test_id("noise-floor").inner_text()
    assert "judging everything with the strongest tier" in cell.get_by_test_id("replay-cost").inner_text()
    assert cell.get_by_test_id("replay-rationale").inner_text().startswith("Scripted rationale")
    # The model rulings the fail rests on (L2 and L3 agreeing), each with its prompt's digest.
    bundle = evidence.load(w.control.runs_dir / w.control.queue.get("fx-quote").evidence_path).data
    decided = bundle["measurements"]["replay"]["decided_by"]
    assert [(r["tier"], r["model"]) for r in decided] == [("L2", TIERS["L2"]), ("L3", TIERS["L3"])]
    shown = [li.inner_text() for li in cell.get_by_test_id("replay-ruling").all()]
    assert shown == [ruling_text(r) for r in decided]
    assert all(
        f"prompt sha256 {r['prompt_digest'][:12]}" in said for r, said in zip(decided, shown, strict=True)
    )
    page.screenshot(path=str(screenshots / "review-replay.png"), full_page=True)
    assert page.get_by_test_id("approve").inner_text() == "Override & promote…"
    forced = ui_world.http.post(
        f"{ui_world.ui}/changes/fx-quote/approve",
        data={"change_id": change.id},
        headers={"Origin": ui_world.ui},
    )
    assert forced.status_code == 422 and "is blocked (replay fail: a blessed run regressed" in forced.text
    page.get_by_test_id("approve").click()
    page.get_by_test_id("override-reason").fill("fees are printed on the invoice now")
    page.get_by_test_id("confirm-approve").click()
    page.wait_for_url("**/review?done=approved&skill=fx-quote")
    page.goto(f"{ui_world.ui}/history/fx-quote")
    assert (
        "overrode failed replay: fees are printed on the invoice now"
        in page.get_by_test_id("timeline").inner_text()
    )


def test_golden_writes_are_same_origin_and_bad_ids_are_not_found(ui_world):
    w = ui_world.w
    stored = w.bless(w.record(), ['keeps "no fees"'])
    refused = httpx.post(f"{ui_world.ui}/goldens/{stored.id}/retire", data={"reason": "x"})
    assert refused.status_code == 403 and w.admin.store.find(stored.id).review.state == "active"
    assert ui_world.http.post(f"{ui_world.ui}/traces/tr-nope/bless").status_code == 404
    assert ui_world.http.post(f"{ui_world.ui}/goldens/../retire", data={"reason": "x"}).status_code == 404
    no_reason = ui_world.http.post(f"{ui_world.ui}/goldens/{stored.id}/retire", data={"reason": " "})
    assert no_reason.status_code == 400 and "needs a reason" in no_reason.text
    bad_fact = ui_world.http.post(
        f"{ui_world.ui}/goldens/{stored.id}/approve",
        data={"criteria": "keeps it", "facts": "one | two"},
    )
    assert bad_fact.status_code == 400 and "step | label | value" in bad_fact.text
    wrong_value = ui_world.http.post(
        f"{ui_world.ui}/goldens/{stored.id}/approve",
        data={"criteria": "keeps it", "facts": "1 | rate | 9.99"},
    )
    assert wrong_value.status_code == 422 and "not in step 1" in wrong_value.text
    retired = ui_world.http.post(f"{ui_world.ui}/goldens/{stored.id}/retire", data={"reason": "obsolete"})
    assert retired.status_code == 303 and w.admin.store.find(stored.id).review.state == "retired"
