"""The Library's search and filters, in headless Chromium with JavaScript turned off (a filtered
view is a GET URL a person can bookmark), and each skill's revision count and revision list."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest

from optimize.control.audit import AuditEntry
from optimize.control.lock import change_lock
from tests.ui.conftest import BLOCKED, GOOD, sign_in_to_the_world
from ui.revisions import revisions


@pytest.fixture
def plain(browser, request):
    """A page with JavaScript off: everything here must work from links and GET forms alone."""
    context = browser.new_context(java_script_enabled=False, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    sign_in_to_the_world(page, request)
    yield page
    context.close()


def listed(page) -> list[str]:
    return [row.get_attribute("data-skill") for row in page.get_by_test_id("skill-row").all()]


def test_the_library_filters_by_name_state_pending_and_autonomy_without_javascript(world, plain):
    page = plain
    served = sorted(world.library.skills())
    page.goto(f"{world.ui}/library")
    assert listed(page) == served
    page.get_by_test_id("filter-name").fill("NOTES")  # any case, any part of the name
    page.get_by_test_id("filter-submit").click()
    page.wait_for_url("**/library?*")
    assert parse_qs(urlparse(page.url).query)["name"] == ["NOTES"]
    assert listed(page) == [GOOD]
    assert (
        page.get_by_test_id("filter-summary")
        .inner_text()
        .startswith(f"Showing 1 of {len(served)} skills where name ~ 'NOTES'.")
    )
    assert page.get_by_test_id("filter-name").input_value() == "NOTES"  # the form keeps what was asked

    page.goto(f"{world.ui}/library?state=blocked")
    assert listed(page) == [BLOCKED]
    assert page.get_by_test_id("change-state").inner_text() == "pending: blocked"
    assert page.get_by_test_id("filter-state").input_value() == "blocked"
    page.goto(f"{world.ui}/library?state=ready")
    assert listed(page) == [GOOD]

    page.goto(f"{world.ui}/library?pending=no")
    assert listed(page) == [s for s in served if s not in (GOOD, BLOCKED)]
    page.goto(f"{world.ui}/library?pending=yes&state=in+step")
    assert listed(page) == [BLOCKED, GOOD]

    page.goto(f"{world.ui}/library?autonomy=supervised")
    assert listed(page) == []
    with change_lock(world.control.runs_dir):
        world.control.autonomy.allow(GOOD, "description", "supervised", "operator")
        for _ in range(3):
            world.control.autonomy.record(GOOD, "description", "clean", "test", "earned")
    page.reload()
    assert listed(page) == [GOOD]
    row = page.locator(f"[data-testid=skill-row][data-skill='{GOOD}']")
    assert row.get_by_test_id("skill-autonomy").inner_text() == "body manual · description supervised"


def test_a_skill_whose_folder_is_laid_out_otherwise_is_never_shown_in_step(world, plain):
    """Ingot put GOOD live; a chmod keeps its bytes (and the served revision) but not the layout
    Ingot wrote: the Library says so, with what differs, and the state filter finds it."""
    world.control.approve(GOOD, "reviewer", world.control.queue.get(GOOD).id)
    (world.root / GOOD / "SKILL.md").chmod(0o600)
    plain.goto(f"{world.ui}/library?state=laid+out+otherwise")
    assert listed(plain) == [GOOD]
    chip = plain.get_by_test_id("skill-state").locator(".chip")
    assert chip.inner_text() == "laid out otherwise"
    assert "SKILL.md mode 0600, not 0644" in chip.get_attribute("title")
    (world.root / GOOD / "SKILL.md").chmod(0o644)
    plain.reload()
    assert listed(plain) == []
    plain.goto(f"{world.ui}/library?state=in+step&name={GOOD}")
    assert listed(plain) == [GOOD]


def test_filters_that_match_nothing_say_so_and_link_to_clear_them(world, plain):
    page = plain
    page.goto(f"{world.ui}/library?name=zzz&state=blocked")
    summary = page.get_by_test_id("filter-summary")
    assert summary.inner_text().startswith("No skill matches name ~ 'zzz', state = blocked.")
    assert page.get_by_test_id("skill-row").count() == 0
    summary.get_by_role("link", name="Clear the filters").click()
    page.wait_for_url("**/library")
    assert listed(page) == sorted(world.library.skills())
    assert page.get_by_test_id("filter-summary").count() == 0


def test_a_filter_value_outside_the_choices_is_one_line_naming_them(world):
    response = world.http.get(f"{world.ui}/library?state=bogus", headers={"Accept": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"] == (
        "unknown state 'bogus': choose one of in step, drifted, laid out otherwise, not served, "
        "ready, needs-acknowledgement, blocked, stale"
    )
    page = world.http.get(f"{world.ui}/library?autonomy=sometimes")
    assert page.status_code == 400 and "unknown autonomy level &#39;sometimes&#39;" in page.text


def test_each_skill_counts_its_revisions_and_links_to_their_list(world, page):
    before = world.library.get(GOOD).revision
    change = world.change(GOOD)
    world.control.approve(GOOD, "alice", change.id)
    world.control.rollback(GOOD, before, "bob", "the new rule was too strict")
    world.library.reload()

    page.goto(f"{world.ui}/library?name={GOOD}")
    row = page.locator(f"[data-testid=skill-row][data-skill='{GOOD}']")
    assert row.get_by_test_id("revisions-link").inner_text() == "2 revisions"
    other = page.goto(f"{world.ui}/library?name=csv")
    assert other.ok and page.get_by_test_id("revisions-link").inner_text() == "1 revision"

    page.goto(f"{world.ui}/library?name={GOOD}")
    page.get_by_test_id("revisions-link").click()
    page.wait_for_url(f"**/skills/{GOOD}/revisions")
    rows = page.get_by_test_id("revision").all()
    assert [r.get_attribute("data-revision") for r in rows] == [before, change.candidate_revision]
    now, replaced = (r.inner_text() for r in rows)
    assert "live now" in now and "bob" in now and "rollback" in now and "the new rule was too strict" in now
    assert "alice" in replaced and f"promote of {change.id}" in replaced and "live now" not in replaced
    page.get_by_test_id("history-link").click()
    page.wait_for_url(f"**/history/{GOOD}")


def entry(seq: int, **fields) -> AuditEntry:
    return AuditEntry(seq, f"2026-12-0{seq}T10:00:00+00:00", fields, "", "")


def test_a_revision_nobody_approved_is_listed_and_says_how_it_went_live():
    first = entry(
        1, action="promote", outcome="done", skill="a", from_revision="r0", to_revision="r1", actor="al"
    )
    found = revisions([first], "r2")  # edited by hand since: r2 is live and no switch put it there
    assert [(r.revision, r.live, r.origin) for r in found] == [
        ("r2", True, "live now, put there outside change control (drift)"),
        ("r1", False, None),
        ("r0", False, "live before Ingot's first change to this skill"),
    ]
    untouched = revisions([], "r9")
    assert [(r.revision, r.origin) for r in untouched] == [
        ("r9", "live as found: Ingot has not changed this skill")
    ]
    proposed = entry(2, action="propose", skill="a", from_revision="r1", to_revision="r3")
    assert "r3" not in {r.revision for r in revisions([first, proposed], "r1")}  # not live yet
