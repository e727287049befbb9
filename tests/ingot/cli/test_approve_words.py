"""What `ingot approve` and `ingot pending` say when the passport is not ready, as real processes:
a stale change says it is stale and how to re-measure, a wrong or extra accepted cell is named,
and a blank reason is asked for by name."""

from __future__ import annotations

import json
import shutil

from ingot.home import establish
from optimize.control.changes import ChangeControl
from tests.conftest import BUNDLED_SKILLS
from tests.ingot.cli.test_errors import error_line
from tests.ingot.cli.test_main import ingot
from tests.optimize.conftest import body_rewrite, ready_body

SKILL = "release-notes"


def waiting(tmp_path, library_factory, measurements: dict):
    """A body change of release-notes queued with `measurements`; (root, control, change id)."""
    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    home = establish((root,))
    control = ChangeControl(home.path, home.roots, neighbours=library_factory(root).current)
    change = control.propose(SKILL, "optimizer", body_rewrite(root, SKILL), measurements).change
    return root, control, change.id


def no_replay() -> dict:
    """Every body cell passing (cost included) except replay, which is missing."""
    return {k: v for k, v in ready_body().items() if k != "replay"}


def test_a_hand_edit_of_the_live_skill_makes_the_waiting_change_stale_not_failed(tmp_path, library_factory):
    root, control, change_id = waiting(tmp_path, library_factory, ready_body())
    measured_on = control.live_revision(SKILL)
    skill_md = root / SKILL / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\nEdited by hand.\n")
    live_now = control.live_revision(SKILL)
    args = ("--skills", str(root))
    line = (
        f"the live skill changed since this evidence was measured (measured on {measured_on[:12]}, "
        f"live now {live_now[:12]}): re-measure with `ingot evaluate {SKILL} --change {change_id}`"
    )
    listed = ingot("pending", *args, cwd=tmp_path)
    assert f"stale: {line}" in listed.stdout and "fail" not in listed.stdout, listed.stdout
    refused = ingot("approve", SKILL, "--change", change_id, *args, cwd=tmp_path)
    assert error_line(refused, 1) == f"Error: {change_id} is stale: {line}"
    (entry,) = json.loads(ingot("pending", "--json", *args, cwd=tmp_path).stdout)
    assert entry["passport"]["state"] == "stale"
    states = {c["state"] for c in entry["passport"]["cells"]}
    assert states <= {"stale", "n/a"} and "stale" in states
    assert "Edited by hand." in skill_md.read_text()


def test_accepting_a_cell_that_passed_is_refused_and_names_the_missing_ones(tmp_path, library_factory):
    root, control, change_id = waiting(tmp_path, library_factory, no_replay())
    args = ("--change", change_id, "--skills", str(root))
    reason = ("--accept-missing", "no blessed run yet")
    both = ingot("approve", SKILL, *reason, "--accepting", "replay,cost", *args, cwd=tmp_path)
    assert error_line(both, 1) == (
        "Error: cost is not missing on this change (cost: pass), so there is nothing to accept for it; "
        'the missing cells are: replay. Name only those: --accepting "replay"'
    )
    wrong = ingot("approve", SKILL, *reason, "--accepting", "cost", *args, cwd=tmp_path)
    line = error_line(wrong, 3)  # replay missing and unnamed: nothing unseen is accepted
    assert "cost is not missing on this change" in line and "the missing cells are: replay" in line
    assert "passport changed since" not in line
    assert control.queue.get(SKILL).id == change_id  # nothing was approved


def test_a_blank_reason_is_asked_for_by_name(tmp_path, library_factory):
    root, control, change_id = waiting(tmp_path, library_factory, no_replay())
    args = ("--change", change_id, "--skills", str(root))
    blank = ingot("approve", SKILL, "--accept-missing", "  ", "--accepting", "replay", *args, cwd=tmp_path)
    assert error_line(blank, 1).startswith('Error: a reason is required: --accept-missing "REASON"')
    unnamed = ingot("approve", SKILL, "--accept-missing", " ", *args, cwd=tmp_path)
    assert error_line(unnamed, 1).startswith('Error: a reason is required: --accept-missing "REASON"')
    assert control.queue.get(SKILL).id == change_id
