"""Earned autonomy on real files and processes: clean changes lift a class to its ceiling, one
incident drops it to manual, a supervised change is promoted after its window (also across a
restart) unless rejected, and a change with a missing cell always waits for a person."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import time

import pytest

from ingot.home import establish
from mcp_server.skillmd import with_description
from optimize.control.autopilot import Autopilot, change_passport, report_incident
from optimize.control.changes import ApprovalRefused, ChangeControl
from optimize.control.lock import change_lock
from tests.conftest import BUNDLED_SKILLS
from tests.optimize.conftest import checks, ready_body, ready_create, replay_blocked

SKILL = "release-notes"
BASE = {"top1": 0.8, "recall_at_3": 0.9, "no_route_precision": 0.9}


def impact(better: bool = True) -> dict:
    after = {**BASE, "top1": 0.9} if better else BASE
    return {
        "routing_impact": {
            "status": "measured",
            "metrics": {"champion": BASE, "challenger": after, "n": {m: 8 for m in BASE}},
            "shadowed": [],
            "collisions": [],
        }
    }


def green() -> dict:
    """A description change's cells, all passing (A/B, replay, sandbox and cost do not apply)."""
    return {**checks(), **impact(), "ab": {"status": "not_applicable", "why": "description"}}


def description_files(control: ChangeControl, n: int) -> dict[str, bytes]:
    files = control.champion_files(SKILL)
    described = f"Drafts release notes from merged pull requests, version {n}. Use for changelogs."
    files["SKILL.md"] = with_description(files["SKILL.md"].decode(), described).encode()
    return files


@pytest.fixture
def control(tmp_path, library_factory) -> ChangeControl:
    root = tmp_path / "lib" / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    home = establish((root,))
    return ChangeControl(home.path, home.roots, neighbours=library_factory(root).current, review_window_s=60)


def propose(control: ChangeControl, n: int, measurements: dict | None = None):
    return control.propose(SKILL, "optimizer", description_files(control, n), measurements or green())


def allow(control: ChangeControl, level: str, cls: str = "description") -> None:
    with change_lock(control.runs_dir):
        control.autonomy.allow(SKILL, cls, level, "operator")


def test_three_clean_changes_lift_a_class_to_its_ceiling_and_one_rollback_drops_it(control):
    allow(control, "supervised")
    original = control.live_revision(SKILL)
    levels = []
    for n in range(1, 4):
        change, _ = propose(control, n)
        control.approve(SKILL, "reviewer", change.id)
        levels.append(control.autonomy.trust(SKILL, "description").level)
    assert levels == ["manual", "manual", "supervised"]  # the third clean change earns it
    change, _ = propose(control, 4)
    control.approve(SKILL, "reviewer", change.id)
    assert control.autonomy.trust(SKILL, "description").level == "supervised"  # never past the ceiling
    control.rollback(SKILL, original[:12], "reviewer", "bad")
    trust = control.autonomy.trust(SKILL, "description")
    assert trust.level == "manual" and trust.streak == 0 and "rolled back" in trust.last_incident
    reasons = [e.get("reason") for e in control.history(SKILL) if e.get("action") == "autonomy"]
    assert any("manual -> supervised" in r for r in reasons) and any("incident" in r for r in reasons)


def test_an_approval_that_is_not_green_restarts_the_streak_and_an_override_is_an_incident(control):
    allow(control, "auto")
    for n in (1, 2):
        change, _ = propose(control, n)
        control.approve(SKILL, "reviewer", change.id)
    assert control.autonomy.trust(SKILL, "description").streak == 2
    change, _ = propose(control, 3, {**green(), "checks": {"status": "not_measured", "why": "skipped"}})
    assert change_passport(control, change).state == "needs-acknowledgement"  # a person may accept it
    control.approve(SKILL, "reviewer", change.id, accept_missing="checked the description by hand")
    trust = control.autonomy.trust(SKILL, "description")
    assert (trust.level, trust.streak) == ("manual", 0)
    with change_lock(control.runs_dir):
        for _ in range(3):
            control.autonomy.record(SKILL, "description", "clean", "test", "earned")
    assert control.autonomy.trust(SKILL, "description").level == "supervised"
    files = control.champion_files(SKILL)  # description and body: a replay BLOCK needs a body
    files["SKILL.md"] = description_files(control, 4)["SKILL.md"] + b"\nA body line too.\n"
    change, _ = control.propose(SKILL, "optimizer", files, {**ready_body(), **replay_blocked()})
    assert change.kind == "both" and change_passport(control, change).overridable
    allow(control, "auto", "body")
    with change_lock(control.runs_dir):
        for _ in range(3):
            control.autonomy.record(SKILL, "body", "clean", "test", "earned")
    control.approve(SKILL, "reviewer", change.id, override_reason="shipping it anyway")
    for cls in ("description", "body"):  # a change to both counts for both classes
        trust = control.autonomy.trust(SKILL, cls)
        assert trust.level == "manual" and "override" in trust.last_incident, cls


def test_an_auto_class_promotes_a_green_change_at_the_next_tick_and_a_missing_cell_waits(control):
    allow(control, "auto")
    with change_lock(control.runs_dir):  # as if three clean changes had been earned
        for _ in range(3 * 2):
            control.autonomy.record(SKILL, "description", "clean", "test", "earned")
    assert control.autonomy.trust(SKILL, "description").level == "auto"
    missing = {**checks(), "routing_impact": {"status": "not_measured", "why": "no routing cases"}}
    held, _ = propose(control, 1, missing)
    (step,) = Autopilot(control).tick()
    assert step.did == "left for a person" and "routing impact missing" in step.why
    # autonomy never accepts missing evidence: its own approval of the held change is refused
    with pytest.raises(ApprovalRefused, match="needs acknowledgement"):
        control.approve(SKILL, "autonomy", held.id)
    assert control.queue.get(SKILL).id == held.id
    change, _ = propose(control, 2)  # green: displaces the held one
    steps = Autopilot(control).tick()
    assert [s.did for s in steps] == ["promoted"] and control.live_revision(
        SKILL
    ) == change.candidate_revision
    promotion = [e for e in control.history(SKILL) if e.get("action") == "promote" and e.get("outcome")][-1]
    assert promotion.get("actor") == "autonomy"


def test_a_supervised_change_waits_for_its_window_and_a_rejection_stops_it(control):
    allow(control, "supervised")
    with change_lock(control.runs_dir):
        for _ in range(3):
            control.autonomy.record(SKILL, "description", "clean", "test", "earned")
    now = [dt.datetime.now(dt.UTC)]
    pilot = Autopilot(control, clock=lambda: now[0])
    change, _ = propose(control, 1)
    assert [s.did for s in pilot.tick()] == ["waiting"]
    now[0] += dt.timedelta(seconds=61)
    assert [s.did for s in pilot.tick()] == ["promoted"]
    assert control.live_revision(SKILL) == change.candidate_revision
    rejected, _ = propose(control, 2)
    control.reject(SKILL, "not this one", "reviewer", rejected.id)
    now[0] += dt.timedelta(seconds=120)
    assert pilot.tick() == [] and control.live_revision(SKILL) == change.candidate_revision


def test_the_window_survives_a_restart_real_processes(control, tmp_path):
    allow(control, "supervised")
    with change_lock(control.runs_dir):
        for _ in range(3):
            control.autonomy.record(SKILL, "description", "clean", "test", "earned")
    change, _ = propose(control, 1)
    env = {
        **{k: v for k, v in os.environ.items() if k != "INGOT_HOME"},
        "HF_HUB_OFFLINE": "1",
        "REVIEW_WINDOW": "3",
    }

    def tick() -> str:
        done = subprocess.run(
            [sys.executable, "-m", "ingot.cli", "autonomy", "tick", "--skills", str(control.roots[0])],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert f"{change.id}  waiting:" in tick()  # a fresh process: the window started at the audit line
    deadline = time.monotonic() + 120
    while f"{change.id}  promoted:" not in (out := tick()):
        assert time.monotonic() < deadline, out
    assert control.live_revision(SKILL) == change.candidate_revision, (out, control.history(SKILL)[-3:])


def test_drift_after_an_autonomous_promotion_rolls_it_back_and_demotes(control):
    allow(control, "auto")
    with change_lock(control.runs_dir):
        for _ in range(6):
            control.autonomy.record(SKILL, "description", "clean", "test", "earned")
    before = control.live_revision(SKILL)
    change, _ = propose(control, 1)
    assert [s.did for s in Autopilot(control).tick()] == ["promoted"]
    skill_md = control.roots[0] / SKILL / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\nEdited behind Ingot's back.\n")
    steps = Autopilot(control).tick()
    assert [s.did for s in steps][:1] == ["incident"] and "rolled back" in steps[0].why
    assert control.live_revision(SKILL) == change.champion_revision == before
    assert control.autonomy.trust(SKILL, "description").level == "manual"
    assert Autopilot(control).tick() == []  # the same drift is reported once


def test_the_drift_watch_rescans_only_after_a_folder_changed_on_disk(control, library_factory):
    library = library_factory(control.roots[0])
    allow(control, "auto")
    with change_lock(control.runs_dir):
        for _ in range(6):
            control.autonomy.record(SKILL, "description", "clean", "test", "earned")
    change, _ = propose(control, 1)
    pilot = Autopilot(control, disk_state=library.on_disk)
    assert [s.did for s in pilot.tick()] == ["promoted"]
    scans = []
    status = control.status
    control.status = lambda: scans.append(1) or status()  # count the full scans
    library.reload()
    pilot.tick()
    pilot.tick()
    assert len(scans) == 1  # the promotion changed the disk once; nothing since
    skill_md = control.roots[0] / SKILL / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\nEdited behind Ingot's back.\n")
    library.reload()  # what the serving library's watcher does on the edit
    steps = pilot.tick()
    assert len(scans) == 2 and [s.did for s in steps][:1] == ["incident"]
    assert control.live_revision(SKILL) == change.champion_revision  # autonomy's promotion undone


def test_an_incident_after_autonomy_created_a_skill_removes_it_again(control):
    from tests.optimize.conftest import skill_md

    files = {
        "SKILL.md": skill_md(
            "kiln-firing", "Plans glaze firings for an electric ceramic kiln.", "Ramp slowly."
        )
    }
    change, _ = control.propose("kiln-firing", "agent", files, ready_create())
    control.approve("kiln-firing", "autonomy", change.id)  # as the autopilot does
    assert control.live_revision("kiln-firing") == change.candidate_revision
    notes = report_incident(control, "kiln-firing", "replay of the live revision failed", "test")
    assert any("rolled back to absent" in note for note in notes), notes
    assert control.live_revision("kiln-firing") is None and not control.status().drifted


def test_a_hand_edited_autonomy_file_promotes_nothing_and_is_named_in_one_line(control, tmp_path):
    """Trust is read from the chain: an autonomy.json edited to `auto` (never allowed, never
    earned) is not believed, and while it disagrees the autopilot refuses to act at all."""
    import json

    from tests.ingot.cli.test_main import ingot

    change, _ = propose(control, 1)
    assert change_passport(control, change).state == "ready"
    forged = {"level": "auto", "ceiling": "auto", "streak": 0, "last_incident": None}
    path = control.runs_dir / "autonomy.json"
    path.write_text(
        json.dumps({"schema_version": 1, "skills": {SKILL: {"description": forged}}, "mined": {}})
    )
    assert control.autonomy.trust(SKILL, "description").level == "manual"  # the chain's word
    steps = Autopilot(control).tick()
    assert [s.did for s in steps] == ["failed"] and "autonomy.json does not match the audit chain" in steps[
        0
    ].why
    assert (
        control.live_revision(SKILL) == change.champion_revision and control.queue.get(SKILL).id == change.id
    )
    root = control.roots[0]
    done = ingot("autonomy", "tick", "--skills", str(root), cwd=tmp_path)
    assert control.live_revision(SKILL) == change.champion_revision, done.stdout
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert (
        "autonomy.json does not match the audit chain (release-notes description: the file says level "
        "auto, ceiling auto, the chain says level manual" in done.stdout
    )
    allow(control, "supervised")  # an audited write rewrites the file from the chain
    assert control.autonomy.mirror_problem() is None
    assert control.autonomy.trust(SKILL, "description") == control.autonomy.table()[SKILL]["description"]
    assert json.loads(path.read_text())["skills"][SKILL]["description"]["level"] == "manual"


def test_trust_survives_only_through_the_chain_even_when_the_file_is_deleted(control):
    allow(control, "auto")
    with change_lock(control.runs_dir):
        for _ in range(6):
            control.autonomy.record(SKILL, "description", "clean", "test", "earned")
    (control.runs_dir / "autonomy.json").unlink()
    fresh = ChangeControl(control.runs_dir, control.roots)
    assert fresh.autonomy.trust(SKILL, "description").level == "auto"
    assert fresh.autonomy.mirror_problem() is not None  # the missing mirror disagrees: said once


def test_an_incident_on_a_manual_class_with_a_streak_says_the_streak_restarts(control):
    allow(control, "auto")
    change, _ = propose(control, 1)
    control.approve(SKILL, "reviewer", change.id)
    assert control.autonomy.trust(SKILL, "description").streak == 1
    with change_lock(control.runs_dir):
        control.autonomy.incident(SKILL, ("description",), "replay failed", "test")
    reason = [e.get("reason") for e in control.history(SKILL) if e.get("action") == "autonomy"][-1]
    assert (
        reason == "description: incident (replay failed): stays manual, streak 1 -> 0"
    )  # not "manual -> manual"
