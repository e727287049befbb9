"""Every change's lifecycle map, rendered from its artifacts: lit only where an audit line or its
evidence bundle shows the stage happened, on the history page over real HTTP."""

from __future__ import annotations

import re

import httpx

from tests.ui.conftest import BLOCKED, GOOD
from ui import lifecycle


def stages(html: str, change_id: str) -> dict[str, tuple[bool, str]]:
    row = re.search(rf'data-change="{change_id}".*?</tr>', html, re.S)
    assert row, f"no lifecycle row for {change_id}"
    found = re.findall(r'<li class="(lit|dark)" data-stage="(\w+)" title="([^"]*)"', row.group(0))
    return {name: (cls == "lit", title) for cls, name, title in found}


def test_an_approved_then_rolled_back_change_lights_every_stage_and_says_how_its_watch_ended(world):
    change = world.change(GOOD)
    world.control.approve(GOOD, "reviewer", change.id)
    html = httpx.get(f"{world.ui}/history/{GOOD}").text
    live = stages(html, change.id)
    assert all(lit for lit, _ in live.values()), live
    assert "live now" in live["watched"][1] and "approved by reviewer" in live["decided"][1]
    assert "ready when approved" in live["judged"][1]
    world.control.rollback(
        GOOD, change.champion_revision, "reviewer", "too chatty", expected_live=change.candidate_revision
    )
    watched = stages(httpx.get(f"{world.ui}/history/{GOOD}").text, change.id)["watched"]
    assert watched[0] and "rollback by reviewer: too chatty" in watched[1]


def test_a_rejected_change_is_decided_but_never_promoted_or_watched(world):
    change = world.change(BLOCKED)
    world.control.reject(BLOCKED, "regresses case 2", "reviewer", change.id)
    life = stages(httpx.get(f"{world.ui}/history/{BLOCKED}").text, change.id)
    assert life["proposed"][0] and life["evidenced"][0] and life["decided"][0]
    assert "blocked" in life["judged"][1] and "rejected by reviewer" in life["decided"][1]
    assert not life["promoted"][0] and not life["watched"][0]


def test_a_waiting_change_is_dark_from_decided_on(world):
    change = world.change(GOOD)
    life = stages(httpx.get(f"{world.ui}/history/{GOOD}").text, change.id)
    assert [name for name, (lit, _) in life.items() if lit] == ["proposed", "evidenced", "judged"]


def test_without_its_bundle_the_judged_stage_is_lit_only_by_the_approval_s_audit_line(world):
    change = world.change(GOOD)
    world.control.approve(GOOD, "reviewer", change.id)
    lives = lifecycle.for_skill(
        world.control.history(GOOD), {}, world.control.thresholds, change.candidate_revision
    )
    (life,) = [x for x in lives if x.change_id == change.id]
    by_name = {s.name: s for s in life.stages}
    assert by_name["judged"].lit and by_name["judged"].detail == "ready when approved"  # the intent line
    assert not by_name["evidenced"].lit and by_name["promoted"].lit and life.decision == "approved"
    rejected = world.change(BLOCKED)
    world.control.reject(BLOCKED, "no", "reviewer", rejected.id)
    lives = lifecycle.for_skill(world.control.history(BLOCKED), {}, world.control.thresholds, None)
    (life,) = [x for x in lives if x.change_id == rejected.id]
    judged = next(s for s in life.stages if s.name == "judged")
    assert not judged.lit and "not on this machine" in judged.detail  # nothing on disk says: dark


def test_a_withheld_change_reads_as_set_aside_never_as_waiting(world):
    from tests.ui.conftest import rewrite

    ready = world.change(GOOD)
    proposed = world.control.propose(GOOD, "optimizer", rewrite(world.root, GOOD, "NEWER-RULE"), {})
    assert proposed.withheld and world.control.queue.get(GOOD).id == ready.id  # worse than the ready one
    html = httpx.get(f"{world.ui}/history/{GOOD}").text
    assert f'data-change="{proposed.change.id}" data-decision="withheld"' in html
    row = html.split(f'data-change="{proposed.change.id}"')[1].split("</tr>")[0]
    assert "withheld" in row and "waiting" not in row.split("</td>")[0]
    assert "withheld: set aside without a decision" in stages(html, proposed.change.id)["decided"][1]
    still = html.split(f'data-change="{ready.id}"')[1].split("</tr>")[0]
    assert "waiting" in still.split("</td>")[0]  # the ready change is the one that waits
