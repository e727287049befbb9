"""A candidate's way in: `propose` queues it with its evidence, `attach_evidence` re-measures it.

Both run under the change lock, after recovery, and write the evidence bundle, then the record
(staged), then the audit line, then place the record in its slot: a record and its line are
one recoverable step, and a record the chain does not hold is never pending (unaudited means
unqueued). The change's kind is classified here, from its bytes against the live skill
(kinds.what_changes), whoever proposed it. A candidate whose passport is worse than the waiting
one's (blocked behind ready or needs-acknowledgement, or needs-acknowledgement behind ready)
never displaces it: it is archived as withheld. A candidate read from somewhere (the inbox's
`origin`) is proposed at most once per revision: under the lock, after recovery, a revision the
newest `propose` line of its origin already holds is refused (`AlreadyProposed`), so a writer
killed anywhere and run again never queues it twice. Whether a change may go live is decided at
approval (changes.py, verify.py), never here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingot.errors import IngotError, SkillChanged, WriteFailed, os_reason, write_or_fail
from optimize.control import evidence as evidence_mod
from optimize.control.audit import AuditEntry
from optimize.control.kinds import what_changes
from optimize.control.lock import PromotionConflict
from optimize.control.passport import STATES, passport
from optimize.control.pending import PendingChange, new_change
from optimize.control.promote import ABSENT, tree_revision

if TYPE_CHECKING:
    from optimize.control.changes import ChangeControl

log = logging.getLogger(__name__)


class SlotTaken(PromotionConflict):
    """Another proposer's change waits in the skill's slot, and this proposal may not displace it."""


class AlreadyProposed(PromotionConflict):
    """The chain already holds a `propose` line for this revision from this origin."""


class ProposalWithheld(PromotionConflict):
    """A candidate was archived as withheld instead of queued: a better change waits in its slot."""


@dataclass(frozen=True)
class Proposed:
    """What `propose` did: the change, where a candidate it displaced went, and, when it was
    archived at once instead of queued (a better change waits), why, the waiting change's id and
    where the candidate was archived. Unpacks as (change, displaced)."""

    change: PendingChange
    displaced: Path | None = None
    withheld: str | None = None
    waiting: str | None = None  # the change it was withheld behind
    archived: Path | None = None  # where a withheld candidate was archived

    def __iter__(self):  # noqa: ANN204 - lets callers write `change, displaced = control.propose(...)`
        return iter((self.change, self.displaced))

    def __getitem__(self, index: int) -> PendingChange | Path | None:
        return (self.change, self.displaced)[index]


def propose(
    control: ChangeControl,
    skill: str,
    source: str,
    files: Mapping[str, bytes] | None,
    measurements: Mapping[str, Any],
    note: str | None = None,
    cost: Mapping[str, Any] | None = None,
    measured_against: str | None = None,
    provenance: Mapping[str, Any] | None = None,
    new: bool | None = None,
    seen: tuple[str, ...] = (),
    own_slot_only: bool = False,
    owner: str | None = None,
    origin: str | None = None,
    origin_tree: str | None = None,
) -> Proposed:
    """Quarantine a candidate (`files` None: the skill's removal) with its evidence; returns it
    and where a displaced one went. Its kind is what the files change against the live skill.

    `new` states the proposer's intent (True: a new skill, False: a change to a live one; None:
    either) and is refused if the library says otherwise by the time the lock is held.
    `measured_against` is the champion revision the measurements were taken on: if the live
    skill has changed since, the evidence describes something else and is refused. `seen`: the
    routing cases the author was shown (routing evidence leaves them out as leakage).
    `own_slot_only` (create_skill): a change waiting in the slot is displaced only by its own
    `owner` (the MCP session the server assigned its proposer, never a name the client
    declared); any other is refused as a conflict, and so is every proposal without an owner.
    `origin` (and `origin_tree`, a git tree): where the candidate was read, recorded in its line;
    a revision its origin's newest line holds is `AlreadyProposed` and writes nothing.

    The record and its `propose` line are one recoverable step (pending.py: stage, audit,
    place); a write that fails leaves nothing queued and says so in one line."""
    doing, left = (
        f"could not queue the change for {skill!r}",
        "nothing was queued and what is served is unchanged",
    )
    with write_or_fail(doing, left), control.writing():
        champion = control.live_revision(skill)
        if measured_against is not None and champion != measured_against:
            raise SkillChanged(
                f"{skill!r} changed on disk during the run (measured {measured_against[:12]}, now "
                f"{(champion or 'gone')[:12]}); re-run it against the current revision"
            )
        if new is True and champion is not None:
            raise IngotError(f"skill {skill!r} already exists; propose a change to it instead")
        if (new is False or files is None) and champion is None:
            raise IngotError(f"skill {skill!r} is not live; propose it as a new skill instead")
        if files is not None and tree_revision(files) == champion:
            raise IngotError(
                f"the candidate is {skill!r} exactly as it is live ({champion[:12]}): nothing to review"
            )
        candidate = ABSENT if files is None else tree_revision(files)
        if origin is not None:
            _once(control, skill, origin, candidate)
        changes = what_changes(control.champion_files(skill), files, skill)
        bundle = evidence_mod.write_bundle(
            control.runs_dir,
            skill,
            changes.kind,
            champion,
            candidate,
            measurements,
            control.thresholds,
            cost,
            source,
            changes=changes.as_json(),
            provenance=provenance,
        )
        change = new_change(
            skill,
            changes.kind,
            source,
            champion,
            files or {},
            str(bundle.path.relative_to(control.runs_dir)),
            bundle.digest,
            note,
            seen=seen,
            owner=owner,
        )
        withheld = _withheld(control, skill, bundle)
        if own_slot_only and not withheld:  # it would take the slot: only from its own proposer
            _refuse_others(control, skill, owner)
        archive = (
            control.queue.withheld_path(change)
            if withheld
            else control.queue.displaced_path(skill, change.id)
        )
        control.queue.stage(change)
        # A failed append may still have left its line (a failed fsync or head move after the
        # write): the staged record stays, and recovery, before the next write, places it if the
        # chain holds its line and drops it if not.
        control.audit.append(
            action="propose",
            skill=skill,
            from_revision=champion,
            to_revision=change.candidate_revision,
            evidence_digest=bundle.digest,
            actor=source,
            change_id=change.id,
            archive=str(archive.relative_to(control.runs_dir)) if archive else None,
            reason=f"withheld: {withheld[0]}" if withheld else None,
            origin=origin,
            origin_tree=origin_tree,
        )
        try:
            control.queue.place(change, archive, withheld[0] if withheld else None)
        except OSError as exc:
            raise WriteFailed(
                f"{change.id} for {skill!r} is in the audit chain, but its record could not be put in "
                f"place: {os_reason(exc)}; the next change-control command finishes it (nothing is "
                "served from the queue either way)"
            ) from exc
        if withheld:
            return Proposed(change, None, withheld[0], withheld[1].id, archive)
        if control.prepare is not None and files is not None:
            try:
                control.prepare(skill, files)
            except Exception as exc:  # an optimisation only: never block a proposal on it
                log.warning("could not pre-embed the candidate for %s: %s", skill, exc)
        return Proposed(change, archive)


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
    chain that approval then checks instead of the `propose` line (pending.py: stage, audit,
    place, one recoverable step)."""
    doing, left = (
        f"could not record the new evidence of {change_id}",
        "it still rests on its earlier evidence",
    )
    with write_or_fail(doing, left), control.writing():
        change = control.pending_change(skill, change_id)
        live = control.live_revision(skill)
        if live != change.champion_revision or (measured_against is not None and live != measured_against):
            made_against = (change.champion_revision or "nothing")[:12]
            raise SkillChanged(
                f"{skill!r} is live at {(live or 'nothing')[:12]}, not the {made_against} this change "
                "was made against; re-propose it against the current revision"
            )
        changes = what_changes(control.champion_files(skill), None if change.removal else change.files, skill)
        bundle = evidence_mod.write_bundle(
            control.runs_dir,
            skill,
            changes.kind,
            change.champion_revision,
            change.candidate_revision,
            measurements,
            control.thresholds,
            cost,
            change.source,
            changes=changes.as_json(),
            provenance=provenance,
        )
        updated = change.with_evidence(str(bundle.path.relative_to(control.runs_dir)), bundle.digest)
        control.queue.stage(updated)
        # A failed append may still have left its line (a failed fsync or head move after the
        # write): the staged record stays, and recovery, before the next write, places it if the
        # chain holds its line and drops it if not.
        control.audit.append(
            action="evidence",
            skill=skill,
            from_revision=change.champion_revision,
            to_revision=change.candidate_revision,
            evidence_digest=bundle.digest,
            actor=actor,
            change_id=change.id,
        )
        try:
            control.queue.place(updated)
        except OSError as exc:
            raise WriteFailed(
                f"the new evidence of {change.id} is in the audit chain, but the record could not be "
                f"updated: {os_reason(exc)}; the next change-control command finishes it"
            ) from exc
        return updated, bundle


def proposed_from(entries: Iterable[AuditEntry]) -> dict[str, list[AuditEntry]]:
    """Each origin's standing `propose` lines, oldest first: what the inbox has proposed, by the
    chain. A change withdrawn since (its candidate was deleted) no longer stands: the same bytes
    written again are proposed again."""
    entries = list(entries)
    withdrawn = {e.get("change_id") for e in entries if e.get("action") == "withdraw"}
    found: dict[str, list[AuditEntry]] = {}
    for entry in entries:
        origin, standing = entry.get("origin"), entry.get("change_id") not in withdrawn
        if entry.get("action") == "propose" and isinstance(origin, str) and standing:
            found.setdefault(origin, []).append(entry)
    return found


def _once(control: ChangeControl, skill: str, origin: str, candidate: str) -> None:
    """`AlreadyProposed` when the newest `propose` line from `origin` holds `candidate` (the lock
    is held and recovery ran, so the chain is settled; a line a killed writer left counts)."""
    lines = proposed_from(control.audit.entries()).get(origin)
    if lines and lines[-1].get("to_revision") == candidate:
        line = lines[-1]
        raise AlreadyProposed(
            f"{skill!r} at {candidate[:12]} from {origin} was proposed already as "
            f"{line.get('change_id')} (audit line {line.seq}); nothing was queued again"
        )


def _withheld(
    control: ChangeControl, skill: str, bundle: evidence_mod.Evidence
) -> tuple[str, PendingChange] | None:
    """Why a new candidate must not take the slot, and the change that keeps it: the waiting
    change's passport is better (ready over needs-acknowledgement over blocked). Nothing ready
    is ever displaced by something that is not."""
    try:
        waiting = control.queue.get(skill)
    except IngotError:
        return None  # an unreadable record is displaced into the archive, as before
    if waiting is None:
        return None
    live = control.live_revision(skill)
    new = passport(bundle.data, live, control.thresholds)
    try:
        data = evidence_mod.load(control.runs_dir / (waiting.evidence_path or "")).data
    except evidence_mod.EvidenceError:
        return None
    old = passport(data, live, control.thresholds)
    if STATES.index(new.state) <= STATES.index(old.state):
        return None
    return (
        f"{waiting.id} is {old.state} and waits for review; this candidate is {new.summary}, so it "
        "was archived instead of taking its slot",
        waiting,
    )


def _refuse_others(control: ChangeControl, skill: str, owner: str | None) -> None:
    """A change waiting for `skill` keeps its slot unless this proposal comes from the session
    that queued it: one client's `create_skill` must not push another's change out of review,
    whatever name either declared. A proposal with no session (`owner` None) displaces nothing."""
    try:
        waiting = control.queue.get(skill)
    except IngotError:
        waiting = None  # an unreadable record: nobody's change to protect
    if waiting is None or (owner is not None and waiting.owner == owner):
        return
    whose = (
        "from another MCP session"
        if waiting.source == "agent"
        else f"from another proposer ({waiting.source})"
    )
    how = (
        ""
        if owner is not None
        else " (this proposal has no MCP session or replace token, so it can replace no waiting change)"
    )
    raise SlotTaken(
        f"a change for {skill!r} {whose} already waits for review ({waiting.id}){how}; pick another "
        "name, or ask the operator to decide that one first"
    )
