"""Fixtures for the review UI: a served skills copy with queued changes, the real MCP server and
the real UI app on loopback, and (for browser tests) Debian's Chromium driven by Playwright.

Every UI request needs the session a sign-in sets, so the fixtures sign in as a person does: by
opening a one-time sign-in link (`World.http` for HTTP, the `page` fixture for the browser).
Every test UI uses TOKEN, so a browser signed in to one is signed in to all (cookies are per
host, not port)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ingot.cli.serve import UIOptions, ui_app
from mcp_server.library import Library
from optimize.control.changes import ChangeControl
from optimize.control.pending import PendingChange
from tests.conftest import BUNDLED_SKILLS, running_asgi, running_mcp
from tests.optimize.conftest import NO_CODE, ab, checks, replay_passed, routing

CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "test-ui-access-token-0123456789abcdef"  # every test UI's access token
GOOD = "release-notes"  # queued with every cell passing: ready
BLOCKED = "incident-postmortem"  # queued with a held-out regression: blocked


@dataclass
class World:
    ui: str  # base URL of the UI
    mcp: str  # the MCP endpoint
    library: Library
    control: ChangeControl
    root: Path
    options: UIOptions  # its sign-in links
    http: httpx.Client  # signed in, as a person's browser is

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


def signed_in(ui: str, options: UIOptions) -> httpx.Client:
    """An HTTP client that opened a sign-in link, as a person's browser does: it keeps the
    session cookie and sends this UI's Origin with its forms."""
    client = httpx.Client(headers={"Origin": ui})
    opened = client.get(f"{ui}/login/{options.links.issue()}")
    assert opened.status_code == 303 and client.cookies.get("ingot_session"), opened.text
    return client


def sign_in(page, ui: str, options: UIOptions) -> None:
    """The browser opens a sign-in link, as a person does from `ingot serve`'s output."""
    page.goto(f"{ui}/login/{options.links.issue()}")
    page.wait_for_url("**/review*")


@pytest.fixture
def world(tmp_path, library_factory) -> Iterator[World]:
    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    library = library_factory(root)
    control = ChangeControl(tmp_path / "runs", (root,), lock_wait_s=5, neighbours=library.current)
    queue_changes(control, root)
    with running_mcp(library, control=control) as mcp:
        options = UIOptions("tester", TOKEN, runs_env=dict(os.environ))
        app = ui_app(library, control, mcp, (), options)
        with running_asgi(app, lifespan="off") as ui, closing(signed_in(ui, options)) as http:
            yield World(ui, mcp, library, control, root, options, http)


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


def sign_in_to_the_world(page, request) -> None:
    """Sign the browser in to the test's UI (`world` or `ui_world`), if it has one."""
    for name in ("world", "ui_world"):
        if name in request.fixturenames:
            world = request.getfixturevalue(name)
            sign_in(page, world.ui, world.options)
            return


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    sign_in_to_the_world(page, request)
    yield page
    context.close()


@pytest.fixture
def screenshots(tmp_path) -> Path:
    """Where screenshots go: INGOT_SCREENSHOTS (e.g. docs/screenshots, via `make screenshots`) or tmp."""
    folder = Path(os.environ.get("INGOT_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
