"""Change control end to end on real files: propose, approve (re-verified), reject, drift."""

from __future__ import annotations

import json
import multiprocessing
import shutil

import pytest

from ingot.errors import ChangeNotFound, ConfigError, IngotError, NotFound, PromotionError, SkillNotFound
from mcp_server.registry import Registry
from optimize.control.audit import AuditLog
from optimize.control.changes import ApprovalRefused
from optimize.control.lock import PromotionConflict
from optimize.control.promote import ABSENT
from tests.optimize.conftest import ab, checks, ready_body, ready_create, ready_description, skill_md


def served(control, name="alpha"):
    registry = Registry(control.roots)
    registry.reload()
    skill = registry.skills().get(name)
    return skill.revision if skill else None


def rewrite(control, text="Better step one.", measurements=None):
    files = {"SKILL.md": skill_md("alpha", "Alpha does alpha things.", text)}
    return control.propose("alpha", "optimizer", files, measurements or ready_body())


def test_pending_content_never_serves_until_approved(control):
    before = served(control)
    change, _ = rewrite(control)
    assert served(control) == before
    outcome = control.approve("alpha", "reviewer", change.id)
    assert served(control) == change.candidate_revision == outcome.to_revision
    assert control.pending() == []
    assert control.queue.archived("alpha")[-1]["archived_status"] == "approved"


def test_a_newer_candidate_archives_the_displaced_one_and_says_where(control):
    first, _ = rewrite(control, "First try.")
    second, displaced = rewrite(control, "Second try.")
    assert displaced is not None and displaced.name == f"{first.id}.json"
    assert json.loads(displaced.read_text())["archived_reason"] == f"displaced by {second.id}"
    assert [c.id for c in control.pending()] == [second.id]


def test_a_create_with_only_passing_checks_is_approved_only_naming_what_is_missing(control):
    files = {"SKILL.md": skill_md("beta", "Beta does beta things.", "Do beta.")}
    change = control.propose("beta", "agent", files, checks()).change
    with pytest.raises(ApprovalRefused, match="needs acknowledgement: 3 cell.*held-out A/B.*routing impact"):
        control.approve("beta", "reviewer", change.id)
    assert served(control, "beta") is None
    control.approve("beta", "reviewer", change.id, accept_missing="a trivial skill; measured live")
    assert served(control, "beta") is not None
    intent = next(e for e in control.history("beta") if e.get("action") == "promote-intent")
    assert intent.get("accepted_missing") == ["held-out A/B", "routing impact", "sandbox checks"]
    assert intent.get("acceptance_reason") == "a trivial skill; measured live"
    assert intent.get("passport") == "needs-acknowledgement"
    assert "accepted missing held-out A/B, routing impact, sandbox checks" in intent.get("reason")


def test_a_body_change_with_no_models_needs_acknowledgement_not_a_block(control):
    change = rewrite(control, measurements={"ab": {"status": "not_measured", "why": "no models"}}).change
    assert control.passport(change).state == "needs-acknowledgement"
    with pytest.raises(ApprovalRefused, match=r'held-out A/B \(no models\).*--accept-missing "REASON"'):
        control.approve("alpha", "reviewer", change.id)
    with pytest.raises(ApprovalRefused):
        control.approve("alpha", "reviewer", change.id, accept_missing="   ")  # blank is no reason
    control.approve("alpha", "reviewer", change.id, accept_missing="hand edit; no model configured")
    assert served(control) == change.candidate_revision


def test_a_ready_change_needs_no_reason_and_records_none(control):
    change = rewrite(control).change
    assert control.passport(change).state == "ready"
    control.approve("alpha", "reviewer", change.id)
    intent = next(e for e in control.history("alpha") if e.get("action") == "promote-intent")
    assert intent.get("passport") == "ready" and intent.get("accepted_missing") is None


def test_a_challenger_that_regresses_a_task_the_champion_passed_is_blocked(control):
    regressed = ab([0.6, 0.2, 0.1, 0.2], [1.0, 1.0, 0.9, 1.0], fail_case=0)
    rewrite(control, measurements={**ready_body(), **regressed})
    with pytest.raises(ApprovalRefused, match="blocked: held-out A/B fail: regresses held-out task"):
        control.approve("alpha", "reviewer", control.queue.get("alpha").id, accept_missing="any")
    refused = [e for e in AuditLog(control.runs_dir).entries() if e.get("action") == "approve-refused"]
    assert refused and "regresses" in refused[-1].get("reason")


def test_edited_evidence_is_refused(control):
    change, _ = rewrite(control)
    path = control.runs_dir / change.evidence_path
    path.write_text(path.read_text().replace('"champion": 0.2', '"champion": 0.0'))
    with pytest.raises(ApprovalRefused, match="evidence.json changed"):
        control.approve("alpha", "reviewer", control.queue.get("alpha").id)


def test_a_forged_pending_record_is_refused(control):
    rewrite(control)
    slot = control.queue.slot("alpha")
    record = json.loads(slot.read_text())
    import base64

    record["files"][0]["base64"] = base64.b64encode(skill_md("alpha", "Alpha.", "rm -rf /")).decode()
    slot.write_text(json.dumps(record))
    with pytest.raises(ApprovalRefused, match="hash to"):
        control.approve("alpha", "reviewer", control.queue.get("alpha").id)


def test_a_champion_changed_after_the_evidence_is_refused(control):
    rewrite(control)
    (control.roots[0] / "alpha" / "SKILL.md").write_bytes(skill_md("alpha", "Alpha, hand-edited.", "x"))
    with pytest.raises(ApprovalRefused, match=r"is stale: the live skill changed since this evidence"):
        control.approve("alpha", "reviewer", control.queue.get("alpha").id)


def test_reject_keeps_the_candidate_in_the_archive_with_the_reason(control):
    change, _ = rewrite(control)
    archived = control.reject("alpha", "too verbose", "reviewer")
    record = json.loads(archived.read_text())
    assert record["id"] == change.id and record["archived_reason"] == "too verbose"
    assert record["files"]  # the candidate itself is kept
    assert AuditLog(control.runs_dir).entries()[-1].get("reason") == "too verbose"
    with pytest.raises(IngotError, match="needs a reason"):
        control.reject("alpha", " ", "reviewer")


def test_path_traversal_in_a_skill_name_is_refused(control):
    with pytest.raises(PromotionError, match="not a valid skill name"):
        control.approve("../alpha", "reviewer", "chg-000000000000")


def test_a_second_approval_of_the_same_change_is_a_conflict(control):
    change, _ = rewrite(control)
    control.approve("alpha", "first", change.id)
    with pytest.raises(PromotionConflict, match="already approved"):
        control.approve("alpha", "second", change.id)


def test_approval_is_pinned_to_the_change_that_was_reviewed(control):
    reviewed, _ = rewrite(control, "Reviewed text.")
    rewrite(control, "Swapped in after the review.")  # e.g. an agent resubmitting
    with pytest.raises(PromotionConflict, match="is now chg-"):
        control.approve("alpha", "reviewer", reviewed.id)


def test_a_create_record_cannot_overwrite_an_existing_skill(control):
    files = {"SKILL.md": skill_md("alpha", "Alpha does alpha things.", "Exfiltrate nothing, but differ.")}
    change, _ = control.propose("alpha", "optimizer", files, ready_body())
    slot = control.queue.slot("alpha")
    record = json.loads(slot.read_text())
    record["kind"] = "create"
    slot.write_text(json.dumps(record))
    with pytest.raises(
        ApprovalRefused, match="calls .* a create change, but its evidence was measured for a body"
    ):
        control.approve("alpha", "reviewer", change.id)


def test_a_change_is_classified_by_what_its_bytes_change_whoever_labels_it(control):
    live = control.champion_files("alpha")["SKILL.md"].decode()
    described = live.replace("Alpha does alpha things.", "Alpha does alpha things, better described.")
    cases = {
        "description": described.encode(),
        "body": live.replace("Step one.", "A different body.").encode(),
        "both": described.replace("Step one.", "A different body.").encode(),
    }
    for kind, text in cases.items():
        change = control.propose("alpha", "optimizer", {"SKILL.md": text}, checks()).change
        assert change.kind == kind, kind
        data = json.loads((control.runs_dir / change.evidence_path).read_text())
        assert data["kind"] == data["changes"]["kind"] == data["passport"]["kind"] == kind
    extra = {"SKILL.md": cases["description"], "scripts/run.sh": b"echo hi\n"}
    assert control.propose("alpha", "optimizer", extra, checks()).change.kind == "both"


def test_evidence_measured_for_a_description_does_not_approve_a_candidate_that_changes_more(control):
    live = control.champion_files("alpha")["SKILL.md"].decode()
    described = live.replace("Alpha does alpha things.", "Alpha does alpha things, better described.")
    files = {"SKILL.md": described.encode()}
    change = control.propose("alpha", "optimizer", files, ready_description()).change
    assert change.kind == "description"
    slot = control.queue.slot("alpha")
    record = json.loads(slot.read_text())
    evidence = control.runs_dir / change.evidence_path
    data = json.loads(evidence.read_text())
    # A bundle that says it measured a description change, for files that also change the body,
    # re-hashed and re-recorded so that every digest matches: the bytes still decide the kind.
    changed = described.replace("Step one.", "A different body.").encode()
    import base64
    import hashlib

    from optimize.control.promote import tree_revision

    record["files"][0]["base64"] = base64.b64encode(changed).decode()
    record["candidate_revision"] = data["candidate_revision"] = tree_revision({"SKILL.md": changed})
    evidence.write_text(json.dumps(data))
    record["evidence"]["digest"] = hashlib.sha256(evidence.read_bytes()).hexdigest()
    slot.write_text(json.dumps(record))
    with pytest.raises(ApprovalRefused):
        control.approve("alpha", "reviewer", change.id, accept_missing="x")
    assert served(control) != record["candidate_revision"]


def test_a_record_in_another_skills_slot_or_with_a_path_id_is_refused(control):
    change, _ = rewrite(control)
    slot = control.queue.slot("alpha")
    record = json.loads(slot.read_text())
    record["id"] = "../../../../skills/alpha/notes"
    slot.write_text(json.dumps(record))
    with pytest.raises(IngotError, match="malformed change id"):
        control.approve("alpha", "reviewer", change.id)
    with pytest.raises(IngotError, match="malformed change id"):
        control.reject("alpha", "bad record", "reviewer")
    assert slot.exists() and not (control.runs_dir / "pending" / "archive").exists()  # nothing moved
    shutil.copy(slot, control.queue.slot("beta"))
    with pytest.raises(IngotError):
        control.queue.get("beta")


def test_a_hand_edit_after_promotion_is_reported_as_drift(control):
    rewrite(control)
    control.approve("alpha", "reviewer", control.queue.get("alpha").id)
    assert not control.status().drifted
    (control.roots[0] / "alpha" / "SKILL.md").write_bytes(skill_md("alpha", "Alpha, hand-edited.", "x"))
    assert [s.name for s in control.status().drifted] == ["alpha"]


def test_rollback_by_revision_prefix_from_history(control):
    original = served(control)
    rewrite(control)
    control.approve("alpha", "reviewer", control.queue.get("alpha").id)
    control.rollback("alpha", original[:10], "reviewer", "regression")
    assert served(control) == original
    actions = [e.get("action") for e in control.history("alpha") if e.get("action") != "autonomy"]
    assert actions[-2:] == ["rollback-intent", "rollback"]


def _approve_in_child(args):
    runs, roots, queue, change_id = args
    from optimize.control.changes import ChangeControl
    from optimize.control.lock import PromotionConflict as Conflict

    try:
        ChangeControl(runs, roots).approve("alpha", "racer", change_id)
        queue.put("promoted")
    except Conflict:
        queue.put("conflict")
    except Exception as exc:  # report, don't hang the parent
        queue.put(f"error: {exc!r}")


def test_eight_processes_approving_at_once_give_one_promotion_and_seven_conflicts(control, tmp_path):
    context = multiprocessing.get_context("fork")
    pristine = tmp_path / "pristine"
    shutil.copytree(control.roots[0], pristine)
    for round_ in range(20):
        shutil.rmtree(control.roots[0])
        shutil.copytree(pristine, control.roots[0])
        shutil.rmtree(control.runs_dir, ignore_errors=True)
        change, _ = rewrite(control, f"Round {round_}.")
        queue = context.Queue()
        workers = [
            context.Process(
                target=_approve_in_child, args=((control.runs_dir, control.roots, queue, change.id),)
            )
            for _ in range(8)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        results = sorted(queue.get(timeout=5) for _ in workers)
        assert results == ["conflict"] * 7 + ["promoted"], (round_, results)
        audit = AuditLog(control.runs_dir)
        assert audit.verify().ok
        assert [e.get("action") for e in audit.entries()].count("promote") == 1


def test_a_kill_between_promotion_and_archiving_is_settled_by_recovery(control):
    change, _ = rewrite(control)
    bundle_digest = change.evidence_digest
    control.promoter.switch(
        "alpha",
        control.roots[0],
        change.files,
        expected_from=change.champion_revision,
        action="promote",
        actor="reviewer",
        evidence_digest=bundle_digest,
        change_id=change.id,
    )  # ...and the process died before archiving
    assert control.queue.get("alpha") is not None
    notes = control.recover()
    assert control.queue.get("alpha") is None and any("archived as approved" in n for n in notes)


def test_status_reports_a_deleted_or_broken_managed_skill_as_drifted(control):
    change, _ = rewrite(control)
    control.approve("alpha", "reviewer", change.id)
    shutil.rmtree(control.roots[0] / "alpha")
    drifted = control.status().drifted
    assert [s.name for s in drifted] == ["alpha"] and drifted[0].live_revision is None


def test_an_incomplete_snapshot_is_replaced_not_trusted(control):
    original = served(control)
    snapshot = control.promoter.snapshot_path("alpha", original)
    snapshot.mkdir(parents=True)
    (snapshot / "SKILL.md").write_text("half a file")
    change, _ = rewrite(control)
    control.approve("alpha", "reviewer", change.id)
    control.rollback("alpha", original, "reviewer", "back")
    assert served(control) == original


def test_an_unreadable_audit_line_is_a_clear_error(control):
    rewrite(control)
    with control.audit.path.open("a") as handle:
        handle.write("not json at all\n")
    with pytest.raises(IngotError, match="audit"):
        control.status().audit.ok or control.history("alpha")


def _forge_pending(control, name: str, files: dict, measurements: dict) -> str:
    """A pending record plus evidence computed by hand, consistent with each other and the disk,
    but never queued through `propose` (so the keyed chain has no line for it)."""
    from optimize.control import evidence as evidence_mod
    from optimize.control.pending import new_change
    from optimize.control.promote import tree_revision

    champion = control.live_revision(name)
    bundle = evidence_mod.write_bundle(
        control.runs_dir,
        name,
        "body",
        champion,
        tree_revision(files),
        measurements,
        control.thresholds,
        None,
        "optimizer",
    )
    change = new_change(
        name,
        "body",
        "optimizer",
        champion,
        files,
        str(bundle.path.relative_to(control.runs_dir)),
        bundle.digest,
    )
    control.queue.slot(name).write_text(json.dumps(change.to_json()))  # as a forger would
    return change.id


def test_a_self_consistent_forged_pending_record_is_refused(control):
    rewrite(control, "An honest change first.")
    control.approve("alpha", "reviewer", control.queue.get("alpha").id)
    live = served(control)
    files = {"SKILL.md": skill_md("alpha", "Alpha does alpha things.", "Forged step.")}
    forged = _forge_pending(control, "alpha", files, ready_body())
    assert control.refusal(control.queue.get("alpha")) is not None
    [problem] = control.status().unaudited  # status says so too, not "ok"
    assert forged in problem and "no audit line holds this record" in problem
    with pytest.raises(ApprovalRefused, match="no `propose` line"):
        control.approve("alpha", "reviewer", forged)
    assert served(control) == live


def test_a_pending_record_edited_after_its_proposal_is_refused(control):
    change, _ = rewrite(control)
    slot = control.queue.slot("alpha")
    data = json.loads(slot.read_text())
    data["champion_revision"] = "f" * 64
    slot.write_text(json.dumps(data))
    with pytest.raises(ApprovalRefused, match="differs from its audited proposal"):
        control.approve("alpha", "reviewer", change.id)


def test_two_duplicates_that_each_passed_alone_cannot_both_be_approved(control):
    description = "Reconciles supplier invoices against purchase orders and flags mismatches."
    for name in ("invoice-match", "invoice-check"):
        control.propose(name, "agent", {"SKILL.md": skill_md(name, description, "Match.")}, ready_create())
    control.approve("invoice-match", "reviewer", control.queue.get("invoice-match").id)
    with pytest.raises(ApprovalRefused, match="collision with the library as it is now: .*invoice-match"):
        control.approve("invoice-check", "reviewer", control.queue.get("invoice-check").id)
    assert served(control, "invoice-check") is None


def test_without_the_library_a_description_change_is_not_approved_blind(control):
    from optimize.control.changes import ChangeControl

    files = {"SKILL.md": skill_md("beta", "Beta does beta things.", "Do beta.")}
    control.propose("beta", "agent", files, ready_create())
    blind = ChangeControl(control.runs_dir, control.roots)
    with pytest.raises(ApprovalRefused, match="re-checks the description"):
        blind.approve("beta", "reviewer", blind.queue.get("beta").id)


def test_a_forged_promotion_line_never_archives_a_pending_change(control):
    from tests.optimize.control.test_audit import _forged_line

    change, _ = rewrite(control)
    audit = AuditLog(control.runs_dir)
    forged = _forged_line(audit, action="promote", skill="alpha", outcome="done", change_id=change.id)
    audit.path.write_bytes(audit.path.read_bytes() + forged)
    with pytest.raises(IngotError, match="broken at line"):
        control.recover()
    assert control.queue.get("alpha").id == change.id


def test_unknown_skills_and_change_ids_are_not_found_with_the_nearest_names(control):
    change, _ = rewrite(control)
    for call in (
        lambda: control.approve("alpah", "reviewer", change.id),
        lambda: control.reject("alpah", "no", "reviewer", change.id),
        lambda: control.history("alpah"),
        lambda: control.rollback("alpah", "0" * 12, "reviewer", expected_live=ABSENT),
    ):
        with pytest.raises(SkillNotFound, match="did you mean 'alpha'"):
            call()
    typo = change.id[:-1] + ("0" if change.id[-1] != "0" else "1")
    for call in (
        lambda: control.approve("alpha", "reviewer", typo),
        lambda: control.reject("alpha", "no", "reviewer", typo),
        lambda: control.pending_change("alpha", typo),
    ):
        with pytest.raises(ChangeNotFound, match=f"did you mean '{change.id}'"):
            call()
    with pytest.raises(NotFound, match="matches 0 snapshots"):
        control.rollback("alpha", "ffffffff", "reviewer", expected_live=served(control))
    assert control.queue.get("alpha") == change and served(control) == change.champion_revision


def test_a_reject_pinned_to_a_displaced_change_is_a_conflict_and_keeps_the_newer_one(control):
    reviewed, _ = rewrite(control, "Reviewed text.")
    newer, _ = rewrite(control, "Swapped in after the review.")
    with pytest.raises(PromotionConflict, match="is now chg-"):
        control.reject("alpha", "not this", "reviewer", reviewed.id)
    assert control.queue.get("alpha") == newer


def test_a_rollback_is_pinned_to_the_live_revision_the_caller_saw(control):
    original = served(control)
    rewrite(control)
    promoted = control.approve("alpha", "reviewer", control.queue.get("alpha").id).to_revision
    with pytest.raises(PromotionConflict, match="not the"):
        control.rollback("alpha", original[:12], "reviewer", expected_live=original[:12])  # stale
    with pytest.raises(PromotionConflict, match="not the absent"):
        control.rollback("alpha", original[:12], "reviewer", expected_live=ABSENT)
    with pytest.raises(ConfigError, match="at least 8 characters"):
        control.rollback("alpha", original[:12], "reviewer", expected_live=promoted[:4])
    assert served(control) == promoted
    control.rollback("alpha", original[:12], "reviewer", expected_live=promoted[:8])
    assert served(control) == original


def test_an_approved_new_skill_can_be_rolled_back_to_absent_and_restored(control):
    files = {"SKILL.md": skill_md("beta", "Beta plans kiln firings for glazed stoneware.", "Ramp slowly.")}
    change, _ = control.propose("beta", "agent", files, ready_create())
    created = control.approve("beta", "reviewer", change.id).to_revision
    assert control.snapshots("beta") == [created, ABSENT]  # the live one is kept (served when pinned)
    removed = control.rollback("beta", ABSENT, "reviewer", "undo the new skill", expected_live=created)
    assert removed.to_revision is None and served(control, "beta") is None
    assert control.live_revision("beta") is None and control.snapshots("beta") == [created, ABSENT]
    beta = next(s for s in control.status().skills if s.name == "beta")
    assert beta.removed and not beta.drifted and not control.status().drifted
    with pytest.raises(PromotionError, match="already absent"):
        control.rollback("beta", ABSENT, "reviewer", expected_live=ABSENT)
    control.rollback("beta", created[:12], "reviewer", "bring it back", expected_live=ABSENT)
    assert served(control, "beta") == created and control.root_of("beta") == control.roots[0]


def test_a_damaged_pending_record_blocks_only_its_own_skill(control, library_factory):
    change, _ = rewrite(control)
    slot = control.queue.slot("alpha")
    slot.write_text(slot.read_text().replace(change.id, "../escape"))
    files = {"SKILL.md": skill_md("beta", "Beta plans kiln firings for glazed stoneware.", "Ramp slowly.")}
    created, _ = control.propose("beta", "agent", files, ready_create())
    assert control.approve("beta", "reviewer", created.id).to_revision == created.candidate_revision
    with pytest.raises(IngotError, match="malformed change id"):
        control.reject("alpha", "bad record", "reviewer")
    assert slot.exists()  # kept for a person to look at, never archived or dropped
