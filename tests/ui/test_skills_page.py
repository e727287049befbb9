"""The Library and a skill's own page, in headless Chromium against the real UI: every served
skill with its revision, task-set and evaluation counts, live score and flags; a skill page with
its body rendered and its files; Optimize starts a run, or is disabled with the reason."""

from __future__ import annotations

import datetime as dt
import os

from ingot.cli.serve import UIOptions, ui_app
from optimize.measure.mining import MiningReport, latest, record
from tests.conftest import running_asgi
from tests.ui.conftest import GOOD, TOKEN
from ui.skills import component_text, shorten


def test_a_skill_page_shows_its_body_rendered_its_files_counts_score_and_flags(world, page, screenshots):
    tasks = world.root.parent / "tasks"
    tasks.mkdir()
    (tasks / f"{GOOD}.yaml").write_text(
        "train: [Notes for 1.0, Notes for 1.1, Notes for 1.2]\nholdout: [Notes for 2.0, Notes for 2.1]\n"
        "routing: [{task: Draft release notes for 3.0, expected: release-notes}]\n"
    )
    report = MiningReport(GOOD, 12, 12, 0, 5, 5, 0.8125, {}, (), 0)
    record(world.control.runs_dir / "mining", report, dt.datetime(2026, 11, 30, 9, 15, tzinfo=dt.UTC))
    options = UIOptions("tester", TOKEN, runs_env=dict(os.environ), tasks_dir=tasks)
    with running_asgi(ui_app(world.library, world.control, world.mcp, (), options), lifespan="off") as ui:
        page.goto(f"{ui}/library")
        row = page.locator(f"[data-testid=skill-row][data-skill='{GOOD}']")
        text = row.inner_text()
        assert "3 train · 2 holdout · 1 routing" in text and "0.81 (n = 5, 2026-11-30)" in text
        assert "1 bundle" in text and "pending" in text  # the fixture queued a change with evidence
        row.get_by_test_id("skill-link").click()
        page.wait_for_url(f"**/skills/{GOOD}")
        served = world.library.get(GOOD)
        assert served.revision[:12] in page.get_by_test_id("facts").inner_text()
        body = page.get_by_test_id("skill-body")
        assert body.locator("h1, h2").count() >= 2  # markdown headings, rendered
        assert not body.locator("h1, h2").first.inner_text().startswith("#")
        assert body.locator("pre code").count() >= 1  # its fenced examples stay code blocks
        assert "0.81 mean judge score over n = 5 distinct tasks (12 traces), mined 2026-11-30 09:15" in (
            page.get_by_test_id("live-score").inner_text()
        )
        assert page.get_by_test_id("pending").is_visible()
        files = page.get_by_test_id("file")
        assert [f.get_attribute("data-path") for f in files.all()] == [f.path for f in served.files]
        files.first.locator("summary").click()
        assert "name: release-notes" in files.first.locator("pre").inner_text()
        page.screenshot(path=str(screenshots / "skill.png"), full_page=True)
        page.get_by_test_id("history-link").click()
        page.wait_for_url(f"**/history/{GOOD}")


def test_optimize_is_disabled_with_the_reason_when_no_model_is_configured(world, page):
    page.goto(f"{world.ui}/skills/{GOOD}")  # the fixture's UI has no model settings
    assert page.get_by_test_id("optimize-start").is_disabled()
    blocked = page.get_by_test_id("optimize-blocked").inner_text()
    assert blocked.startswith("Optimize is off: this UI was started without model settings")
    page.goto(f"{world.ui}/runs")
    assert page.get_by_test_id("run-start").is_disabled()


def test_a_skill_body_cannot_run_script_or_fetch_anything(world, page):
    folder = world.root / "csv-data-cleaning"
    skill_md = folder / "SKILL.md"
    skill_md.write_text(
        skill_md.read_text() + '\n<script>window.pwned = 1</script>\n<img src="http://127.0.0.1:9/x" '
        'onerror="window.pwned = 2">\n[click](javascript:window.pwned=3)\n'
    )
    world.library.reload()
    requests = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(f"{world.ui}/skills/csv-data-cleaning")
    body = page.get_by_test_id("skill-body")
    assert "<script>window.pwned = 1</script>" in body.inner_text()  # shown as text
    assert page.evaluate("window.pwned") is None
    assert body.locator("a[href^=javascript]").count() == 0
    assert not [u for u in requests if ":9/" in u]


def test_a_skill_page_for_a_name_nothing_serves_is_not_found(world):
    response = world.http.get(f"{world.ui}/skills/relase-notes", headers={"Accept": "application/json"})
    assert response.status_code == 404 and "release-notes" in response.json()["error"]
    assert world.http.get(f"{world.ui}/skills/..%2Fetc").status_code in (400, 404)
    index = world.http.get(f"{world.ui}/skills", follow_redirects=True)  # the list lives on the Library page
    assert index.status_code == 200 and str(index.url).endswith("/library")


def test_descriptions_are_cut_at_a_word_and_components_read_as_text():
    text = "Plans glaze firings for an electric ceramic kiln, with cone charts and ramp schedules"
    assert shorten(text, 40) == "Plans glaze firings for an electric…"
    assert shorten("short one", 40) == "short one"
    assert component_text(7) == "7" and component_text(0.63831) == "0.6383"
    assert component_text([]) == "none" and component_text(["platform", "harness"]) == "platform, harness"
    assert component_text({}) == "none" and component_text({"pdf": "platform"}) == "pdf: platform"
    assert component_text(False) == "no"


def test_the_live_score_record_keeps_the_latest_and_ignores_an_empty_mine(tmp_path):
    now = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    assert record(tmp_path, MiningReport("a", 3, 3, 0, 2, 2, 0.5, {}, (), 0), now).samples == 2
    assert record(tmp_path, MiningReport("a", 0, 0, 0, 0, 0, None, {}, (), 0), now) is None
    assert latest(tmp_path, "a").mean_score == 0.5 and latest(tmp_path, "b") is None
    (tmp_path / "c.json").write_text("{broken")
    assert latest(tmp_path, "c") is None


def test_the_library_lists_every_skill_without_cutting_words_or_printing_python(world, page):
    page.goto(f"{world.ui}/library")
    for summary in page.get_by_test_id("skill-summary").all():
        shown, full = summary.inner_text(), summary.get_attribute("title")
        assert shown == " ".join(full.split()) or (shown.endswith("…") and full.startswith(shown[:-1]))
        if shown.endswith("…"):
            assert full[len(shown) - 1] in " ,;:."  # cut between words
    page.get_by_test_id("route-task").fill("Draft the release notes for v2.4 from the merged PRs")
    page.get_by_test_id("route-submit").click()
    components = page.get_by_test_id("route-components").inner_text()
    assert "candidates_considered\t7" in components or "candidates_considered\t" in components
    assert "7.0000" not in components and "[]" not in components and "{}" not in components


def test_the_route_box_checks_the_platform_as_the_cli_does(world, page):
    folder = world.root / "csv-data-cleaning"
    skill_md = folder / "SKILL.md"
    text = skill_md.read_text()
    head, _, rest = text.partition("\n---\n")
    skill_md.write_text(
        f"{head}\nmetadata:\n  skill-router:\n    platforms: linux, darwin, windows\n---\n{rest}"
    )
    world.library.reload()
    page.goto(f"{world.ui}/library")
    page.get_by_test_id("route-task").fill("Clean this messy CSV of customer orders")
    page.get_by_test_id("route-submit").click()
    result = page.get_by_test_id("route-result").inner_text()
    assert "match csv-data-cleaning" in result
    components = page.get_by_test_id("route-components").inner_text()
    assert "platform" not in components.split("unchecked_constraints")[1].splitlines()[0]


def test_task_set_counts_follow_the_file_when_it_changes(tmp_path):
    from ui.skills import _tasks

    path = tmp_path / "notes.yaml"
    path.write_text("train: [a, b, c]\nholdout: [d]\n")
    assert _tasks(tmp_path, "notes")[0].train == 3
    path.write_text("train: [a, b, c, e, f]\nholdout: [d]\n")  # counts are kept per file, not forever
    assert _tasks(tmp_path, "notes")[0].train == 5
    path.write_text("train: [a\n")
    counts, note = _tasks(tmp_path, "notes")
    assert counts is None and "is not valid YAML" in note
