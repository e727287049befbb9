"""A supervised change's review card counts down to the end of its window, in Debian's Chromium;
a manual change has no countdown (a person decides)."""

from __future__ import annotations

import datetime as dt

from mcp_server.skillmd import with_description
from optimize.control.lock import change_lock
from tests.optimize.control.test_autonomy import green
from tests.ui.conftest import GOOD
from tests.ui.test_browser import card

SKILL = "git-commit-messages"


def new_description(world) -> dict[str, bytes]:
    files = world.control.champion_files(SKILL)
    described = "Writes commit messages from staged diffs. Use for git commits."
    files["SKILL.md"] = with_description(files["SKILL.md"].decode(), described).encode()
    return files


def test_a_supervised_change_counts_down_to_its_window_end_and_a_manual_one_does_not(world, page):
    world.control.review_window_s = 3600
    with change_lock(world.control.runs_dir):
        world.control.autonomy.allow(SKILL, "description", "supervised", "operator")
        for _ in range(3):
            world.control.autonomy.record(SKILL, "description", "clean", "test", "earned")
    world.control.propose(SKILL, "optimizer", new_description(world), green())
    page.goto(f"{world.ui}/review")
    countdown = card(page, SKILL).get_by_test_id("countdown")
    deadline = dt.datetime.fromisoformat(countdown.get_attribute("data-deadline"))
    left = (deadline - dt.datetime.now(dt.UTC)).total_seconds()
    assert 3500 < left <= 3600
    first = countdown.inner_text()
    assert first.startswith("goes live in 59 min") or first.startswith("goes live in 1 h"), first
    page.wait_for_function(
        "([el, before]) => el.textContent !== before", arg=[countdown.element_handle(), first], timeout=5000
    )  # it ticks in the page, not only at render time
    assert "supervised" in card(page, SKILL).get_by_test_id("autonomy").inner_text()
    assert card(page, GOOD).get_by_test_id("countdown").count() == 0
