"""A candidate's way in: `propose` queues it with its evidence, `attach_evidence` re-measures it.

Both run under the change lock and write the evidence bundle, the pending record and the audit
line, in that order: a record the chain does not hold is withdrawn again (unaudited means
unqueued). A candidate that does not pass its gate never displaces a waiting one that does.
Whether a change may go live is decided at approval (changes.py, verify.py), never here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingot.errors import IngotError, SkillChanged, WriteFailed, os_reason
from optimize.control import evidence as evidence_mod
from optimize.control.gate import evaluate
from optimize.control.lock import change_lock
from optimize.control.pending import PendingChange, new_change
from optimize.control.promote import tree_revision
from optimize.control.verify import what_changes

if TYPE_CHECKING:
    from optimize.control.changes import ChangeControl

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Proposed:
    """What `propose` did: the change, where a candidate it displaced went, and, when it was
    archived at once instead of queued (a passing change waits), why. Unpacks as (change, displaced)."""

    change: PendingChange
    displaced: Path | None = None
    withheld: str | None = None

    def __iter__(self):  # noqa: ANN204 - lets callers write `change, displaced = control.propose(...)`
        return iter((self.change, self.displaced))

    def __getitem__(self, index: int) -> PendingChange | Path | None:
        return (self.change, self.displaced)[index]


def propose(
    control: ChangeControl,
    skill: str,
    kind: str,
    source: str,
    files: Mapping[str, bytes],
    measurements: Mapping[str, Any],
    note: str | None = None,
    cost: Mapping[str, Any] | None = None,
    measured_against: str | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> Proposed:
    """Quarantine a candidate with its evidence; returns it and where a displaced one went.

    `measured_against` is the champion revision the measurements were taken on: if the live
    skill has changed since, the evidence describes something else and is refused."""
    with change_lock(control.runs_dir, control.lock_wait_s):
        champion = control.live_revision(skill)
        if measured_against is not None and champion != measured_against:
            raise SkillChanged(
                f"{skill!r} changed on disk during the run (measured {measured_against[:12]}, now "
                f"{(champion or 'gone')[:12]}); re-run it against the current revision"
            )
        if kind == "create" and champion is not None:
            raise IngotError(f"skill {skill!r} already exists; propose a rewrite instead")
        if kind != "create" and champion is None:
            raise IngotError(f"skill {skill!r} does not exist; propose a create instead")
        bundle = evidence_mod.write_bundle(
            control.runs_dir,
            skill,
            kind,
            champion,
            tree_revision(files),
            measurements,
            control.thresholds,
            cost,
            source,
            changes=what_changes(control.champion_files(skill), files, skill),
            provenance=provenance,
        )
        change = new_change(
            skill,
            kind,
            source,
            champion,
            files,
            str(bundle.path.relative_to(control.runs_dir)),
            bundle.digest,
            note,
        )
        withheld = _withheld(control, skill, bundle)
        if withheld:
            return _propose_withheld(control, change, bundle, withheld, source)
        try:
            displaced = control.queue.submit(change)
        except OSError as exc:
            raise WriteFailed(
                f"could not queue the change for {skill!r}: {os_reason(exc)}; nothing was queued"
            ) from exc
        if control.prepare is not None:
            try:
                control.prepare(skill, files)
            except Exception as exc:  # an optimisation only: never block a proposal on it
                log.warning("could not pre-embed the candidate for %s: %s", skill, exc)
        try:
            control.audit.append(
                action="propose",
                skill=skill,
                from_revision=champion,
                to_revision=change.candidate_revision,
                evidence_digest=bundle.digest,
                actor=source,
                change_id=change.id,
                archive=str(displaced.relative_to(control.runs_dir)) if displaced else None,
            )
        except IngotError:
            control.queue.withdraw(change, displaced)  # unaudited means unqueued
            raise
        return Proposed(change, displaced)


def attach_evidence(
    control: ChangeControl,
    skill: str,
    change_id: str,
    measurements: Mapping[str, Any],
    actor: str,
    cost: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    measured_against: str | None = None,
) -> tuple[PendingChange, evidence_mod.Evidence]:
    """Rest a pending change on fresh evidence (`ingot evaluate`): a new bundle with a new id,
    the earlier one kept where it was and listed in the record, and an `evidence` line in the
    chain that approval then checks instead of the `propose` line."""
    with control.writing():
        change = control.pending_change(skill, change_id)
        live = control.live_revision(skill)
        if live != change.champion_revision or (measured_against is not None and live != measured_against):
            made_against = (change.champion_revision or "nothing")[:12]
            raise SkillChanged(
                f"{skill!r} is live at {(live or 'nothing')[:12]}, not the {made_against} this change "
                "was made against; re-propose it against the current revision"
            )
        bundle = evidence_mod.write_bundle(
            control.runs_dir,
            skill,
            change.kind,
            change.champion_revision,
            change.candidate_revision,
            measurements,
            control.thresholds,
            cost,
            change.source,
            changes=what_changes(control.champion_files(skill), change.files, skill),
            provenance=provenance,
        )
        updated = control.queue.replace_evidence(
            change, str(bundle.path.relative_to(control.runs_dir)), bundle.digest
        )
        try:
            control.audit.append(
                action="evidence",
                skill=skill,
                from_revision=change.champion_revision,
                to_revision=change.candidate_revision,
                evidence_digest=bundle.digest,
                actor=actor,
                change_id=change.id,
            )
        except IngotError:
            control.queue.restore(change)  # the record rests only on what the chain records
            raise
        return updated, bundle


def _withheld(control: ChangeControl, skill: str, bundle: evidence_mod.Evidence) -> str | None:
    """Why a new candidate must not take the slot: a change that passes its gate waits there
    and this one does not pass. Nothing passing is ever displaced by something that is not."""
    try:
        waiting = control.queue.get(skill)
    except IngotError:
        return None  # an unreadable record is displaced into the archive, as before
    if waiting is None:
        return None
    new = evaluate(bundle.data, control.thresholds)
    if new.approvable:
        return None
    try:
        old = evaluate(
            evidence_mod.load(control.runs_dir / (waiting.evidence_path or "")).data, control.thresholds
        )
    except evidence_mod.EvidenceError:
        return None
    if not old.approvable:
        return None
    return (
        f"{waiting.id} passes its gate ({old.status}) and waits for review; this candidate is "
        f"{new.status} ({(new.reasons or ('',))[0]}), so it was archived instead of taking its slot"
    )


def _propose_withheld(
    control: ChangeControl, change: PendingChange, bundle: evidence_mod.Evidence, why: str, source: str
) -> Proposed:
    path = control.queue.archive_new(change, why)
    control.audit.append(
        action="propose",
        skill=change.skill,
        from_revision=change.champion_revision,
        to_revision=change.candidate_revision,
        evidence_digest=bundle.digest,
        actor=source,
        change_id=change.id,
        archive=str(path.relative_to(control.runs_dir)),
        reason=f"withheld: {why}",
    )
    return Proposed(change, None, why)
