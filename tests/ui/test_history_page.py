"""The history pages' words, read as a person reads them: a timeline line names revisions only
where it moved one, a skill that is not served says when and by whom it was removed, and the
index never calls a removed skill's last revision "none"."""

from __future__ import annotations

import re

from tests.optimize.conftest import checks, skill_md
from tests.ui.conftest import BLOCKED, GOOD

NEW = "kiln-firing"


def timeline_lines(page) -> dict[str, str]:  # noqa: ANN001 - a Playwright page
    """Each timeline line's text by its audit sequence number."""
    lines = page.get_by_test_id("timeline-entry")
    found = {}
    for text in lines.all_inner_texts():
        seq = re.search(r"#(\d+)$", text.strip())
        assert seq, text
        found[seq.group(1)] = " ".join(text.split())
    return found


def new_skill_then_removed(world) -> str:
    files = {"SKILL.md": skill_md(NEW, "Plans glaze firings for an electric ceramic kiln.", "Ramp slowly.")}
    change = world.control.propose(NEW, "agent", files, checks()).change
    world.control.approve(NEW, "tester", change.id, accept_missing="a first draft")
    world.control.rollback(NEW, "absent", "tester", "not wanted")
    return change.candidate_revision


def test_timeline_lines_name_revisions_only_where_they_moved_one(world, page):
    rejected = world.change(BLOCKED)
    world.control.reject(BLOCKED, "regresses case 2", "reviewer", rejected.id)
    change = world.change(GOOD)
    world.control.approve(GOOD, "reviewer", change.id)
    page.goto(f"{world.ui}/history/{BLOCKED}")
    (reject,) = [t for t in timeline_lines(page).values() if " reject by " in t]
    assert f"reject by reviewer: candidate {rejected.candidate_revision[:12]} — regresses case 2" in reject
    assert "none" not in reject
    page.goto(f"{world.ui}/history/{GOOD}")
    (trust,) = [t for t in timeline_lines(page).values() if " autonomy " in t]
    assert "autonomy (level now manual) by reviewer — body: clean change 1 of 3" in trust
    assert "→" not in trust and "none" not in trust  # a trust line moves no revision
    rule = page.get_by_test_id("trust-rule").inner_text()
    assert "Approving a change with missing cells restarts the streak; an override, a rollback" in rule


def test_a_removed_skill_says_when_and_by_whom_and_its_current_snapshot_is_absent(world, page):
    candidate = new_skill_then_removed(world)
    page.goto(f"{world.ui}/history/{NEW}")
    live = page.get_by_test_id("live").inner_text()
    assert re.fullmatch(
        r"Live revision: absent: this skill is not served "
        r"\(removed at \d{4}-\d\d-\d\d [\d:]{8} UTC by tester, #\d+\)",
        live,
    ), live
    lines = list(timeline_lines(page).values())
    assert f"rollback by tester: {candidate[:12]} → absent (removed) — not wanted" in lines[0]
    promote = next(t for t in lines if " promote by " in t)
    assert f"promote by tester: absent → {candidate[:12]}" in promote  # a new skill: nothing before it
    absent = page.locator("[data-testid=snapshot][data-revision=absent]").inner_text()
    assert " ".join(absent.split()) == "absent (not served, as before Ingot created it) current"
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
    page.locator(f"[data-testid=snapshot][data-revision='{candidate}']").get_by_test_id("rollback").click()
    page.wait_for_url(f"**/history/{NEW}?done=rolled-back")
    assert dialogs == [
        f"Serve {NEW} again at {candidate[:12]}? It is not served now; this restores it, audited."
    ]


def test_the_index_says_a_removed_skill_is_removed_and_an_untouched_one_never_changed(world):
    new_skill_then_removed(world)
    html = world.http.get(f"{world.ui}/history").text

    def row(skill: str) -> str:
        cells = html.split(f">{skill}</a>")[1].split("</tr>")[0]
        return " ".join(re.sub(r"<[^>]+>", " ", cells).split())

    assert row(NEW).startswith("not served absent (removed) removed")
    assert re.fullmatch(r"[0-9a-f]{12} never changed by Ingot", row("git-commit-messages"))
    assert "none" not in row(NEW) and "none" not in row("git-commit-messages")
