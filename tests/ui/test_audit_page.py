"""The Audit page in headless Chromium: the tamper-evident chain newest first, a page at a time,
with whether it verifies, and where it breaks and what to do when it does not."""

from __future__ import annotations

from optimize.control.lock import change_lock
from tests.ui.conftest import BLOCKED, GOOD


def rows(page) -> list[str]:
    return [row.inner_text() for row in page.get_by_test_id("audit-entry").all()]


def test_the_header_links_to_the_audit_log_newest_first_with_who_what_skill_and_change(world, page):
    page.goto(f"{world.ui}/review")
    page.locator("nav.top").get_by_role("link", name="Audit").click()
    page.wait_for_url("**/audit")
    lines = world.control.audit.entries()
    status = page.get_by_test_id("audit-status").inner_text()
    assert status.startswith(f"verified All {len(lines)} entries check out")
    assert lines[-1].hash[:16] in status
    entries = page.get_by_test_id("audit-entry")
    assert [int(e.get_attribute("data-line")) for e in entries.all()] == list(range(len(lines), 0, -1))
    newest = entries.first.inner_text()  # the fixture proposed the blocked change last
    assert "optimizer" in newest and "propose" in newest and BLOCKED in newest
    assert world.change(BLOCKED).id in newest and "verified" in newest
    assert GOOD in entries.last.inner_text()
    entries.first.get_by_role("link", name=BLOCKED).click()
    page.wait_for_url(f"**/history/{BLOCKED}")


def test_the_audit_log_is_shown_a_page_of_fifty_at_a_time(world, page):
    with change_lock(world.control.runs_dir):
        for n in range(60):
            world.control.audit.append(action="note", skill=GOOD, actor=f"actor-{n}", reason="test line")
    total = len(world.control.audit.entries())
    page.goto(f"{world.ui}/audit")
    assert page.get_by_test_id("audit-range").inner_text() == (
        f"Entries {total - 49}–{total} of {total}, newest first · page 1 of 2"
    )
    assert len(rows(page)) == 50 and "actor-59" in rows(page)[0]
    page.get_by_role("link", name="older →").click()
    page.wait_for_url("**/audit?page=2")
    assert (
        page.get_by_test_id("audit-range").inner_text()
        == f"Entries 1–{total - 50} of {total}, newest first · page 2 of 2"
    )
    assert "propose" in rows(page)[-1]
    page.goto(f"{world.ui}/audit?page=3")
    assert page.get_by_test_id("error-message").inner_text() == (
        "the audit log has 2 pages of 50 entries; page 3 is past its end"
    )
    bad = world.http.get(f"{world.ui}/audit?page=last", headers={"Accept": "application/json"})
    assert (
        bad.status_code == 400 and bad.json()["error"] == "page must be a whole number from 1 up, not 'last'"
    )


def test_a_broken_chain_says_at_which_entry_and_what_to_do_and_still_lists_it(world, page):
    log = world.control.runs_dir / "audit.jsonl"
    lines = log.read_text().splitlines()
    lines[0] = lines[0].replace('"propose"', '"promote"')
    log.write_text("\n".join(lines) + "\n")
    page.goto(f"{world.ui}/audit")
    status = page.get_by_test_id("audit-status").inner_text()
    assert status.startswith("broken Broken at entry 1: ")
    assert (
        page.get_by_test_id("audit-advice")
        .inner_text()
        .startswith("Every change is refused until the chain verifies again.")
    )
    checks = {
        e.get_attribute("data-line"): e.get_attribute("data-check")
        for e in page.get_by_test_id("audit-entry").all()
    }
    assert checks == {"1": "broken here", **{str(n): "not verified" for n in range(2, len(lines) + 1)}}
    assert "promote" in rows(page)[-1]  # the edited line is shown as it now reads
