"""Background optimize runs: real processes on a pseudo-terminal, one per skill, progress and log.

The end-to-end test starts a real `ingot optimize` from the browser against the scripted model
server and watches it land in Review; the others drive RunManager with a small stand-in command
(a real process drawing real tqdm bars) so timing is under the test's control.
"""

from __future__ import annotations

import os
import sys

import pytest

from ingot.cli.serve import UIOptions, ui_app
from ingot.model_runtime import optimize_missing
from ingot.settings import Settings, load_settings
from tests.conftest import running_asgi, wait_for
from tests.scripted_llm import scripted_llm
from ui.runs import RunConflict, RunManager, clean, progress_of

# Stand-in for `ingot optimize`: draws a bar, then waits for a "release" file before finishing.
STAND_IN = """
import pathlib, sys, time
from tqdm import tqdm
release = pathlib.Path(sys.argv[-1]).parent / "release"
for _ in tqdm(range(4), desc="race over 2 task(s)", disable=None):
    time.sleep(0.01)
print("waiting", flush=True)
while not release.exists():
    time.sleep(0.02)
print("queued chg-standin for review", flush=True)
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
    assert progress is not None and (progress.label, progress.done, progress.total) == (
        "race over 2 task(s)",
        4,
        4,
    )
    release.touch()
    wait_for(lambda: runs.get(run.id).status == "succeeded" and runs.get(other.id).status == "succeeded")
    assert "queued chg-standin" in runs.output(run.id)[0] and runs.get(run.id).exit_code == 0
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


def test_terminal_output_is_cleaned_to_what_a_reader_sees():
    raw = "seed rollout:  50%|#####     | 2/4\rseed rollout: 100%|##########| 4/4\r\n\x1b[32mdone\x1b[0m\n"
    assert clean(raw) == "seed rollout: 100%|##########| 4/4\ndone\n"
    assert progress_of(raw).percent == 100 and progress_of("no bars here") is None


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
        options = UIOptions("tester", runs_env=env, optimize=optimize_missing(settings))
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
            assert "/" in page.get_by_test_id("run-progress-label").inner_text()  # the last bar drawn
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
    import httpx

    assert httpx.get(f"{world.ui}/runs/run-20260101T000000-abcdef").status_code == 404
    assert httpx.get(f"{world.ui}/api/runs/nope").status_code == 404


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
    options = UIOptions("tester", runs_env=dict(os.environ), optimize=reasons)
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
