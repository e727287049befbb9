"""Blessing, reviewing and retiring goldens: the audited side of optimize/measure/golden_store.py.

A golden decides whether future changes can be approved, so every change to the set is
recorded in the audit chain under the change-control lock: `golden-bless` (from which trace),
`golden-approve` (a person approved or edited its criteria and world facts) and
`golden-retire` (with the reason). A write that cannot be audited is undone: unaudited means
not done. Blessing needs the exact files of the revision that served the run: the live skill if
it is still at that revision, else its snapshot (trusted only if it hashes to the revision).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ingot.errors import IngotError
from optimize.control.changes import ChangeControl
from optimize.control.lock import change_lock
from optimize.control.promote import tree_revision
from optimize.measure.golden_criteria import approved
from optimize.measure.golden_store import GoldenStore
from optimize.measure.goldens import Golden, GoldenError, Review, Stored, golden_from_trace
from optimize.models.traces import TraceRecord

Drafter = Callable[[Golden], Review]


class GoldenAdmin:
    """Bless, approve and retire goldens in `control`'s state home."""

    def __init__(self, control: ChangeControl) -> None:
        self.control = control
        self.store = GoldenStore(control.runs_dir / "goldens")

    def revision_files(self, skill: str, revision: str) -> dict[str, bytes]:
        """The files of `skill` at `revision`: live, or a verified snapshot; `GoldenError` if neither."""
        root = self.control.root_of(skill)
        if root is not None and self.control.live_revision(skill) == revision:
            return dict(self.control.promoter.read_tree(root / skill, skill))
        folder = self.control.promoter.revisions / skill / revision
        if folder.is_dir():
            files = dict(self.control.promoter.read_tree(folder, skill))
            if tree_revision(files) == revision:
                return files
        raise GoldenError(
            f"the run was served by {skill}@{revision[:12]}, which is neither live nor snapshotted, so "
            "its bytes cannot be put back for replays; bless a run of the live revision"
        )

    def bless(
        self,
        record: TraceRecord,
        actor: str,
        drafter: Drafter | None = None,
        undrafted: str = "no teacher drafted it (TEACHER_MODEL is unset, or its client could not start)",
    ) -> tuple[Stored, bool]:
        """The golden made from `record`, stored and audited; (stored, False) if already blessed.

        `drafter` (the teacher) writes its criteria and world facts for review; without one the
        golden waits for a person to write them (`ingot goldens approve`), and its note says why
        there is no draft (`undrafted`: the caller knows the setting, so the note is true)."""
        golden = golden_from_trace(record)
        files = self.revision_files(golden.skill, golden.revision)
        review = (
            drafter(golden)
            if drafter is not None
            else Review(notes=(f"not drafted: {undrafted}; write the criteria",))
        )
        with change_lock(self.control.runs_dir, self.control.lock_wait_s):
            stored, created = self.store.add(golden, files, review)
            if created:
                try:
                    self.control.audit.append(
                        action="golden-bless",
                        skill=golden.skill,
                        actor=actor,
                        golden=golden.digest,
                        reason=f"from trace {record.id}",
                    )
                except IngotError:
                    stored.path.unlink(missing_ok=True)
                    stored.path.with_suffix(".review.json").unlink(missing_ok=True)
                    raise
        return stored, created

    def approve(
        self, golden_id: str, actor: str, criteria: Sequence[str], facts: Sequence[Mapping[str, Any]]
    ) -> Stored:
        """Record a person's criteria and world facts (edited or as drafted) as human-approved."""
        with change_lock(self.control.runs_dir, self.control.lock_wait_s):
            stored = self.store.find(golden_id)
            review = approved(stored.golden, criteria, facts, actor)
            review = replace(review, drafted_by=stored.review.drafted_by, state=stored.review.state)
            return self._audited(stored, review, "golden-approve", actor, "criteria and world facts approved")

    def retire(self, golden_id: str, actor: str, reason: str) -> Stored:
        """Stop replaying a golden (it stays on disk, and in the chain, with the reason)."""
        if not reason or not reason.strip():
            raise IngotError("retiring a golden needs a reason (--reason)")
        with change_lock(self.control.runs_dir, self.control.lock_wait_s):
            stored = self.store.find(golden_id)
            if stored.review.state == "retired":
                raise IngotError(f"golden {stored.id} was already retired by {stored.review.retired_by}")
            now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            review = replace(
                stored.review,
                state="retired",
                retired_by=actor,
                retired_at=now,
                retired_reason=reason.strip(),
            )
            return self._audited(stored, review, "golden-retire", actor, reason.strip()[:2000])

    def _audited(self, stored: Stored, review: Review, action: str, actor: str, reason: str) -> Stored:
        before = stored.review
        saved = self.store.save_review(stored, review)
        try:
            self.control.audit.append(
                action=action,
                skill=stored.golden.skill,
                actor=actor,
                golden=stored.golden.digest,
                reason=reason,
            )
        except IngotError:
            self.store.save_review(saved, before)
            raise
        return saved
