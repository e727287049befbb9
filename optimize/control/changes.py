"""Change control: propose, approve, reject, roll back, and report history, drift and status.

The one API the CLI and the UI call. Every state change takes the cross-process lock, first
settles anything a killed operation left (promote.recover), then re-verifies from disk rather
than trusting any record: approval checks that the pending record exists, that evidence.json
still has the digest the record holds, that the live revision is the evidence's champion, that
the candidate's files hash to the evidence's candidate revision, and that the passport,
recomputed under the current thresholds, is ready, or is approved with a reason naming what is
missing (and an override for an overridable failure). Each refusal says exactly which check failed, is
audited, and changes nothing. A candidate's way in (propose, attach_evidence) is proposals.py; the
re-verification itself is verify.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ingot.errors import IngotError, NotFound, WriteFailed, os_reason
from ingot.fsutil import remove_stale_temps
from mcp_server.registry import Limits
from optimize.control import evidence as evidence_mod
from optimize.control import proposals
from optimize.control.approved import ApprovedRevisions
from optimize.control.audit import AuditEntry, AuditError, AuditLog
from optimize.control.autonomy import CLASSES, Autonomy
from optimize.control.decisions import DECIDED, fates
from optimize.control.gate import Thresholds
from optimize.control.gitrepo import GitHistory
from optimize.control.kinds import AUTONOMY_CLASSES
from optimize.control.lock import PromotionConflict, change_lock
from optimize.control.names import known_changes, known_skills, pins, require_skill, unknown_change
from optimize.control.passport import Passport, passport
from optimize.control.pending import PendingChange, PendingQueue
from optimize.control.promote import ABSENT, Outcome, Promoter, check_skill_name
from optimize.control.status import Status, report
from optimize.control.verify import ApprovalRefused, Neighbours, Verifier, accepted

log = logging.getLogger(__name__)


@dataclass
class ChangeControl:
    """Change control over `roots` (the first receives new skills), with state in `runs_dir`."""

    runs_dir: Path
    roots: tuple[Path, ...]
    thresholds: Thresholds = Thresholds()
    limits: Limits = Limits()
    lock_wait_s: float = 30.0
    # Called with a candidate's files when it is queued, e.g. to embed its texts ahead of time
    # so that approving it re-indexes from the vector cache instead of running the model.
    prepare: Callable[[str, Mapping[str, bytes]], None] | None = None
    # Returns the served library as it is now (reloaded), for re-checking collisions at approval.
    # Without it, approving anything that sets a description is refused: the check is not optional.
    neighbours: Callable[[], Neighbours] | None = None
    autonomy_streak: int = 3  # clean changes in a row that lift a class one level (AUTONOMY_STREAK)
    review_window_s: float = 86400.0  # how long a supervised change waits for a rejection (REVIEW_WINDOW)
    git: GitHistory = GitHistory(enabled=False)  # commit each switch in a git skills root (GIT_HISTORY)
    live_edits: str = "serve"  # or "quarantine": edits to live folders are queued and restored

    def __post_init__(self) -> None:
        self.queue = PendingQueue(self.runs_dir)
        self.audit = AuditLog(self.runs_dir)
        self.promoter = Promoter(self.runs_dir, self.limits, git=self.git)
        self.approvals = ApprovedRevisions(self.audit)
        self.autonomy = Autonomy(self.runs_dir, self.audit, self.autonomy_streak)
        self.verifier = Verifier(
            self.runs_dir,
            self.roots,
            self.thresholds,
            self.audit,
            self.promoter,
            self.live_revision,
            self.root_of,
            self.neighbours,
        )

    # -- reading --------------------------------------------------------------------------

    def root_of(self, skill: str) -> Path | None:
        for root in self.roots:
            if (root / check_skill_name(skill)).exists():
                return root
        return None

    def live_revision(self, skill: str) -> str | None:
        root = self.root_of(skill)
        return self.promoter.live_revision(root, skill) if root else None

    def pending(self) -> list[PendingChange]:
        return self.queue.all()

    def history(self, skill: str) -> list[AuditEntry]:
        """`skill`'s audit lines; `SkillNotFound` (with the nearest names) if no root, pending
        change, audit line or snapshot knows it."""
        self.require_skill(skill)
        return [e for e in self.audit.entries() if e.get("skill") == skill]

    def snapshots(self, skill: str) -> list[str]:
        """The stored revisions of `skill` (every one Ingot put live or replaced, the live one
        included), then `ABSENT` if Ingot created it (rolling back to it removes the skill)."""
        folder = self.promoter.revisions / check_skill_name(skill)
        names = [p.name for p in folder.iterdir() if p.is_dir()] if folder.is_dir() else []
        absent = [ABSENT] if self.promoter.absent_recorded(skill) else []
        return sorted(n for n in names if not n.startswith(".")) + absent

    def require_skill(self, skill: str) -> str:
        """`skill` if change control knows it, else `SkillNotFound` naming the nearest known ones."""
        known = known_skills(self.roots, self.queue, self.audit, self.promoter.revisions)
        return require_skill(skill, known)

    def pending_change(self, skill: str, change_id: str) -> PendingChange:
        """The pending change `change_id` of `skill`, read without the lock (for `ingot evaluate`,
        which measures before it takes the lock to attach). Same errors as approving it."""
        return self._reviewed(skill, change_id)

    def status(self) -> Status:
        """What is served, what Ingot last put live, what waits, and the audit chain's state."""
        return report(
            self.roots,
            self.limits,
            self.audit,
            self.queue,
            self.root_of,
            self.live_edits,
            self.git.enabled,
            self.git.push_remote,
        )

    def passport(self, change: PendingChange) -> Passport | None:
        """`change`'s passport on its current evidence under today's thresholds, judged against
        what is live now (None: no readable bundle). Read-only."""
        if not change.evidence_path:
            return None
        try:
            data = evidence_mod.load(self.runs_dir / change.evidence_path).data
        except evidence_mod.EvidenceError:
            return None
        return passport(data, self.live_revision(change.skill), self.thresholds, change.id)

    def refusal(self, change: PendingChange) -> str | None:
        """Why approving `change` would be refused right now, or None if it would go ahead.

        The same re-verification `approve` runs, without the lock and without writing anything:
        for showing a reviewer that a change is blocked or stale before they press a button. A
        change that needs acknowledgement (or an override) is not refused here: the
        confirmation asks for the reason `approve` then requires."""
        try:
            self.verifier.verify(change)
        except (ApprovalRefused, IngotError) as exc:
            return str(exc)
        return None

    # -- writing --------------------------------------------------------------------------

    def recover(self) -> list[str]:
        """Settle anything a killed promotion or rollback left (run at start-up and before writes)."""
        with change_lock(self.runs_dir, self.lock_wait_s):
            return self._recover()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """The change lock, with whatever a killed operation left settled first. Every write that
        lives outside this class (the guard's restores, incident reports) runs inside it."""
        with change_lock(self.runs_dir, self.lock_wait_s):
            self._recover()
            yield

    def _recover(self) -> list[str]:
        """`_settle`, with a failed write (a full disk) as one line that says nothing moved."""
        try:
            return self._settle()
        except OSError as exc:
            raise WriteFailed(
                f"recovery could not finish: {os_reason(exc)}; what is served is unchanged and the "
                "next command retries it. Free disk space or fix permissions"
            ) from exc

    def _settle(self) -> list[str]:
        """Promotions first, then the queue: a pending change the audit log says was already
        promoted or rejected (killed before it was archived) is archived now. Nothing is settled
        from a chain that does not verify: a forged outcome line must not archive anything."""
        self._remove_leftovers()
        notes = self.promoter.recover(self.roots)
        state = self.audit.verify()
        if not state.ok:
            raise AuditError(
                f"the audit chain is broken at line {state.bad_line}: {state.problem}. Nothing will "
                "be changed until it is investigated (`ingot audit verify`)"
            )
        entries = self.audit.entries()
        notes += self._settle_staged(entries)
        settled = {cid: fate for cid, fate in fates(entries).items() if fate.status in DECIDED}
        readable, _ = self.queue.scan()  # a damaged record blocks only its own skill, never recovery
        for change in readable:
            if change.id in settled:
                fate = settled[change.id]
                reason = (
                    f"promoted (recovered; audit line {fate.seq})"
                    if fate.status == "approved"
                    else fate.reason or fate.status
                )
                self.queue.archive(change.skill, reason, fate.status, "ingot-recovery")
                notes.append(f"{change.skill}: pending {change.id} archived as {fate.status}")
        return notes

    def _remove_leftovers(self) -> list[str]:
        """Delete what a killed write left half-done (write_atomic's temp files beside the chain,
        the queue's records, the inbox's seen-list and the claims' anchors; an evidence bundle's
        unfinished folder), and say so in one log line. Nothing else writes those without the
        lock this runs under, so no write in progress is touched. Returns what it removed."""
        removed = [*remove_stale_temps(self.runs_dir)]
        removed += [f"pending/{name}" for name in self.queue.remove_leftovers()]
        removed += evidence_mod.remove_unfinished(self.runs_dir)
        for claim in self.audit.anchors.claims():
            removed += [str(claim.parent / name) for name in remove_stale_temps(claim.parent, of=claim.name)]
        if removed:
            log.warning(
                "recovery removed what a killed write left in %s: %s", self.runs_dir, ", ".join(removed)
            )
        return removed

    def _settle_staged(self, entries: list[AuditEntry]) -> list[str]:
        """Finish what a killed propose or re-evaluation left staged (pending.py): a record whose
        `propose` / `evidence` line is in the chain takes its place; one whose line is not was
        never queued, and is dropped."""
        lines = {
            (e.get("change_id"), e.get("evidence_digest")): e
            for e in entries
            if e.get("action") in ("propose", "evidence")
        }
        notes = []
        for path, change in self.queue.staged():
            line = lines.get((change.id, change.evidence_digest)) if change is not None else None
            if change is None or line is None:
                self.queue.discard(path)
                notes.append(
                    f"{change.skill if change else path.name}: a change killed before its audit "
                    "line was dropped (never queued)"
                )
                continue
            reason, recorded = str(line.get("reason") or ""), line.get("archive")
            archive = self.runs_dir / str(recorded) if recorded else None
            if archive is not None and not archive.resolve().is_relative_to(
                self.queue.archive_folder.resolve()
            ):
                archive = None  # only ever into the archive, whatever a line says
            withheld = reason.removeprefix("withheld: ") if reason.startswith("withheld: ") else None
            self.queue.place(change, archive, withheld)
            notes.append(
                f"{change.skill}: {change.id} {'archived as withheld' if withheld else 'queued'} (recovered)"
            )
        return notes

    # A candidate's way in lives in proposals.py; bound here, so callers write control.propose(...).
    propose = proposals.propose
    attach_evidence = proposals.attach_evidence

    def champion_files(self, skill: str) -> dict[str, bytes] | None:
        """The live files of `skill` (read through the safe reader), or None if it has none."""
        root = self.root_of(skill)
        return self.promoter.read_tree(root / skill, skill) if root is not None else None

    def approve(
        self,
        skill: str,
        actor: str,
        change_id: str,
        accept_missing: str | None = None,
        override_reason: str | None = None,
        accepting: Collection[str] | None = None,
        evidence_digest: str | None = None,
    ) -> Outcome:
        """Re-verify everything from disk, then promote; see the module docstring.

        `change_id` pins the change the reviewer actually looked at: if another candidate has
        displaced it since, this is a conflict, never a promotion of something unreviewed. A
        change whose passport needs acknowledgement is promoted only with `accept_missing`, the
        reason the missing cells are acceptable; an overridable failure (a replay BLOCK, no gain
        shown) only with `override_reason`.
        Both, and the cells accepted, are written into the promotion's audit lines. `accepting`
        (the cells the person saw missing) and `evidence_digest` (the bundle they saw) pin what was
        reviewed: a re-evaluation since, or a cell missing that they did not see, is a conflict."""
        check_skill_name(skill)
        with change_lock(self.runs_dir, self.lock_wait_s):
            self._recover()
            change = self._reviewed(skill, change_id)
            if evidence_digest is not None and evidence_digest != change.evidence_digest:
                raise PromotionConflict(
                    f"{change.id} was re-evaluated since you looked (its evidence is now "
                    f"{str(change.evidence_digest)[:12]}, you saw {evidence_digest[:12]}); review it again"
                )
            try:
                evidence, root, verdict = self.verifier.verify(change)
                acceptance = accepted(change, verdict, accept_missing, override_reason, accepting)
            except ApprovalRefused as exc:
                self.audit.append(
                    action="approve-refused",
                    skill=skill,
                    from_revision=change.champion_revision,
                    to_revision=change.candidate_revision,
                    actor=actor,
                    reason=str(exc),
                    change_id=change.id,
                )
                raise
            reason = f"approved {change.kind} change from {change.source}{acceptance.sentence}"
            try:
                if change.removal:
                    outcome = self.promoter.remove(
                        skill,
                        root,
                        expected_from=change.champion_revision,
                        actor=actor,
                        reason=reason,
                        evidence_digest=evidence.digest,
                        change_id=change.id,
                        extra={**acceptance.audit_fields(), "kind": change.kind},
                    )
                else:
                    outcome = self.promoter.switch(
                        skill,
                        root,
                        change.files,
                        expected_from=change.champion_revision,
                        action="promote",
                        actor=actor,
                        reason=reason,
                        evidence_digest=evidence.digest,
                        change_id=change.id,
                        extra={**acceptance.audit_fields(), "kind": change.kind},
                    )
                self.queue.archive(skill, f"approved by {actor}", "approved", actor, outcome.seq)
            except (OSError, AuditError) as exc:
                target = None if change.removal else change.candidate_revision
                raise self.fault("promote", skill, target, exc) from exc
            result = "override" if acceptance.override else ("clean" if verdict.ready else "not-green")
            why = f"{change.id} approved by {actor}" + (
                f" with override: {acceptance.override}" if acceptance.override else ""
            )
            try:
                for cls in AUTONOMY_CLASSES[change.kind if change.kind in AUTONOMY_CLASSES else "both"]:
                    self.autonomy.record(skill, cls, result, actor, why)
            except (OSError, IngotError) as exc:  # the promotion stands: say so, not "nothing changed"
                reason = os_reason(exc) if isinstance(exc, OSError) else str(exc).split("; nothing was")[0]
                now = "removed" if outcome.to_revision is None else f"served at {outcome.to_revision[:12]}"
                raise WriteFailed(
                    f"{skill!r} is now {now} (promoted, audit line {outcome.seq}), but recording it for "
                    f"autonomy failed: {reason}. Its class keeps its earlier streak; free disk space or "
                    "fix permissions"
                ) from exc
            return outcome

    def _reviewed(self, skill: str, change_id: str | None) -> PendingChange:
        """The pending change for `skill`, if it is still `change_id` (the one the reviewer saw;
        None: whichever is pending). A change that left review since (decided, displaced or
        withheld, by the chain: never by the archive's word) is one conflict, whether or not
        another change waits now; a skill or change id never known is `NotFound`, with the
        nearest names. Called under the lock, after recovery verified the chain."""
        change = self.queue.get(self.require_skill(skill))
        if change_id is None or (change is not None and change.id == change_id):
            if change is None:
                raise ApprovalRefused(f"no pending change for {skill!r}; `ingot pending` lists them")
            return change
        fate = fates(self.audit.entries(), skill).get(change_id)
        now = (
            f"the pending change for {skill!r} is now {change.id}"
            if change
            else f"{skill!r} has no pending change"
        )
        if fate is not None and fate.status in DECIDED:
            raise PromotionConflict(f"change {change_id} for {skill!r} was already {fate.said()}; {now}")
        if fate is not None:
            raise PromotionConflict(
                f"change {change_id} for {skill!r} was {fate.said()}; {now}, not {change_id}: "
                "review the new one"
            )
        known = known_changes(skill, self.queue, self.audit)
        if change_id not in known:
            raise unknown_change(skill, change_id, change.id if change else None, known)
        raise ApprovalRefused(  # queued once, yet neither pending nor settled: its record is gone
            f"change {change_id} for {skill!r} is neither pending nor decided (its record is missing); "
            f"{now}; `ingot status` shows what is wrong"
        )

    def reject(self, skill: str, reason: str, actor: str, change_id: str | None = None) -> Path:
        """Archive the pending change for `skill` with `reason`; `change_id` pins the one reviewed."""
        if not reason or not reason.strip():
            raise IngotError("a rejection needs a reason (--reason)")
        with change_lock(self.runs_dir, self.lock_wait_s):
            self._recover()
            change = self._reviewed(skill, change_id)
            return self._archive_decided(change, "reject", "rejected", actor, reason)

    def withdraw(self, skill: str, change_id: str, actor: str, reason: str) -> bool:
        """Archive `change_id` as withdrawn (its author took it back: a deleted candidate) if it
        is still the pending change of `skill`; False if it was decided or displaced already."""
        with change_lock(self.runs_dir, self.lock_wait_s):
            self._recover()
            change = self.queue.get(skill)
            if change is None or change.id != change_id:
                return False
            self._archive_decided(change, "withdraw", "withdrawn", actor, reason)
            return True

    def _archive_decided(
        self, change: PendingChange, action: str, status: str, actor: str, reason: str
    ) -> Path:
        """Audit a decision that promotes nothing (reject, withdraw), then archive the change. The
        chain line comes first: if archiving then fails, recovery archives it from that line."""
        line = self.audit.append(
            action=action,
            skill=change.skill,
            to_revision=change.candidate_revision,
            evidence_digest=change.evidence_digest,
            actor=actor,
            reason=reason,
            change_id=change.id,
        )
        try:
            return self.queue.archive(change.skill, reason, status, actor, line.seq)
        except OSError as exc:
            raise WriteFailed(
                f"the {action} of {change.id} is in the audit chain, but its pending record could not be "
                f"archived: {os_reason(exc)}; the next command archives it"
            ) from exc

    def rollback(
        self,
        skill: str,
        revision: str,
        actor: str,
        reason: str | None = None,
        expected_live: str | None = None,
    ) -> Outcome:
        """Restore the snapshot `revision` (a unique prefix will do; `absent` removes a skill
        Ingot created). With `expected_live` (a revision, a prefix of at least 8 characters, or
        `absent`), refuse (conflict) if the live revision is no longer the one the caller saw."""
        with change_lock(self.runs_dir, self.lock_wait_s):
            self._recover()
            self.require_skill(skill)
            root = self.root_of(skill) or self.roots[0]  # a removed skill: where Ingot creates skills
            snapshots = self.snapshots(skill)
            exact = [r for r in snapshots if r == revision]
            matches = exact or [r for r in snapshots if r != ABSENT and revision and r.startswith(revision)]
            if len(matches) != 1:
                listed = ", ".join(r[:12] for r in snapshots) or "none"
                raise NotFound(
                    f"{revision!r} matches {len(matches)} snapshots of {skill!r} (snapshots: {listed}); "
                    f"`ingot history {skill}` lists them"
                )
            live = self.live_revision(skill)
            if expected_live is not None and not pins(live, expected_live):
                raise PromotionConflict(
                    f"{skill!r} is now at {(live or ABSENT)[:12]}, not the {expected_live[:12]} you saw; "
                    "reload its history and decide again"
                )
            target = None if matches[0] == ABSENT else matches[0]
            try:
                outcome = self.promoter.rollback(skill, root, matches[0], actor, reason)
            except (OSError, AuditError) as exc:
                raise self.fault("roll back", skill, target, exc) from exc
            try:
                self.autonomy.incident(skill, CLASSES, f"rolled back to {matches[0][:12]} by {actor}", actor)
            except (OSError, IngotError) as exc:  # the rollback stands: say so
                reason = os_reason(exc) if isinstance(exc, OSError) else str(exc).split("; nothing was")[0]
                now = "removed" if outcome.to_revision is None else f"served at {outcome.to_revision[:12]}"
                raise WriteFailed(
                    f"{skill!r} is now {now} (rolled back, audit line {outcome.seq}), but dropping its "
                    f"autonomy to manual failed: {reason}. Free disk space or fix permissions, then run "
                    f"`ingot autonomy allow {skill} CLASS manual`"
                ) from exc
            return outcome

    def fault(self, what: str, skill: str, target: str | None, exc: Exception) -> WriteFailed:
        """One line saying what a failed write left: the disk decides, not the code path.
        `target` None: the write was removing the skill."""
        if isinstance(exc, OSError):
            reason = os_reason(exc)
        elif isinstance(exc, AuditError) and isinstance(exc.__cause__, OSError):  # its advice comes below
            reason = f"cannot write the audit log: {os_reason(exc.__cause__)}"
        else:
            reason = str(exc)
        try:
            live = self.live_revision(skill)
        except IngotError:
            live = None
        if live == target:
            now = "removed" if target is None else f"served at {target[:12]}"
            return WriteFailed(
                f"{skill!r} is now {now}, but finishing the record failed: {reason}. "
                "The next change-control command completes it (`ingot status` shows recovery pending)"
            )
        served, aside = live, ""
        if self.live_edits == "quarantine" and self.approvals.protected():
            approved = self.approvals.current().get(skill, "unapproved")
            served = approved if approved != "unapproved" else None
            if served != live:  # the folder holds what the guard found: MCP serves the approval
                aside = f" (its folder holds {(live or 'nothing')[:12]}, which is not served)"
        return WriteFailed(
            f"could not {what} {skill!r}: {reason}. Nothing was changed: {(served or 'nothing')[:12]} is "
            f"still served{aside}. Free disk space or fix permissions, then retry"
        )
