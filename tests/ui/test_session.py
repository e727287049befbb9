"""Approval needs a person: every state-changing request needs the session a sign-in set, on
loopback too, whatever headers a local process forges; the person's browser, signed in through
the one-time link, approves."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import httpx
from starlette.routing import Route

from ingot.cli.serve import UIOptions, ui_app
from tests.conftest import REPO
from tests.ui.conftest import GOOD, TOKEN
from tests.ui.test_browser import card

# A plain local process (an agent with a shell): http.client, no browser, no redirects followed.
# It posts an approval with each set of headers it can forge and prints the status codes.
LOCAL_PROCESS = """
import http.client, json, sys, urllib.parse
from urllib.parse import urlsplit
ui, skill, change_id = sys.argv[1:4]
forged = [
    {},
    {"Sec-Fetch-Site": "none"},
    {"Sec-Fetch-Site": "same-origin"},
    {"Origin": ui},
    {"Origin": ui, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "navigate"},
    {"Sec-Fetch-Site": "none", "Cookie": "ingot_session=" + "0" * 64},
]
codes = []
for headers in forged:
    where = urlsplit(ui)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    body = urllib.parse.urlencode({"change_id": change_id})
    headers = {**headers, "Content-Type": "application/x-www-form-urlencoded"}
    connection.request("POST", f"/changes/{skill}/approve", body, headers)
    codes.append(connection.getresponse().status)
    connection.close()
print(json.dumps(codes))
"""


def test_a_local_process_without_the_session_cannot_approve_whatever_it_forges_and_the_person_can(
    world, page
):
    change = world.change(GOOD)
    done = subprocess.run(
        [sys.executable, "-c", LOCAL_PROCESS, world.ui, GOOD, change.id],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=REPO,
    )
    codes = json.loads(done.stdout)
    assert codes == [403, 401, 401, 401, 401, 401], codes  # no headers at all: not even same-origin
    assert world.control.queue.get(GOOD) == change  # still waiting
    assert world.control.live_revision(GOOD) == change.champion_revision
    assert world.control.history(GOOD)[-1].get("action") == "propose"  # not even an approve-refused line
    # The person: the browser that opened the sign-in link (the `page` fixture) approves.
    page.goto(f"{world.ui}/review")
    card(page, GOOD).get_by_test_id("approve").click()
    page.get_by_test_id("confirm-approve").click()
    page.wait_for_url(f"**/review?done=approved&skill={GOOD}")
    assert world.control.live_revision(GOOD) == change.candidate_revision


def test_every_state_changing_route_needs_the_session(world):
    """Each POST route the app has (approve, reject, rollback, bless, criteria, retire, optimize
    start and stop, evaluate, route, ...), asked as a same-origin form without the session."""
    app = ui_app(world.library, world.control, world.mcp, (), UIOptions("tester", TOKEN))
    writes = sorted(r.path for r in app.router.routes if isinstance(r, Route) and "POST" in (r.methods or ()))
    assert {"/changes/{skill}/approve", "/history/{skill}/rollback", "/runs"} <= set(writes)
    assert len(writes) >= 10, writes
    before = (world.control.audit.verify().lines, world.control.queue.get(GOOD))
    for path in writes:
        if path == "/login":
            continue
        filled = re.sub(r"\{skill\}", GOOD, path)
        filled = re.sub(r"\{[a-z_]+\}", "x-1", filled)
        for headers in ({"Origin": world.ui}, {"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}):
            response = httpx.post(f"{world.ui}{filled}", data={"change_id": "x"}, headers=headers)
            assert response.status_code == 401 and "not signed in" in response.text, (path, headers)
    assert (world.control.audit.verify().lines, world.control.queue.get(GOOD)) == before


def test_the_token_itself_reads_but_never_writes(world):
    """`Authorization: Bearer` is for scrapers of /api/status and /metrics; a write takes only
    the session cookie a sign-in sets."""
    bearer = {"Authorization": f"Bearer {TOKEN}", "Origin": world.ui}
    assert httpx.get(f"{world.ui}/api/status", headers=bearer).status_code == 200
    change = world.change(GOOD)
    refused = httpx.post(f"{world.ui}/changes/{GOOD}/approve", data={"change_id": change.id}, headers=bearer)
    assert refused.status_code == 401 and world.control.queue.get(GOOD) == change
