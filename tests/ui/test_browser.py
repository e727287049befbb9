"""The review UI in headless Chromium (Debian's /usr/bin/chromium via Playwright), against the real
UI and MCP servers on loopback: what a reviewer sees, and what their clicks do to what is served."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from fastmcp import Client

from tests.conftest import wait_for
from tests.loopback import QuietHandler, serving
from tests.ui.conftest import BLOCKED, GOOD


def served_revision(world, skill: str) -> str:
    """The revision route_and_load serves for `skill`, asked over MCP with a real client."""

    async def ask() -> str:
        async with Client(world.mcp) as client:
            result = await client.call_tool("get_skill", {"name": skill})
            return result.structured_content["revision"]

    # Playwright's sync API owns this thread's event loop, so the MCP client runs on its own.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, ask()).result()


def card(page, skill: str):
    return page.locator(f"[data-testid=review-card][data-skill='{skill}']")


def latest_switch(page):  # noqa: ANN001, ANN201 - a Playwright page and locator
    """The newest timeline entry that changed what is served (autonomy's bookkeeping lines aside)."""
    return page.locator("[data-testid=timeline-entry]:not([data-action=autonomy])").first


def test_the_review_card_shows_the_evidence_before_the_buttons(world, page, screenshots):
    page.goto(f"{world.ui}/review")
    assert "2 changes to review" in page.get_by_test_id("pending-count").inner_text()
    assert "audit chain ok" in page.get_by_test_id("audit").inner_text()
    good = card(page, GOOD)
    assert good.get_by_test_id("state").inner_text() == "ready"
    assert "+0.640" in good.get_by_test_id("scores").inner_text()  # 0.9 - 0.26
    assert good.get_by_test_id("delta-chart").locator("rect").count() == 4
    # Evidence, then the diff, then the decision: in the document and on the screen.
    order = good.evaluate(
        """card => ['evidence', 'diffs', 'decide'].map(id => card.querySelector(`[data-testid=${id}]`))
                   .map(el => el.getBoundingClientRect().top)"""
    )
    assert order == sorted(order)
    assert "NEW-RULE" in good.get_by_test_id("diffs").inner_text()
    good.get_by_role("button", name="side by side").click()
    assert good.locator("table.split tr.insert").first.is_visible()
    good.get_by_role("button", name="unified").click()
    page.screenshot(path=str(screenshots / "review.png"), full_page=True)


def test_approve_in_the_browser_serves_the_new_revision_over_mcp_and_history_shows_it(
    world, page, screenshots
):
    change = world.change(GOOD)
    assert served_revision(world, GOOD) == change.champion_revision
    page.goto(f"{world.ui}/review")
    card(page, GOOD).get_by_test_id("approve").click()
    page.get_by_test_id("confirm-approve").click()
    page.wait_for_url(f"**/review?done=approved&skill={GOOD}")
    assert "Approved and promoted" in page.get_by_role("status").inner_text()
    wait_for(lambda: served_revision(world, GOOD) == change.candidate_revision)
    page.goto(f"{world.ui}/history/{GOOD}")
    latest = latest_switch(page)
    assert latest.get_attribute("data-action") == "promote"
    assert change.candidate_revision[:12] in latest.inner_text()
    assert latest.get_by_role("link", name="evidence").count() == 1
    page.screenshot(path=str(screenshots / "history.png"), full_page=True)


def test_reject_needs_a_reason_which_lands_in_the_audit(world, page):
    change = world.change(GOOD)
    page.goto(f"{world.ui}/review")
    good = card(page, GOOD)
    posts = []
    page.on("request", lambda request: request.method == "POST" and posts.append(request.url))
    good.get_by_test_id("reject").click()  # empty reason: the browser will not submit
    page.wait_for_load_state()
    # A submission would have been issued by the time click() returns: none was, because the
    # required reason is missing (checked on the field itself, not inferred from timing).
    assert good.get_by_test_id("reason").evaluate("field => field.validity.valueMissing")
    assert posts == [] and page.url.endswith("/review") and world.control.queue.get(GOOD) is not None
    good.get_by_test_id("reason").fill("drops the breaking-changes section")
    good.get_by_test_id("reject").click()
    page.wait_for_url(f"**/review?done=rejected&skill={GOOD}")
    assert world.control.queue.get(GOOD) is None
    rejected = [e for e in world.control.history(GOOD) if e.get("action") == "reject"]
    assert rejected[-1].get("reason") == "drops the breaking-changes section"
    assert rejected[-1].get("change_id") == change.id
    assert world.control.queue.archived(GOOD)[-1]["archived_status"] == "rejected"


def test_rollback_from_history_serves_the_old_revision_again(world, page):
    change = world.change(GOOD)
    world.control.approve(GOOD, "tester", change.id)
    world.library.reload()
    wait_for(lambda: served_revision(world, GOOD) == change.candidate_revision)
    page.goto(f"{world.ui}/history/{GOOD}")
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
    page.get_by_test_id("rollback").click()
    page.wait_for_url(f"**/history/{GOOD}?done=rolled-back")
    assert dialogs and "Roll release-notes back" in dialogs[0]
    wait_for(lambda: served_revision(world, GOOD) == change.champion_revision)
    assert latest_switch(page).get_attribute("data-action") == "rollback"


def served_or_none(world, skill: str) -> str | None:
    """Like `served_revision`, but None when MCP no longer serves the skill at all."""
    try:
        return served_revision(world, skill)
    except Exception as exc:  # fastmcp's ToolError for an unknown skill
        assert "no skill named" in str(exc), exc
        return None


def test_a_new_skill_is_removed_from_its_history_page_and_mcp_stops_serving_it(world, page, screenshots):
    from tests.optimize.conftest import checks, skill_md

    files = {
        "SKILL.md": skill_md(
            "kiln-firing", "Plans glaze firings for an electric ceramic kiln.", "Ramp slowly."
        )
    }
    change = world.control.propose("kiln-firing", "agent", files, checks()).change
    world.control.approve("kiln-firing", "tester", change.id, accept_missing="a first draft")
    world.library.reload()
    wait_for(lambda: served_or_none(world, "kiln-firing") == change.candidate_revision)
    page.goto(f"{world.ui}/history/kiln-firing")
    absent = page.locator("[data-testid=snapshot][data-revision=absent]")
    assert "remove this skill (it did not exist before)" in absent.inner_text()
    page.screenshot(path=str(screenshots / "history-new-skill.png"), full_page=True)
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
    absent.get_by_test_id("rollback").click()
    page.wait_for_url("**/history/kiln-firing?done=removed")
    assert dialogs and dialogs[0].startswith("Remove kiln-firing? It did not exist before Ingot created it")
    wait_for(lambda: served_or_none(world, "kiln-firing") is None)
    assert "absent" in page.get_by_test_id("live").inner_text()
    assert latest_switch(page).get_attribute("data-action") == "rollback"
    restore = page.locator(f"[data-testid=snapshot][data-revision='{change.candidate_revision}']")
    restore.get_by_test_id("rollback").click()
    page.wait_for_url("**/history/kiln-firing?done=rolled-back")
    wait_for(lambda: served_or_none(world, "kiln-firing") == change.candidate_revision)


def test_dismissing_the_rollback_confirmation_changes_nothing(world, page):
    change = world.change(GOOD)
    world.control.approve(GOOD, "tester", change.id)
    page.goto(f"{world.ui}/history/{GOOD}")
    dialogs, posts = [], []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.on("request", lambda request: request.method == "POST" and posts.append(request.url))
    page.get_by_test_id("rollback").click()  # a submission would have been issued by the time this returns
    page.wait_for_load_state()
    assert dialogs and posts == [] and page.url.endswith(f"/history/{GOOD}")
    assert page.get_by_test_id("rollback").is_enabled()
    assert world.control.live_revision(GOOD) == change.candidate_revision


def test_a_blocked_change_cannot_be_approved_and_a_forced_post_is_refused(world, page):
    change = world.change(BLOCKED)
    page.goto(f"{world.ui}/review")
    blocked = card(page, BLOCKED)
    assert blocked.get_by_test_id("state").inner_text() == "blocked"
    assert (
        "regresses held-out task(s) the champion passed: h1"
        in blocked.get_by_test_id("passport").inner_text()
    )
    assert blocked.get_by_test_id("approve").is_disabled()
    status = page.evaluate(
        """async ([skill, id]) => (await fetch(`/changes/${skill}/approve`, {method: 'POST',
             body: new URLSearchParams({change_id: id})})).status""",
        [BLOCKED, change.id],
    )
    assert status == 422
    assert world.control.queue.get(BLOCKED) == change
    assert world.control.live_revision(BLOCKED) == change.champion_revision


def test_a_form_on_another_site_cannot_approve(world, page):
    change = world.change(GOOD)
    attack = (
        f'<form id=f method=post action="{world.ui}/changes/{GOOD}/approve">'
        f'<input name=change_id value="{change.id}"></form><script>f.submit()</script>'
    ).encode()

    class Evil(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(attack)

    with serving(Evil) as evil, page.expect_response(f"{world.ui}/changes/{GOOD}/approve") as response:
        page.goto(evil.replace("127.0.0.1", "localhost"))  # another host name: another origin
    assert response.value.status == 403
    assert world.control.queue.get(GOOD) == change
    assert world.control.live_revision(GOOD) == change.champion_revision


def test_try_routing_shows_the_decision_and_its_components(world, page):
    page.goto(f"{world.ui}/library")
    assert page.get_by_test_id("skills").locator("tr").count() == 1 + len(world.library.skills())
    page.get_by_test_id("route-task").fill("Draft the release notes for v2.4 from the merged PRs")
    page.get_by_test_id("route-submit").click()
    result = page.get_by_test_id("route-result").inner_text()
    assert "match release-notes" in result and "score" in result
