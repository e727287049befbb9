"""Background runs: real processes, one per skill, their progress streamed, their verdict shown.

The end-to-end tests start a real `ingot optimize` or `ingot evaluate` from the browser against
the scripted model server (one holds a model reply mid-run, through the server's own
`before_reply` seam, to read the page while the run goes); the others drive RunManager with a
small stand-in command (a real process reporting real steps through the CLI's progress) so
timing is under the test's control.
"""

from __future__ import annotations

import os
import sys
import threading

import pytest

from ingot.cli.serve import UIOptions, ui_app
from ingot.model_runtime import optimize_missing
from ingot.settings import Settings, load_settings
from tests.conftest import running_asgi, wait_for
from tests.scripted_llm import grade_json, scripted_llm
from tests.ui.conftest import BLOCKED, TOKEN
from ui.runs import RunConflict, RunManager, clean, progress_of, verdict_of

# Stand-in for `ingot optimize`: reports four scored tasks of a one-step run as the CLI does (not
# a terminal: plain lines), then waits for a "release" file before finishing.
STAND_IN = """
import pathlib, sys, time
from ingot.cli.progress import progress
from ingot.progress import Steps
release = pathlib.Path(sys.argv[-1]).parent / "release"
with progress("optimize alpha") as on_step:
    count = Steps(["train race"], on_step).begin("train race")
    for done in range(5):
        count(done, 4, "tasks scored")
print("waiting", flush=True)
while not release.exists():
    time.sleep(0.02)
print("queued chg-0123456789ab for review (ready: every cell that applies passed)", flush=True)
"""


@pytest.fixture
def manager(tmp_path):
    root = tmp_path / "skills"
    root.mkdir()
    manager = RunManager(tmp_path / "runs", (root,), dict(os.environ), (sys.executable, "-c", STAND_IN))
    yield manager, tmp_path / "release"
    (tmp_path / "release").touch()  # let any stand-in still waiting finish


def test_one_run_per_skill_with_progress_and_log(manager):
    runs, release = manager
    run = runs.start("alpha", "body")
    with pytest.raises(RunConflict, match="already in progress"):
        runs.start("alpha", "description")
    other = runs.start("beta", "body")  # another skill may run alongside
    wait_for(lambda: "waiting" in runs.output(run.id)[0])
    progress = runs.output(run.id)[1]
    assert progress is not None and (progress.label, progress.percent) == (
        "step 1 of 1: train race 4/4 tasks scored",
        100,
    )
    # Each step's run of lines reads as its newest, as a terminal's bar would.
    assert runs.output(run.id)[0].splitlines()[:2] == [
        "optimize alpha: step 1 of 1: train race 4/4 tasks scored",
        "waiting",
    ]
    release.touch()
    wait_for(lambda: runs.get(run.id).status == "succeeded" and runs.get(other.id).status == "succeeded")
    assert "queued chg-0123456789ab" in runs.output(run.id)[0] and runs.get(run.id).exit_code == 0
    finished = runs.get(run.id)
    assert (finished.change_id, finished.verdict) == ("chg-0123456789ab", "ready")
    assert finished.title == "body pass for alpha, queued chg-0123456789ab: ready"
    runs.start("alpha", "body")  # free again once the first finished


def test_a_stopped_run_ends_and_a_run_orphaned_by_a_restart_shows_interrupted(manager, tmp_path):
    runs, _ = manager
    run = runs.start("alpha", "body")
    wait_for(lambda: "waiting" in runs.output(run.id)[0])
    assert runs.stop(run.id).status == "stopping"
    wait_for(lambda: runs.get(run.id).exit_code is not None)
    assert runs.get(run.id).status == "stopped"
    orphan = runs.start("beta", "body")
    restarted = RunManager(tmp_path / "runs", ())  # a new UI process over the same state
    assert restarted.get(orphan.id).status == "interrupted"
    with pytest.raises(RunConflict):
        restarted.stop(orphan.id)


def test_output_is_cleaned_to_what_a_reader_sees_and_progress_is_the_newest_step_line():
    raw = "seed rollout:  50%|#####     | 2/4\rseed rollout: 100%|##########| 4/4\r\n\x1b[32mdone\x1b[0m\n"
    assert clean(raw) == "seed rollout: 100%|##########| 4/4\ndone\n"
    assert progress_of(raw) is None  # a bar is not a step: only the CLI's step lines count
    log = (
        "evaluate pdf: step 2 of 4: routing impact\n"
        "evaluate pdf: step 3 of 4: held-out A/B 3/12 judgements\n"
        "a warning in between\n"
    )
    progress = progress_of(log)
    assert progress.label == "step 3 of 4: held-out A/B 3/12 judgements"
    assert progress.percent == round(100 * (2 + 3 / 12) / 4)


def test_the_verdict_is_what_the_run_printed_last_about_its_change():
    out = "evaluated chg-0123456789ab: blocked (body change)\n  held-out A/B  fail  ...\n"
    assert verdict_of(out) == ("chg-0123456789ab", "blocked")
    queued = "queued chg-00000000000a for review (needs-acknowledgement): body change, +2 / -0 lines"
    assert verdict_of(queued) == ("chg-00000000000a", "needs-acknowledgement")
    assert verdict_of("no improvement: nothing queued") == (None, None)
    assert verdict_of("evaluated chg-0123456789ab: splendid (body change)") == (None, None)


@pytest.mark.parametrize("start_from", ["runs-page", "skill-page"])
def test_starting_a_body_pass_in_the_browser_shows_live_progress_and_queues_the_change(
    world, page, tmp_path, start_from
):
    skill = "csv-data-cleaning"
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / f"{skill}.yaml").write_text(
        "train: [Clean orders.csv, Clean users.csv, Clean events.csv, Clean refunds.csv]\n"
        "holdout: [Clean stock.csv, Clean visits.csv, Clean payments.csv, Clean shipments.csv]\n"
    )
    with scripted_llm() as server:
        server.script_optimizer("# CSV cleaning\n\nNEW-MARK: profile every column first.\n")
        env = {
            **{k: v for k, v in os.environ.items() if k != "API_KEY"},
            "BASE_URL": server.url,
            "AGENT_MODEL": "agent-model",
            "TEACHER_MODEL": "teacher-model",
            "JUDGE_MODEL": "judge-model",
            "TASKS_DIR": str(tasks),
            "OPTIMIZE_CANDIDATES": "2",
            "HF_HUB_OFFLINE": "1",
        }
        settings = load_settings(
            base_url=server.url,
            agent_model="agent-model",
            teacher_model="teacher-model",
            judge_model="judge-model",
        )
        options = UIOptions("tester", TOKEN, runs_env=env, optimize=optimize_missing(settings))
        app = ui_app(world.library, world.control, world.mcp, (), options)
        with running_asgi(app, lifespan="off") as ui:
            if start_from == "runs-page":
                page.goto(f"{ui}/runs")
                page.get_by_test_id("run-skill").select_option(skill)
                page.get_by_test_id("run-start").click()
            else:  # the skill's own page: Optimize (body pass) opens the run's live log
                page.goto(f"{ui}/skills/{skill}")
                assert page.get_by_test_id("optimize-start").is_enabled()
                page.get_by_test_id("optimize-start").click()
            page.wait_for_url("**/runs/run-*")
            assert page.get_by_test_id("run-status").inner_text() in ("running", "succeeded")
            page.wait_for_selector("[data-testid=run][data-status=succeeded]", timeout=120_000)
            log = page.get_by_test_id("run-log").inner_text()
            assert "queued chg-" in log and "(needs-acknowledgement)" in log
            assert page.get_by_test_id("run-progress-label").inner_text().startswith("step 9 of 9: replay")
            assert "optimize csv-data-cleaning: step 8 of 9: sandbox checks" in log
            page.goto(f"{ui}/review")
            card = page.locator(f"[data-testid=review-card][data-skill='{skill}']")
            assert card.get_by_test_id("state").inner_text() == "needs-acknowledgement"
            assert card.locator("[data-cell='held-out A/B']").get_attribute("data-state") == "pass"
            assert "asked for: a minimal additive edit" in card.get_by_test_id("asked-for").inner_text()
            assert "NEW-MARK" in card.get_by_test_id("diffs").inner_text()


def test_a_stopping_run_keeps_its_skill_busy_until_it_has_exited(tmp_path):
    stubborn = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: None)\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    runs = RunManager(tmp_path / "runs", (), dict(os.environ), (sys.executable, "-c", stubborn))
    run = runs.start("alpha", "body")
    wait_for(lambda: "up" in runs.output(run.id)[0])
    assert runs.stop(run.id, grace_s=0.5).status == "stopping"
    with pytest.raises(RunConflict):
        runs.start("alpha", "body")  # SIGTERM is ignored: still alive, still busy
    wait_for(lambda: runs.get(run.id).status == "stopped")  # SIGKILL after the grace period
    assert runs.get(run.id).exit_code == -9


def test_unknown_runs_are_not_found(world):

    assert world.http.get(f"{world.ui}/runs/run-20260101T000000-abcdef").status_code == 404
    assert world.http.get(f"{world.ui}/api/runs/nope").status_code == 404


def test_with_no_model_configured_start_is_disabled_with_the_reason_and_a_forced_post_starts_nothing(
    world, page, tmp_path
):
    bare = {k: v for k, v in os.environ.items() if not k.endswith("_MODEL") and k != "BASE_URL"}
    with pytest.MonkeyPatch.context() as env:  # this machine's environment, minus any model settings
        for key in set(os.environ) - set(bare):
            env.delenv(key)
        reasons = optimize_missing(Settings(_env_file=None))
    assert reasons["body"].startswith(
        "no agent or teacher or judge model configured: set BASE_URL and AGENT_MODEL"
    )
    options = UIOptions("tester", TOKEN, runs_env=dict(os.environ), optimize=reasons)
    with running_asgi(ui_app(world.library, world.control, world.mcp, (), options), lifespan="off") as ui:
        page.goto(f"{ui}/runs")
        assert page.get_by_test_id("run-start").is_disabled()
        assert (
            "Runs are off: no agent or teacher or judge model configured"
            in page.get_by_test_id("run-blocked").inner_text()
        )
        status = page.evaluate(
            """async () => (await fetch('/runs', {method: 'POST',
                 body: new URLSearchParams({skill: 'release-notes', mode: 'body'})})).status"""
        )
        assert status == 422
        assert page.goto(f"{ui}/runs") and "No runs yet." in page.inner_text("table.list")
    # Only a teacher: the description pass can run, the body pass says what it lacks.
    partial = optimize_missing(Settings(_env_file=None, base_url="http://127.0.0.1:9/v1", teacher_model="t"))
    assert partial["description"] is None and "no agent or judge model" in partial["body"]


def test_an_evaluate_run_streams_its_steps_while_held_and_then_shows_the_change_is_blocked(
    world, page, tmp_path, screenshots
):
    """A reply held mid-run (the scripted server's `before_reply`, released by the test): the page
    shows the steps so far and the log while the run waits; once it ends, the title and badge say
    the change is blocked, not that an evaluation "succeeded"."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / f"{BLOCKED}.yaml").write_text(
        "train: [Postmortem for the login outage]\n"
        "holdout: [Write a postmortem for the payment queue backlog, "
        "Summarise the DNS misconfiguration incident for executives, "
        "Draft the timeline of a failed database failover, "
        "List action items after a certificate expired in production]\n"
    )
    release = threading.Event()
    with scripted_llm() as server:
        # The candidate (its body says RISKY-RULE) answers worse; its first answer waits for us.
        held = lambda _: release.wait(60)  # noqa: E731 - the scripted server's seam, set by this test
        server.add(system_contains="RISKY-RULE", reply="risky answer", before_reply=held)
        server.add(model="agent-model", reply="plain answer")
        server.script_pairwise("plain answer")
        server.add(model="judge-model", user_contains="risky answer", reply=grade_json(0.1))
        server.add(model="judge-model", user_contains="plain answer", reply=grade_json(0.8))
        env = {
            **{k: v for k, v in os.environ.items() if k != "API_KEY"},
            "BASE_URL": server.url,
            "AGENT_MODEL": "agent-model",
            "JUDGE_MODEL": "judge-model",
            "TASKS_DIR": str(tasks),
            "HF_HUB_OFFLINE": "1",
        }
        settings = load_settings(base_url=server.url, agent_model="agent-model", judge_model="judge-model")
        options = UIOptions("tester", TOKEN, runs_env=env, optimize=optimize_missing(settings))
        app = ui_app(world.library, world.control, world.mcp, (), options)
        change = world.change(BLOCKED).id
        try:
            with running_asgi(app, lifespan="off") as ui:
                page.goto(f"{ui}/review")
                page.locator(f"[data-testid=review-card][data-skill='{BLOCKED}']").get_by_test_id(
                    "evaluate"
                ).click()
                page.wait_for_url("**/runs/run-*")
                # Held on the candidate's first answer: the champion's four answers are judged.
                label = page.get_by_test_id("run-progress-label")
                page.wait_for_function(
                    "el => el.textContent.startsWith('step 3 of 5: held-out A/B 4/12')",
                    arg=label.element_handle(),
                    timeout=60_000,
                )
                assert page.get_by_test_id("run-status").inner_text() == "running"
                assert 30 <= int(page.get_by_test_id("run-progress").get_attribute("value") or 0) < 60
                log = page.get_by_test_id("run-log").inner_text()
                assert log.splitlines()[:3] == [
                    f"evaluate {BLOCKED}: step 1 of 5: checks",
                    f"evaluate {BLOCKED}: step 2 of 5: routing impact",
                    f"evaluate {BLOCKED}: step 3 of 5: held-out A/B 4/12 judgements",  # the newest count
                ]
                assert "evaluated chg-" not in log  # not over yet
                page.screenshot(path=str(screenshots / "run-evaluate-streaming.png"), full_page=True)
                release.set()
                page.wait_for_selector("[data-testid=run][data-status=succeeded]", timeout=120_000)
                title = f"evaluate {change} of {BLOCKED}: blocked"
                assert page.get_by_test_id("run-title").inner_text() == title
                assert page.title() == f"{title} · Ingot"
                assert page.get_by_test_id("run-verdict").inner_text() == "blocked"
                assert page.get_by_test_id("run-status").inner_text() == "finished"
                outcome = page.get_by_test_id("run-outcome").inner_text()
                assert outcome.startswith(f"The run finished; {change} is blocked (a cell failed")
                assert page.get_by_test_id("run-progress").get_attribute("value") == "100"
                assert "succeeded" not in page.inner_text("main") and "evaluate pass" not in page.title()
                assert page.get_by_test_id("run-progress-label").inner_text() == "step 5 of 5: replay"
                page.screenshot(path=str(screenshots / "run-evaluate-blocked.png"), full_page=True)
                page.goto(f"{ui}/runs")
                assert page.get_by_test_id("run-row-verdict").inner_text() == "blocked"
        finally:
            release.set()  # never leave the scripted server waiting
