"""Fixtures for the review UI: a served skills copy with queued changes, the real MCP server and
the real UI app on loopback, and (for browser tests) Debian's Chromium driven by Playwright."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ingot.cli.serve import UIOptions, ui_app
from mcp_server.library import Library
from optimize.control.changes import ChangeControl
from optimize.control.pending import PendingChange
from tests.conftest import BUNDLED_SKILLS, running_asgi, running_mcp
from tests.optimize.conftest import NO_CODE, ab, checks, replay_passed, routing

CHROMIUM = Path("/usr/bin/chromium")
GOOD = "release-notes"  # queued with every cell passing: ready
BLOCKED = "incident-postmortem"  # queued with a held-out regression: blocked


@dataclass
class World:
    ui: str  # base URL of the UI
    mcp: str  # the MCP endpoint
    library: Library
    control: ChangeControl
    root: Path

    def change(self, skill: str) -> PendingChange:
        change = self.control.queue.get(skill)
        assert change is not None, f"no pending change for {skill}"
        return change


def rewrite(root: Path, skill: str, marker: str) -> dict[str, bytes]:
    """The skill's files with a line appended to SKILL.md."""
    files = {
        p.relative_to(root / skill).as_posix(): p.read_bytes()
        for p in (root / skill).rglob("*")
        if p.is_file()
    }
    files["SKILL.md"] += f"\n{marker}: check every entry against the merged pull request.\n".encode()
    return files


def queue_changes(control: ChangeControl, root: Path) -> None:
    good = ab([0.2, 0.3, 0.25, 0.29], [0.9, 0.85, 0.95, 0.9])
    good["ab"] |= {
        "champion_mean": 0.26,
        "challenger_mean": 0.9,
        "retention": 0.97,
        "serving_model": "agent-model",
        "champion_usd": 0.00482,
        "challenger_usd": 0.00457,
    }
    for i, case in enumerate(good["ab"]["cases"]):
        case |= {"task": f"Release notes for 1.{i}", "champion_tokens": 400 + i, "challenger_tokens": 380 + i}
        case["delta"] = case["challenger"] - case["champion"]
    cost = {"calls": 66, "tokens_in": 41000, "tokens_out": 9000, "usd": 0.0412, "unknown_cost_calls": 0}
    ready = {**checks(), **routing(), **good, **replay_passed(), **NO_CODE}
    control.propose(GOOD, "optimizer", rewrite(root, GOOD, "NEW-RULE"), ready, "best of 5", cost)
    blocked = ab([0.8, 0.7, 0.8], [0.9, 0.2, 0.95])
    blocked["ab"]["cases"][1]["challenger_pass"] = False
    control.propose(BLOCKED, "optimizer", rewrite(root, BLOCKED, "RISKY-RULE"), {**checks(), **blocked})


@pytest.fixture
def world(tmp_path, library_factory) -> Iterator[World]:
    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    library = library_factory(root)
    control = ChangeControl(tmp_path / "runs", (root,), lock_wait_s=5, neighbours=library.current)
    queue_changes(control, root)
    with running_mcp(library, control=control) as mcp:
        app = ui_app(library, control, mcp, (), UIOptions("tester", runs_env=dict(os.environ)))
        with running_asgi(app, lifespan="off") as ui:
            yield World(ui, mcp, library, control, root)


@pytest.fixture(scope="module")
def browser():
    """One Chromium per test module. Playwright's sync API keeps an event loop marked running in
    this thread while it is open, so `asyncio.run` fails in any test after it; closing it with
    each module keeps tests that call MCP with asyncio.run working in any order."""
    if not CHROMIUM.exists():
        pytest.fail("browser tests need Debian's chromium at /usr/bin/chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture
def screenshots(tmp_path) -> Path:
    """Where screenshots go: INGOT_SCREENSHOTS (e.g. docs/screenshots, via `make screenshots`) or tmp."""
    folder = Path(os.environ.get("INGOT_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
