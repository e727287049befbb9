"""Blessing, approving and retiring goldens: each one audited, and undone when it cannot be."""

from __future__ import annotations

import pytest

from ingot.errors import IngotError
from optimize.control.audit import AuditError, AuditLog
from optimize.control.goldens_admin import GoldenAdmin
from optimize.measure.goldens import GoldenError, Review, golden_from_trace
from optimize.models.traces import TraceRecord
from tests.optimize.conftest import ready_body, skill_md

MESSAGES = (
    {"role": "system", "content": "<skill>\n# Alpha\n\nStep one.\n</skill>"},
    {"role": "user", "content": "Do alpha"},
    {
        "role": "assistant",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "get", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c", "content": "value 42"},
)


def run_of(control, revision=None) -> TraceRecord:
    return TraceRecord(
        task="Do alpha",
        answer="Alpha done with 42.",
        route="match",
        skill="alpha",
        revision=revision or control.live_revision("alpha"),
        model="agent-model",
        messages=MESSAGES,
    )


def actions(control) -> list[tuple]:
    return [(e.get("action"), e.get("golden"), e.get("reason")) for e in AuditLog(control.runs_dir).entries()]


def test_blessing_stores_the_golden_with_its_revisions_files_and_audits_it(control):
    admin = GoldenAdmin(control)
    record = run_of(control)
    stored, created = admin.bless(record, "ana")
    assert created and stored.review.status == "none" and stored.review.notes
    assert admin.store.revision_files("alpha", record.revision) == control.promoter.read_tree(
        control.roots[0] / "alpha", "alpha"
    )
    assert actions(control) == [("golden-bless", stored.golden.digest, f"from trace {record.id}")]
    again, created_again = admin.bless(record, "ana")
    assert not created_again and again.id == stored.id and len(actions(control)) == 1


def test_the_teachers_draft_is_kept_until_a_person_approves_it(control):
    admin = GoldenAdmin(control)
    draft = Review(status="teacher-drafted", drafted_by="teacher-model")
    stored, _ = admin.bless(run_of(control), "ana", drafter=lambda golden: draft)
    assert stored.review.status == "teacher-drafted"
    approved = admin.approve(
        stored.id, "bo", ["states 42"], [{"step": 1, "label": "the value", "value": "42"}]
    )
    assert (approved.review.status, approved.review.approved_by, approved.review.drafted_by) == (
        "human-approved",
        "bo",
        "teacher-model",
    )
    assert admin.store.find(stored.id).review.facts[0].tool == "get"
    assert actions(control)[-1] == (
        "golden-approve",
        stored.golden.digest,
        "criteria and world facts approved",
    )


def test_retiring_is_audited_with_its_reason_and_stops_replays(control):
    admin = GoldenAdmin(control)
    stored, _ = admin.bless(run_of(control), "ana")
    with pytest.raises(IngotError, match="needs a reason"):
        admin.retire(stored.id, "ana", " ")
    retired = admin.retire(stored.id, "ana", "the task no longer exists")
    assert retired.review.state == "retired" and retired.review.retired_by == "ana"
    assert admin.store.active("alpha")[0] == []
    assert actions(control)[-1] == ("golden-retire", stored.golden.digest, "the task no longer exists")
    with pytest.raises(IngotError, match="already retired"):
        admin.retire(stored.id, "ana", "again")
    assert AuditLog(control.runs_dir).verify().ok


def test_a_run_of_a_revision_that_is_neither_live_nor_snapshotted_cannot_be_blessed(control):
    admin = GoldenAdmin(control)
    with pytest.raises(GoldenError, match="neither live nor snapshotted"):
        admin.bless(run_of(control, revision="cd" * 32), "ana")
    old = run_of(control)
    files = {"SKILL.md": skill_md("alpha", "Alpha does alpha things.", "Better step one.")}
    change, _ = control.propose("alpha", "optimizer", files, ready_body())
    control.approve("alpha", "ana", change.id)
    snapshot = control.promoter.revisions / "alpha" / old.revision / "SKILL.md"
    original = snapshot.read_bytes()
    snapshot.write_bytes(original + b"tampered\n")
    with pytest.raises(GoldenError, match="neither live nor snapshotted"):
        admin.bless(old, "ana")  # a snapshot that no longer hashes to its revision is not used
    snapshot.write_bytes(original)
    stored, _ = admin.bless(old, "ana")  # the displaced revision's snapshot is used, verified
    assert stored.golden.revision == old.revision != control.live_revision("alpha")


def test_a_bless_that_cannot_be_audited_is_undone(control):
    admin = GoldenAdmin(control)
    first = run_of(control)
    admin.bless(first, "ana")
    chain = control.runs_dir / "audit.jsonl"
    chain.write_text(chain.read_text().replace("golden-bless", "golden-blesz"))  # tampered: appends refuse
    second = run_of(control)
    with pytest.raises(AuditError):
        admin.bless(second, "ana")
    assert [s.golden.source["trace"] for s in admin.store.all("alpha")[0]] == [first.id]
    assert not (admin.store.folder / "alpha" / f"{golden_from_trace(second).digest}.json").exists()
