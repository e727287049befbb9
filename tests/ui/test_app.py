"""The review UI over real HTTP: the session every request needs (a person's sign-in), same-origin
writes, 409s, refusals, bind rules, and evidence that was not measured shown as missing."""

from __future__ import annotations

import json
import logging
import re
import threading
from contextlib import closing

import httpx
import pytest

from ingot.cli.serve import UIOptions, serve, ui_app
from ingot.errors import ConfigError
from tests.conftest import running_asgi
from tests.optimize.conftest import ready_body
from tests.ui.conftest import BLOCKED, GOOD, TOKEN, rewrite, signed_in


def post(world, path: str, data: dict, **headers: str) -> httpx.Response:
    """A form the signed-in browser submits."""
    return world.http.post(world.ui + path, data=data, headers=headers)


@pytest.mark.parametrize(
    "headers, why",
    [
        ({}, "no Origin or Sec-Fetch-Site"),
        ({"Origin": "http://evil.example"}, "cross-origin"),
        ({"Origin": "http://127.0.0.1:1"}, "cross-origin"),  # same host, other port: another origin
        ({"Sec-Fetch-Site": "cross-site"}, "cross-site"),
        ({"Sec-Fetch-Site": "same-site"}, "cross-site"),
        ({"Origin": "null"}, "cross-origin"),
    ],
    ids=["no-headers", "other-host", "other-port", "cross-site", "same-site", "null-origin"],
)
def test_state_changing_requests_from_anywhere_else_are_refused(world, headers, why):
    change = world.change(GOOD)
    for path, data in [
        (f"/changes/{GOOD}/approve", {"change_id": change.id}),
        (f"/changes/{GOOD}/reject", {"change_id": change.id, "reason": "x"}),
        (f"/history/{GOOD}/rollback", {"revision": change.champion_revision}),
        ("/runs", {"skill": GOOD, "mode": "body"}),
    ]:
        response = httpx.post(world.ui + path, data=data, headers=headers)
        assert response.status_code == 403 and why in response.text
    assert (
        world.control.queue.get(GOOD) == change and world.control.history(GOOD)[-1].get("action") == "propose"
    )


def test_pages_carry_a_strict_content_security_policy(world):
    response = world.http.get(f"{world.ui}/review")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"
    assert "<script>" not in response.text  # no inline script: the CSP would block it anyway
    assert not re.search(r'(src|href)="(https?:)?//', response.text)  # nothing from another site


def test_two_simultaneous_approvals_give_one_promotion_and_one_409(world):
    change = world.change(GOOD)
    barrier = threading.Barrier(2)
    statuses: list[int] = []

    def approve() -> None:
        barrier.wait()
        statuses.append(post(world, f"/changes/{GOOD}/approve", {"change_id": change.id}).status_code)

    threads = [threading.Thread(target=approve) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [303, 409]
    promotions = [e for e in world.control.history(GOOD) if e.get("action") == "promote"]
    assert len(promotions) == 1 and world.control.live_revision(GOOD) == change.candidate_revision


def test_approve_or_rollback_while_another_process_is_mid_change_gets_409(world):
    from optimize.control.lock import change_lock

    change = world.change(GOOD)
    world.control.lock_wait_s = 0.2
    with change_lock(world.control.runs_dir):  # another process (say, the CLI) is mid-change
        approve = post(world, f"/changes/{GOOD}/approve", {"change_id": change.id})
        rollback = post(
            world,
            f"/history/{GOOD}/rollback",
            {"revision": change.champion_revision, "live": change.champion_revision},
        )
    for response in (approve, rollback):
        assert response.status_code == 409 and "another Ingot process" in response.text
    assert world.control.queue.get(GOOD) == change


def test_approving_a_change_that_was_displaced_is_a_conflict(world):
    old = world.change(GOOD)
    world.control.propose(GOOD, "optimizer", rewrite(world.root, GOOD, "NEWER"), ready_body())  # as good
    response = post(world, f"/changes/{GOOD}/approve", {"change_id": old.id})
    assert response.status_code == 409 and "review the new one" in response.text
    response = post(world, f"/changes/{GOOD}/reject", {"change_id": old.id, "reason": "stale"})
    assert response.status_code == 409 and world.control.queue.get(GOOD).id != old.id


def test_a_reject_without_a_reason_is_refused_and_keeps_the_change(world):
    change = world.change(GOOD)
    response = post(world, f"/changes/{GOOD}/reject", {"change_id": change.id, "reason": "   "})
    assert response.status_code == 422 and "needs a reason" in response.text
    assert world.control.queue.get(GOOD) == change


def test_a_change_gone_stale_shows_why_and_approval_is_refused(world):
    change = world.change(GOOD)
    skill_md = world.root / GOOD / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\nEdited by hand.\n")
    page = world.http.get(f"{world.ui}/review").text
    assert "the live skill changed since this evidence was measured" in page
    response = post(world, f"/changes/{GOOD}/approve", {"change_id": change.id}, Accept="application/json")
    assert response.status_code == 422 and "is stale: the live skill changed" in response.json()["error"]
    assert "Edited by hand." in skill_md.read_text()


def test_evidence_that_was_not_measured_is_shown_as_missing(world):
    bare = "git-commit-messages"
    world.control.propose(bare, "operator", rewrite(world.root, bare, "BARE"), {})
    html = world.http.get(f"{world.ui}/review").text
    card = html.split(f'data-skill="{bare}"')[1].split("</article>")[0]
    assert (
        'data-cell="held-out A/B" data-state="missing"' in card and "no held-out A/B in the evidence" in card
    )
    assert card.count('data-state="missing"') == 6  # nothing was measured: every cell that applies
    assert "no score measured" in card and "0.000" not in card


def test_the_header_reports_a_broken_audit_chain_with_its_line(world):
    log = world.control.runs_dir / "audit.jsonl"
    lines = log.read_text().splitlines()
    lines[0] = lines[0].replace('"propose"', '"promote"')
    log.write_text("\n".join(lines) + "\n")
    audit = world.http.get(f"{world.ui}/api/status").json()["audit"]
    assert audit["ok"] is False and audit["bad_line"] == 1
    assert "broken" in world.http.get(f"{world.ui}/review").text


def test_bad_paths_are_clean_errors(world):
    assert world.http.get(f"{world.ui}/history/..%2F..%2Fetc").status_code in (400, 404)
    assert world.http.get(f"{world.ui}/evidence/{GOOD}/..").status_code == 404
    assert world.http.get(f"{world.ui}/runs/not-a-run").status_code == 404
    assert post(world, "/runs", {"skill": "no-such-skill", "mode": "body"}).status_code == 404
    assert post(world, "/runs", {"skill": GOOD, "mode": "everything"}).status_code == 400
    assert post(world, "/library/route", {"task": "x" * 8001}).status_code == 400  # MCP's limit: 8,000


def test_every_request_needs_the_session_and_the_token_never_travels_in_urls(world):
    ui = world.ui
    assert httpx.get(f"{ui}/api/status").status_code == 401
    page = httpx.get(f"{ui}/review", headers={"Accept": "text/html"})
    assert page.status_code == 303 and page.headers["location"] == "/login"
    assert httpx.get(f"{ui}/api/status", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert httpx.get(f"{ui}/api/status?token={TOKEN}").status_code == 401
    with httpx.Client(base_url=ui, headers={"Origin": ui}) as browser:
        assert browser.post("/login", data={"access_token": "wrong" * 8}).status_code == 401
        signed_in = browser.post("/login", data={"access_token": TOKEN})
        assert signed_in.status_code == 303
        cookie = signed_in.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
        assert browser.get("/review").status_code == 200
        change = world.change(GOOD)
        assert browser.post(f"/changes/{GOOD}/approve", data={"change_id": change.id}).status_code == 303


def test_a_sign_in_link_works_once_and_leaves_no_token_in_the_url(world):
    code = world.options.links.issue()
    with httpx.Client(base_url=world.ui) as browser:
        opened = browser.get(f"/login/{code}")
        assert opened.status_code == 303 and opened.headers["location"] == "/review"
        cookie = opened.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
        assert browser.get("/review").status_code == 200
    with httpx.Client(base_url=world.ui) as other:  # the same link, opened again: dead
        again = other.get(f"/login/{code}")
        assert again.status_code == 401 and "used already" in again.text
        assert "set-cookie" not in again.headers and other.get("/api/status").status_code == 401
        assert other.get("/login/not-a-code").status_code == 401


def test_the_ui_is_never_served_without_a_token(world):
    for host in ("0.0.0.0", "127.0.0.1"):  # noqa: S104
        with pytest.raises(ConfigError, match="without an access token"):
            serve(world.library, world.control, host, None, 8080, (), False, ui=UIOptions("tester"))


def test_the_token_file_is_created_private_and_reused(tmp_path):
    from ui.security import token_from_file

    path = tmp_path / "state" / "ui-token"
    token = token_from_file(path)
    assert len(token) >= 32 and path.stat().st_mode & 0o077 == 0
    assert token_from_file(path) == token
    path.chmod(0o644)  # another user could read it: the way in would be theirs too
    with pytest.raises(ValueError, match="may be read by other users"):
        token_from_file(path)


def test_the_blocked_change_stays_blocked_whatever_the_page_says(world):
    change = world.change(BLOCKED)
    response = post(world, f"/changes/{BLOCKED}/approve", {"change_id": change.id})
    assert response.status_code == 422 and "regresses held-out task" in response.text
    refused = [e for e in world.control.history(BLOCKED) if e.get("action") == "approve-refused"]
    assert refused and refused[-1].get("actor") == "tester (ui)"


def test_logs_hold_no_skill_text_tasks_reasons_or_tokens(world, caplog):
    caplog.set_level("DEBUG")
    options = UIOptions("tester", TOKEN)
    app = ui_app(world.library, world.control, world.mcp, (), options)
    with running_asgi(app, lifespan="off", log_level="debug") as ui:
        for name in ("uvicorn.access", "uvicorn.error"):  # uvicorn's loggers do not propagate
            logging.getLogger(name).addHandler(caplog.handler)
        with closing(signed_in(ui, options)) as browser:
            browser.get(f"{ui}/review", headers={"Authorization": f"Bearer {TOKEN}"})
            browser.post(f"{ui}/library/route", data={"task": "SECRET-TASK-TEXT notes"})
            change = world.change(GOOD)
            data = {"change_id": change.id, "reason": "PRIVATE-REASON"}
            assert browser.post(f"{ui}/changes/{GOOD}/reject", data=data).status_code == 303
    for name in ("uvicorn.access", "uvicorn.error"):
        logging.getLogger(name).removeHandler(caplog.handler)
    assert "POST /changes/release-notes/reject" in caplog.text  # the access log is there...
    for private in ("SECRET-TASK-TEXT", "PRIVATE-REASON", TOKEN, "NEW-RULE"):
        assert private not in caplog.text  # ...and holds none of these


def test_a_garbled_audit_line_or_a_damaged_pending_record_does_not_take_the_ui_down(world):
    log = world.control.runs_dir / "audit.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(["garbage", *lines[1:]]) + "\n")
    (world.control.runs_dir / "pending" / "zz-broken.json").write_text("{not json")
    for path in ("/review", "/library", "/history", "/runs", "/api/status"):
        assert world.http.get(world.ui + path).status_code == 200, path
    review = world.http.get(f"{world.ui}/review").text
    assert "broken" in review and "at line 1" in review
    assert "zz-broken.json is unreadable" in review and f'data-skill="{BLOCKED}"' in review


def test_malformed_evidence_blocks_its_own_card_only(world):
    change = world.change(GOOD)
    path = world.control.runs_dir / change.evidence_path
    data = json.loads(path.read_text())
    data["measurements"]["ab"]["cases"] = 5
    path.write_text(json.dumps(data))
    review = world.http.get(f"{world.ui}/review")
    assert review.status_code == 200 and f'data-skill="{BLOCKED}"' in review.text
    card = review.text.split(f'data-skill="{GOOD}"')[1].split("</article>")[0]
    assert "blocked" in card and "disabled" in card.split('data-testid="approve"')[1].split(">")[0]
    (path.parent / "evidence.json").unlink()
    assert world.http.get(f"{world.ui}/evidence/{GOOD}/{path.parent.name}").status_code == 404


def test_a_rollback_pins_the_live_revision_the_page_showed(world):
    change = world.change(GOOD)
    world.control.approve(GOOD, "tester", change.id)  # live: candidate; snapshot: champion
    seen = world.control.live_revision(GOOD)
    newer = world.control.propose(GOOD, "optimizer", rewrite(world.root, GOOD, "NEWER"), {}).change
    world.control.promoter.switch(  # someone else puts another revision live meanwhile
        GOOD, world.root, newer.files, expected_from=seen, action="promote", actor="other"
    )
    data = {"revision": change.champion_revision, "live": seen}
    response = post(world, f"/history/{GOOD}/rollback", data, Accept="application/json")
    assert response.status_code == 409 and "not the" in response.json()["error"]
    assert world.control.live_revision(GOOD) == newer.candidate_revision


def test_deciding_a_change_twice_is_a_conflict(world):
    change = world.change(GOOD)
    data = {"change_id": change.id, "reason": "no"}
    assert post(world, f"/changes/{GOOD}/reject", data).status_code == 303
    again = post(world, f"/changes/{GOOD}/reject", data, Accept="application/json")
    assert again.status_code == 409 and "already rejected" in again.json()["error"]
    assert post(world, f"/changes/{GOOD}/approve", {"change_id": change.id}).status_code == 409


def test_odd_credentials_are_a_plain_no(world):
    for headers in ({"Authorization": "Bearer tést"}, {"Cookie": "ingot_session=é"}):
        encoded = {k: v.encode() for k, v in headers.items()}
        assert httpx.get(f"{world.ui}/api/status", headers=encoded).status_code == 401


def test_the_ui_answers_to_its_bind_address_and_allowed_hosts_with_or_without_ports():
    from ingot.cli.serve import ui_hosts

    hosts = ui_hosts("192.168.1.5", ("ui", "ingot.lan:8080", "[::1]:8080"))
    assert {"127.0.0.1", "localhost", "ui", "ingot.lan", "192.168.1.5"} <= set(hosts)
    assert "0.0.0.0" not in ui_hosts("0.0.0.0", ())  # noqa: S104


def test_health_checks_may_use_head(world):
    assert world.http.head(f"{world.ui}/healthz").status_code == 200


def test_evaluate_on_a_card_measures_the_change_again_and_the_card_shows_the_new_bundle(world):
    from tests.conftest import wait_for

    change = world.change(GOOD)
    before = change.evidence_path
    response = post(world, f"/changes/{GOOD}/evaluate", {"change_id": change.id})
    assert response.status_code == 303 and "/runs/run-" in response.headers["location"]
    run_id = response.headers["location"].rsplit("/", 1)[1]
    done = wait_for(
        lambda: (
            (r := world.http.get(f"{world.ui}/api/runs/{run_id}").json())["status"] in ("succeeded", "failed")
            and r
        ),
        timeout=120,
    )
    assert done["status"] == "succeeded", done
    after = world.control.queue.get(GOOD)
    assert after.id == change.id and after.evidence_path != before
    assert [e["path"] for e in after.evidence_history] == [before]  # the old bundle is kept and listed
    card = world.http.get(f"{world.ui}/review").text.split(f'data-skill="{GOOD}"')[1].split("</article>")[0]
    assert "routing impact" in card and after.evidence_path.split("/")[-2] in card


def test_a_withheld_candidate_is_listed_as_set_aside_not_dropped(world):
    waiting = world.change(GOOD)
    proposed = world.control.propose(GOOD, "optimizer", rewrite(world.root, GOOD, "WORSE"), {})
    assert proposed.withheld and world.control.queue.get(GOOD).id == waiting.id
    page = world.http.get(f"{world.ui}/review").text
    aside = page.split('data-testid="set-aside"')[1]
    assert proposed.change.id in aside and "withheld" in aside and waiting.id in aside


def test_a_new_skill_whose_quality_was_not_measured_needs_acknowledgement_and_can_be_approved(world):
    from tests.optimize.conftest import checks, skill_md

    files = {
        "SKILL.md": skill_md(
            "kiln-firing", "Plans glaze firings for an electric ceramic kiln.", "Ramp slowly."
        )
    }
    world.control.propose("kiln-firing", "agent", files, checks())
    card = (
        world.http.get(f"{world.ui}/review").text.split('data-skill="kiln-firing"')[1].split("</article>")[0]
    )
    assert (
        'class="state needs-acknowledgement"' in card
        and 'data-cell="held-out A/B" data-state="missing"' in card
    )
    assert 'data-testid="approve" disabled' not in card  # a person may approve it, naming why


def test_a_new_skill_approved_in_the_ui_is_removed_from_its_history_page_and_can_come_back(world):
    from tests.optimize.conftest import checks, skill_md

    files = {
        "SKILL.md": skill_md(
            "kiln-firing", "Plans glaze firings for an electric ceramic kiln.", "Ramp slowly."
        )
    }
    change = world.control.propose("kiln-firing", "agent", files, checks()).change
    why = {"change_id": change.id, "accept_missing": "a first draft"}
    assert post(world, "/changes/kiln-firing/approve", why).status_code == 303
    assert "kiln-firing" in world.library.skills()
    page = world.http.get(f"{world.ui}/history/kiln-firing").text
    row = page.split('data-revision="absent"')[1].split("</tr>")[0]
    assert "remove this skill" in row and "(it did not exist before)" in row and "Remove this skill" in row
    assert f'name="live" value="{change.candidate_revision}"' in row
    unpinned = post(world, "/history/kiln-firing/rollback", {"revision": "absent"}, Accept="application/json")
    assert unpinned.status_code == 422 and "kiln-firing" in world.library.skills()
    removed = post(
        world, "/history/kiln-firing/rollback", {"revision": "absent", "live": change.candidate_revision}
    )
    assert removed.status_code == 303 and removed.headers["location"] == "/history/kiln-firing?done=removed"
    assert "kiln-firing" not in world.library.skills() and not (world.root / "kiln-firing").exists()
    assert world.http.get(f"{world.ui}/api/status").json()["drifted"] == []
    page = world.http.get(f"{world.ui}/history/kiln-firing?done=removed").text
    assert "absent: this skill is not served" in page and "absent (removed)" in page
    row = page.split(f'data-revision="{change.candidate_revision}"')[1].split("</tr>")[0]
    assert 'name="live" value="absent"' in row and "Roll back to this" in row
    assert (
        "removed" in world.http.get(f"{world.ui}/history").text.split(">kiln-firing</a>")[1].split("</tr>")[0]
    )
    back = post(
        world, "/history/kiln-firing/rollback", {"revision": change.candidate_revision, "live": "absent"}
    )
    assert (
        back.status_code == 303
        and world.library.skills()["kiln-firing"].revision == change.candidate_revision
    )


def test_history_of_a_name_nothing_knows_is_404_with_the_nearest_names(world):
    response = world.http.get(f"{world.ui}/history/relase-notes", headers={"Accept": "application/json"})
    assert response.status_code == 404 and "did you mean 'release-notes'" in response.json()["error"]


def test_an_approval_accepts_only_the_evidence_and_the_missing_cells_the_reviewer_saw(world):
    from tests.optimize.conftest import NO_CODE, checks, routing, skill_md

    files = {
        "SKILL.md": skill_md("kiln-firing", "Plans glaze firings for an electric ceramic kiln.", "Ramp.")
    }
    change = world.control.propose("kiln-firing", "agent", files, checks()).change
    seen = {
        "change_id": change.id,
        "accept_missing": "reviewed by hand",
        "evidence_digest": change.evidence_digest,
        "accepting": ["held-out A/B", "routing impact", "sandbox checks"],
    }
    # Re-measured after the page was shown: the cells missing now are not the ones the reviewer saw.
    world.control.attach_evidence(
        "kiln-firing",
        change.id,
        {**checks(), **routing(), **NO_CODE, "ab": {"status": "not_measured", "why": "x"}},
        "t",
    )
    stale = post(world, "/changes/kiln-firing/approve", seen, Accept="application/json")
    assert stale.status_code == 409 and "re-evaluated since you looked" in stale.json()["error"]
    now = world.control.queue.get("kiln-firing")
    other = {**seen, "evidence_digest": now.evidence_digest, "accepting": ["routing impact"]}
    unseen = post(world, "/changes/kiln-firing/approve", other, Accept="application/json")
    assert (
        unseen.status_code == 409
        and "held-out A/B is missing now and you did not accept it" in unseen.json()["error"]
    )
    assert world.control.live_revision("kiln-firing") is None
    right = {**other, "accepting": ["held-out A/B"]}
    assert post(world, "/changes/kiln-firing/approve", right).status_code == 303
    assert world.control.live_revision("kiln-firing") == change.candidate_revision


def test_an_unknown_page_is_a_page_of_the_site_and_api_paths_keep_json_errors(world, page):
    response = page.goto(f"{world.ui}/audits")
    assert response.status == 404 and response.headers["content-type"].startswith("text/html")
    assert page.get_by_test_id("error-message").inner_text() == "No page at /audits."
    assert page.get_by_test_id("error-links").inner_text() == "Go to the Library, History or Review."
    assert page.get_by_test_id("pending-count").is_visible()  # in the site's layout, header and all
    page.get_by_test_id("error-links").get_by_role("link", name="Library").click()
    page.wait_for_url("**/library")
    for path, accept in (
        ("/api/nope", "text/html"),
        ("/nope", "application/json"),
        ("/static/nope.css", "*/*"),
    ):
        answer = world.http.get(f"{world.ui}{path}", headers={"Accept": accept})
        assert (answer.status_code, answer.json()) == (404, {"detail": "Not Found"}), path
    form_only = page.goto(f"{world.ui}/library/route")
    assert form_only.status == 405 and "POST" in form_only.headers["allow"]
    assert page.get_by_test_id("error-message").inner_text() == (
        "/library/route cannot be opened as a page: it only takes a form's submission."
    )
