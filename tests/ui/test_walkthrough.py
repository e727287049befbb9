"""The README's "first ten minutes", step by step, in headless Chromium: the real CLI proposes an
edit, Evaluate measures it with the demo's scripted model server (scripts/demo.py, no key), the
review page shows what passed and what is missing (no run is blessed: the replay), Approve names
why that is acceptable and serves it over MCP, History shows what was accepted and rolls it back.
Its screenshots are the README's (`make screenshots`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ingot.cli.serve import UIOptions, ui_app
from ingot.model_runtime import optimize_missing
from ingot.settings import Settings
from optimize.control.changes import ChangeControl
from scripts import demo
from tests.conftest import running_asgi, running_mcp, wait_for
from tests.scripted_llm import scripted_llm
from tests.ui.conftest import TOKEN, sign_in
from tests.ui.test_browser import card, served_revision

SKILL = "release-notes"


class Demo:
    def __init__(self, mcp: str) -> None:
        self.mcp = mcp


def test_the_first_ten_minutes_propose_evaluate_review_approve_and_roll_back(
    tmp_path, library_factory, page, screenshots
):
    env = demo.prepare(tmp_path / "demo")
    with scripted_llm() as server:
        demo.script(server)
        env["BASE_URL"] = server.url
        runs_env = {**{k: v for k, v in os.environ.items() if k != "API_KEY"}, **env, "HF_HUB_OFFLINE": "1"}
        root = tmp_path / "demo" / "skills"
        library = library_factory(root)
        control = ChangeControl(
            tmp_path / "demo" / "home", (root,), lock_wait_s=5, neighbours=library.current
        )
        # 1. An edit of the live skill, proposed with the real CLI (measured later, from the page).
        edit = tmp_path / "my-edit"
        shutil.copytree(root / SKILL, edit)
        with (edit / "SKILL.md").open("a") as handle:
            handle.write("NEW-MARK: check every entry against the merged pull request.\n")  # as `echo >>`
        proposed = subprocess.run(
            [sys.executable, "-m", "ingot.cli", "propose", SKILL, "--from", str(edit), "--no-evaluate"],
            env=runs_env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert proposed.returncode == 0, proposed.stderr
        assert proposed.stdout.startswith("pending chg-")
        change = control.queue.get(SKILL)
        settings = Settings(
            _env_file=None, **{k.lower(): v for k, v in env.items() if k.endswith(("_MODEL", "URL"))}
        )
        options = UIOptions(
            "tester",
            TOKEN,
            runs_env=runs_env,
            optimize=optimize_missing(settings),
            tasks_dir=Path(env["TASKS_DIR"]),
        )
        with (
            running_mcp(library, control=control) as mcp,
            running_asgi(ui_app(library, control, mcp, (), options), lifespan="off") as ui,
        ):
            world = Demo(mcp)
            sign_in(page, ui, options)  # the link `ingot serve` prints, opened once
            # 2. Review: only the admission checks are measured; Evaluate measures the rest.
            page.goto(f"{ui}/review")
            waiting = card(page, SKILL)
            assert waiting.get_attribute("data-state") == "needs-acknowledgement"
            missing = waiting.locator("[data-testid=passport-cell][data-state=missing]").count()
            assert missing == 5  # A/B, replay, routing impact, sandbox checks, cost
            waiting.get_by_test_id("evaluate").click()
            page.wait_for_url("**/runs/run-*")
            page.wait_for_selector("[data-testid=run][data-status=succeeded]", timeout=120_000)
            log = page.get_by_test_id("run-log").inner_text()
            assert "needs-acknowledgement (body change)" in log and "gate" not in log.lower()
            page.screenshot(path=str(screenshots / "walkthrough-evaluate.png"), full_page=True)
            # 3. The card now shows every cell measured but the replay (no blessed run yet).
            page.goto(f"{ui}/review")
            good = card(page, SKILL)
            assert good.get_by_test_id("state").inner_text() == "needs-acknowledgement"
            states = {
                c.get_attribute("data-cell"): c.get_attribute("data-state")
                for c in good.get_by_test_id("passport-cell").all()
            }
            assert states == {
                "held-out A/B": "pass",
                "replay": "missing",
                "routing impact": "pass",
                "sandbox checks": "n/a",
                "safety": "pass",
                "cost": "pass",
            }
            assert (
                good.locator("[data-arm=challenger]").get_by_test_id("scorecard-value").inner_text()
                == "0.900"
            )
            assert "+1 / −0 lines" in good.get_by_test_id("risk").inner_text()
            page.screenshot(path=str(screenshots / "walkthrough-review.png"), full_page=True)
            # 4. Approve: the confirmation says what will be served and which missing cell it accepts.
            good.get_by_test_id("approve").click()
            assert change.candidate_revision[:12] in page.get_by_test_id("confirm-summary").inner_text()
            assert [c.get_attribute("data-cell") for c in page.get_by_test_id("accepted-cell").all()] == [
                "replay"
            ]
            page.get_by_test_id("accept-missing").fill("no run of it is blessed yet; I read the diff")
            page.screenshot(path=str(screenshots / "walkthrough-confirm.png"), full_page=True)
            page.get_by_test_id("confirm-approve").click()
            page.wait_for_url(f"**/review?done=approved&skill={SKILL}")
            wait_for(lambda: served_revision(world, SKILL) == change.candidate_revision)
            assert page.get_by_test_id("empty").is_visible()
            # 5. Roll back from History: MCP serves the old revision again.
            page.get_by_test_id("decided").get_by_role("link").click()
            page.on("dialog", lambda dialog: dialog.accept())
            page.get_by_test_id("rollback").click()
            page.wait_for_url(f"**/history/{SKILL}?done=rolled-back")
            wait_for(lambda: served_revision(world, SKILL) == change.champion_revision)
            accepted = page.get_by_test_id("accepted-missing").inner_text()
            assert "accepting missing replay" in accepted and "I read the diff" in accepted
            page.screenshot(path=str(screenshots / "walkthrough-history.png"), full_page=True)
