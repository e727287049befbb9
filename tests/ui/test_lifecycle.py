"""Every change's lifecycle map, rendered from its artifacts: lit only where an audit line or its
evidence bundle shows the stage happened; a rolled-back change stops on a warning chip; the row
says who decided, the passport's state then, and every failed cell overridden and missing cell
accepted, in the passport's words. Read as a person reads it: the history page over real HTTP,
and its text in Chromium."""

from __future__ import annotations

import html as html_mod
import re

from optimize.control.autopilot import Autopilot
from optimize.control.lock import change_lock
from optimize.control.quarantine import propose_removal
from tests.optimize.conftest import NO_CODE, ab, checks, ready_body, replay_blocked, routing
from tests.ui.conftest import BLOCKED, GOOD, rewrite
from ui import lifecycle


def stages(html: str, change_id: str) -> dict[str, tuple[str, str, str]]:
    """Each stage of the change's row: (its chip's style, what its chip reads, its tooltip)."""
    row = re.search(rf'data-change="{change_id}".*?</tr>', html, re.S)
    assert row, f"no lifecycle row for {change_id}"
    found = re.findall(r'<li class="(\w+)" data-stage="(\w+)" title="([^"]*)">([^<]*)</li>', row.group(0))
    return {
        name: (look, html_mod.unescape(chip), html_mod.unescape(title)) for look, name, title, chip in found
    }


def row_text(html: str, change_id: str) -> str:
    """The words of the row's first cell under the change id (the decision, what it accepted)."""
    cell = html.split(f'data-change="{change_id}"')[1].split("</td>")[0].split("<br>", 1)[1]
    return " ".join(html_mod.unescape(re.sub(r"<[^>]+>", " ", cell)).split())


def history(world, skill: str) -> str:
    return world.http.get(f"{world.ui}/history/{skill}").text


def test_an_approved_change_is_being_watched_while_live_and_stops_on_a_warning_chip_when_rolled_back(
    world, page
):
    change = world.change(GOOD)
    world.control.approve(GOOD, "reviewer", change.id)
    live = stages(history(world, GOOD), change.id)
    assert [chip for _, chip, _ in live.values()] == [
        "proposed", "evidenced", "judged", "approved", "live", "watching",
    ]  # fmt: skip
    assert live["watched"][0] == "now" and "live now" in live["watched"][2]  # under way, not done
    assert "approved by reviewer" in live["decided"][2] and live["judged"][2] == "ready when approved"
    world.control.rollback(
        GOOD, change.champion_revision, "reviewer", "too chatty", expected_live=change.candidate_revision
    )
    page.goto(f"{world.ui}/history/{GOOD}")
    row = page.locator(f"[data-testid=change-life][data-change='{change.id}']")
    chips = row.locator("ol.lifecycle li")
    assert chips.all_inner_texts() == ["proposed", "evidenced", "judged", "approved", "live", "rolled back"]
    assert [c.get_attribute("class") for c in chips.all()] == ["lit"] * 5 + ["warn"]
    assert "watched" not in chips.all_inner_texts()
    ended = row.get_by_test_id("ended").inner_text()
    assert ended.startswith(f"rolled back to {change.champion_revision[:12]} at ")
    assert ended.endswith("UTC by reviewer: too chatty")


def test_a_change_replaced_by_a_later_approval_was_watched_until_then(world):
    first = world.change(GOOD)
    world.control.approve(GOOD, "reviewer", first.id)
    later = world.control.propose(GOOD, "optimizer", rewrite(world.root, GOOD, "LATER"), ready_body()).change
    world.control.approve(GOOD, "ana", later.id)
    html = history(world, GOOD)
    look, chip, title = stages(html, first.id)["watched"]
    assert (look, chip) == ("lit", "watched")
    assert title.startswith(f"watched while live, until {later.id} replaced it at ") and "by ana" in title
    assert stages(html, later.id)["watched"][:2] == ("now", "watching")


def test_an_overridden_approval_s_row_names_the_failed_cells_it_overrode_and_why(world, page):
    world.control.reject(GOOD, "make room", "reviewer", world.change(GOOD).id)
    files = rewrite(world.root, GOOD, "OVERRIDE")
    measured = {**checks(), **routing(), **ab([0.2, 0.3, 0.1, 0.4], [0.9, 0.8, 0.7, 0.9])}
    change = world.control.propose(
        GOOD, "optimizer", files, {**measured, **replay_blocked(), **NO_CODE}
    ).change
    world.control.approve(
        GOOD,
        "ana",
        change.id,
        override_reason="fees are on the invoice now",
        accept_missing="no prices yet",
        accepting=["cost"],
    )
    page.goto(f"{world.ui}/history/{GOOD}")
    row = page.locator(f"[data-testid=change-life][data-change='{change.id}']")
    assert row.get_by_test_id("decision").inner_text() == "approved by ana"
    assert row.get_by_test_id("state-at-approval").inner_text() == "passport blocked when approved"
    assert (
        row.get_by_test_id("overridden").inner_text()
        == "approved by ana overriding failed replay: “fees are on the invoice now”"
    )
    assert (
        row.get_by_test_id("accepted-missing").inner_text()
        == "approved by ana accepting missing cost: “no prices yet”"
    )
    judged = row.locator("[data-stage=judged]").get_attribute("title")
    assert judged == "blocked when approved: replay fail (overridden); cost missing (accepted)"


def test_a_removal_says_removed_at_when_by_whom_never_none_or_live_now(world):
    skill = "csv-data-cleaning"
    change = propose_removal(world.control, skill, None).change
    world.control.approve(skill, "carol", change.id, accept_missing="nobody routes to it")
    html = history(world, skill)
    life = stages(html, change.id)
    assert life["promoted"][:2] == ("lit", "removed")
    assert re.fullmatch(
        r"removed at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC by carol: no longer served", life["promoted"][2]
    )
    assert life["watched"] == ("dark", "watched", "removed: nothing is served, so nothing is watched")
    row = html.split(f'data-change="{change.id}"')[1].split("</tr>")[0]
    assert "None" not in row and "live now" not in row
    live = " ".join(re.sub(r"<[^>]+>", " ", html.split('data-testid="live">')[1].split("</p>")[0]).split())
    assert re.fullmatch(
        r"Live revision: absent: this skill is not served \(removed at .* UTC by carol, #\d+\)", live
    )


def test_rejections_and_autonomy_s_approvals_say_who_decided(world):
    rejected = world.change(BLOCKED)
    world.control.reject(BLOCKED, "regresses case 2", "reviewer", rejected.id)
    assert row_text(history(world, BLOCKED), rejected.id) == "rejected by reviewer: “regresses case 2”"
    with change_lock(world.control.runs_dir):
        world.control.autonomy.allow(GOOD, "body", "auto", "operator")
        for _ in range(6):
            world.control.autonomy.record(GOOD, "body", "clean", "test", "earned")
    auto = world.change(GOOD)
    (step,) = Autopilot(world.control).tick()
    assert step.did == "promoted"
    html = history(world, GOOD)
    assert row_text(html, auto.id) == "approved automatically by autonomy passport ready when approved"
    assert "approved by autonomy" in stages(html, auto.id)["decided"][2]


def test_a_rejected_change_is_decided_but_never_promoted_or_watched(world):
    change = world.change(BLOCKED)
    world.control.reject(BLOCKED, "regresses case 2", "reviewer", change.id)
    life = stages(history(world, BLOCKED), change.id)
    assert [name for name, (look, _, _) in life.items() if look == "lit"] == [
        "proposed", "evidenced", "judged", "decided",
    ]  # fmt: skip
    assert "blocked" in life["judged"][2] and life["decided"][1] == "rejected"
    assert life["decided"][2].startswith("rejected by reviewer") and life["decided"][2].endswith(
        "regresses case 2"
    )


def test_a_waiting_change_is_dark_from_decided_on(world):
    change = world.change(GOOD)
    life = stages(history(world, GOOD), change.id)
    assert [name for name, (look, _, _) in life.items() if look == "lit"] == [
        "proposed",
        "evidenced",
        "judged",
    ]
    assert row_text(history(world, GOOD), change.id) == "waiting"


def test_without_its_bundle_the_judged_stage_is_lit_only_by_the_approval_s_audit_line(world):
    change = world.change(GOOD)
    world.control.approve(GOOD, "reviewer", change.id)
    lives = lifecycle.for_skill(
        world.control.history(GOOD), {}, world.control.thresholds, change.candidate_revision
    )
    (life,) = [x for x in lives if x.change_id == change.id]
    by_name = {s.name: s for s in life.stages}
    assert by_name["judged"].lit and by_name["judged"].detail == "ready when approved"  # the promote line
    assert not by_name["evidenced"].lit and by_name["promoted"].lit and life.decision == "approved"
    rejected = world.change(BLOCKED)
    world.control.reject(BLOCKED, "no", "reviewer", rejected.id)
    lives = lifecycle.for_skill(world.control.history(BLOCKED), {}, world.control.thresholds, None)
    (life,) = [x for x in lives if x.change_id == rejected.id]
    judged = next(s for s in life.stages if s.name == "judged")
    assert not judged.lit and "not on this machine" in judged.detail  # nothing on disk says: dark


def test_a_withheld_change_reads_as_set_aside_never_as_waiting(world):
    ready = world.change(GOOD)
    proposed = world.control.propose(GOOD, "optimizer", rewrite(world.root, GOOD, "NEWER-RULE"), {})
    assert proposed.withheld and world.control.queue.get(GOOD).id == ready.id  # worse than the ready one
    html = history(world, GOOD)
    assert f'data-change="{proposed.change.id}" data-decision="withheld"' in html
    assert row_text(html, proposed.change.id) == "withheld: set aside without a decision"
    decided = stages(html, proposed.change.id)["decided"]
    assert decided == ("dark", "withheld", "withheld: set aside without a decision")
    assert row_text(html, ready.id) == "waiting"  # the ready change is the one that waits
