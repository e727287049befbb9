"""Promote a verified candidate into a skills root, or roll one back.

The only code that writes a skills root. The caller holds the change-control lock (lock.py)
and has already decided the change may happen (passport.py, changes.py); this module makes it
happen crash-safely:

1. snapshot the live tree to `runs/revisions/<skill>/<revision>/` (written, fsynced, verified);
2. stage the candidate beside the live folder as `<root>/.ingot-stage-<skill>-<nonce>/`
   (dot-prefixed, so never served), fsynced and verified against the candidate revision;
3. append the intent to the audit chain (fsynced): no record, no change;
4. switch with ONE atomic `renameat2(RENAME_EXCHANGE)` of the staged and live folders (a new
   skill uses `RENAME_NOREPLACE`), then fsync the root;
5. delete the displaced tree and append the outcome.

A new skill has no tree to snapshot, so step 1 records an "absent" snapshot instead (a marker,
`revisions/<skill>/absent`); rolling back to it removes the skill (`_remove`): snapshot the live
tree, audit the intent, rename the live folder into a dot-prefixed trash folder in the same root
(one atomic rename: the skill is served whole or not at all), delete it, audit the outcome.

Guarantee: at every instant each skill is served at exactly one complete revision, old or new
(or, for a removal, its complete old revision or nothing), whatever is killed when. A kill
leaves at most a stage folder and an intent without outcome; `recover()` (run before every
write) settles both from what is actually live.
Every tree written is laid out as layout.py says (each file's mode from its bytes), and a
restore that only fixes the layout is settled by the layout, not the revision alone.
Filesystems without an atomic exchange are refused rather than served a gap (folders.py).
The snapshot store is snapshots.py; the git commit of each switch is commits.py.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ingot import faults
from ingot.errors import PromotionError, SkillInvalid
from ingot.fsutil import check_relative, fsync_dir, hidden_entries, remove_stale_temps
from mcp_server.registry import Limits, read_skill
from optimize.control.audit import AuditEntry, AuditError, AuditLog
from optimize.control.gitrepo import GitHistory
from optimize.control.promote import layout
from optimize.control.promote.commits import GitCommits
from optimize.control.promote.folders import RENAME_EXCHANGE, RENAME_NOREPLACE, StepHook, rename2, write_tree
from optimize.control.promote.snapshots import ABSENT, Snapshots, check_skill_name, tree_revision

STAGE_PREFIX = ".ingot-stage-"


@dataclass(frozen=True)
class Outcome:
    """What a promotion or rollback did."""

    skill: str
    from_revision: str | None
    to_revision: str | None  # None: the skill was removed (rolled back to "absent")
    root: Path
    intent_seq: int
    seq: int  # the outcome line's sequence number: this decision's unique, increasing id


_SWITCH_STEPS = ("switch: rename", "switch: fsync root")  # the crash tests' names for the steps
_REMOVE_STEPS = ("remove: rename into trash", "remove: fsync root")


def _record(
    skill: str,
    root: Path,
    from_revision: str | None,
    to_revision: str | None,
    actor: str,
    reason: str | None,
    evidence_digest: str | None,
    change_id: str | None,
    extra: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The fields an intent and its outcome line share (`extra`: what an approval accepted)."""
    return {
        **(extra or {}),
        "skill": skill,
        "root": str(root),
        "from_revision": from_revision,
        "to_revision": to_revision,
        "evidence_digest": evidence_digest,
        "actor": actor,
        "reason": reason,
        "change_id": change_id,
    }


class Promoter:
    """Writes skills roots and `runs/revisions`; call only while holding the change lock."""

    def __init__(
        self,
        runs_dir: Path,
        limits: Limits | None = None,
        on_step: StepHook | None = None,
        git: GitHistory | None = None,
    ) -> None:
        self.runs_dir = runs_dir
        self.revisions = runs_dir / "revisions"
        self._on_step = on_step or faults.point
        self.audit = AuditLog(runs_dir, self._on_step)
        self.limits = limits or Limits()
        self.git = git or GitHistory(enabled=False)
        self.snapshots = Snapshots(self.revisions, self.limits, self.audit, self._on_step)
        self.commits = GitCommits(self.git, self._on_step, runs_dir)

    def _step(self, name: str) -> None:
        self._on_step(name)

    # -- reading ---------------------------------------------------------------------------

    def live_revision(self, root: Path, skill: str) -> str | None:
        folder = root / check_skill_name(skill)
        if not folder.exists():
            return None
        return read_skill(root, folder, self.limits).revision

    def read_tree(self, folder: Path, skill: str) -> dict[str, bytes]:
        """The files of a valid skill folder (live, staged or snapshotted) by relative path."""
        return self.snapshots.read_tree(folder, skill)

    def snapshot_path(self, skill: str, revision: str) -> Path:
        return self.snapshots.path(skill, revision)

    def snapshot_live(self, skill: str, root: Path, revision: str) -> None:
        """Snapshot the live tree of `skill`, which must be at `revision` (kept if one exists)."""
        self.snapshots.snapshot_live(skill, root, revision)

    def absent_recorded(self, skill: str) -> bool:
        """Whether `skill` may be rolled back to absent (see `Snapshots.absent_recorded`)."""
        return self.snapshots.absent_recorded(skill)

    # -- writing ---------------------------------------------------------------------------

    def switch(
        self,
        skill: str,
        root: Path,
        files: Mapping[str, bytes],
        *,
        expected_from: str | None,
        action: str,
        actor: str,
        reason: str | None = None,
        evidence_digest: str | None = None,
        change_id: str | None = None,
        extra: Mapping[str, object] | None = None,
    ) -> Outcome:
        """Make `files` the live tree of `skill` in `root`, atomically; see the module docstring.
        `extra`: further fields for both audit lines (what an approval accepted)."""
        check_skill_name(skill)
        for rel in files:
            check_relative(rel)
        if "SKILL.md" not in files:
            raise PromotionError("a candidate must contain SKILL.md")
        self.recover((root,))
        to_revision = tree_revision(files)
        from_revision = self.live_revision(root, skill)
        if from_revision != expected_from:
            raise PromotionError(
                f"skill {skill!r} is live at {(from_revision or 'nothing')[:12]} but the change was "
                f"made against {(expected_from or 'nothing')[:12]}; nothing was changed"
            )
        if from_revision == to_revision:
            raise PromotionError(f"skill {skill!r} is already live at {to_revision[:12]}")
        if from_revision is not None:
            self.snapshot_live(skill, root, from_revision)
        else:
            self.snapshots.record_absent(skill, root)
        # The new revision is snapshotted too: with LIVE_EDITS=quarantine the served library and
        # the guard restore it from here if its folder is edited behind Ingot's back.
        self.snapshots.store(skill, to_revision, files)
        stage = self._stage(root, skill, files, expect=to_revision)
        record = _record(
            skill, root, from_revision, to_revision, actor, reason, evidence_digest, change_id, extra
        )
        return self._exchange(action, record, root / skill, stage, replace=from_revision is not None)

    def rollback(self, skill: str, root: Path, revision: str, actor: str, reason: str | None) -> Outcome:
        """Restore a snapshot (itself snapshotting what it displaces) after checking its hash;
        `ABSENT` removes a skill Ingot created."""
        if revision == ABSENT:
            return self._remove(skill, root, actor=actor, reason=reason)
        files = self.snapshots.verified(skill, revision)
        return self.switch(
            skill,
            root,
            files,
            expected_from=self.live_revision(root, skill),
            action="rollback",
            actor=actor,
            reason=reason,
        )

    def restore(
        self,
        skill: str,
        root: Path,
        revision: str | None,
        *,
        actor: str,
        reason: str,
        change_id: str | None = None,
    ) -> Outcome:
        """Put `skill`'s folder back to its approved `revision` (None: approved absent, so the
        folder goes) whatever is there now: an out-of-band edit, a broken folder, hidden files a
        served revision leaves out, the right bytes laid out otherwise (modes, empty folders,
        links; layout.py), nothing. It is already there only if bytes and layout both match.

        The guard's tool for LIVE_EDITS=quarantine; the caller has already kept what it finds
        (as a pending change, or a copy). Same sequence as `switch`: snapshot what is displaced
        when it is a valid skill, stage the approved tree, audit the intent, one atomic exchange
        (or rename), audit the outcome. A kill at any step leaves one whole tree in the folder,
        and the served library serves the approved snapshot until the folder holds it again."""
        check_skill_name(skill)
        self.recover((root,))
        live = root / skill
        try:
            from_revision = self.live_revision(root, skill)
            found = "missing" if from_revision is None else "edited"
        except SkillInvalid as exc:
            from_revision, found = None, f"invalid ({exc})"
        if from_revision is not None and from_revision == revision:  # its bytes: is the rest?
            besides = layout.differences(live, layout.modes(self.read_tree(live, skill)))
            if not besides:
                raise PromotionError(
                    f"skill {skill!r} is already at its approved revision; nothing was changed"
                )
            found = f"the approved files laid out otherwise: {'; '.join(besides)}"
        elif hidden := hidden_entries(live) if live.is_dir() else []:
            found += f", with hidden files {', '.join(hidden)}"
        elif revision is None and not live.exists():
            raise PromotionError(f"skill {skill!r} is already at its approved revision; nothing was changed")
        if from_revision is not None:
            self.snapshot_live(skill, root, from_revision)
        stage = None
        if revision is not None:
            stage = self._stage(root, skill, self.snapshots.verified(skill, revision))
        record = _record(
            skill, root, from_revision, revision, actor, f"{reason} (found {found})", None, change_id
        )
        return self._exchange("restore", record, live, stage)

    def _remove(self, skill: str, root: Path, *, actor: str, reason: str | None) -> Outcome:
        """Roll `skill` back to absent, which only a skill Ingot created has (its absent snapshot)."""
        check_skill_name(skill)
        if not self.absent_recorded(skill):
            raise PromotionError(
                f"no absent snapshot of {skill!r}: Ingot did not create it, so it will not remove it; "
                f"`ingot history {skill}` lists the revisions that can be restored"
            )
        return self.remove(
            skill,
            root,
            expected_from=self.live_revision(root, skill),
            action="rollback",
            actor=actor,
            reason=reason,
        )

    def remove(
        self,
        skill: str,
        root: Path,
        *,
        expected_from: str | None,
        actor: str,
        reason: str | None,
        action: str = "promote",
        evidence_digest: str | None = None,
        change_id: str | None = None,
        extra: Mapping[str, object] | None = None,
    ) -> Outcome:
        """Stop serving `skill` (an approved removal, or a rollback to absent): snapshot it (so
        this, too, can be undone), audit the intent, then one atomic rename of the live folder
        into a dot-prefixed trash folder in the same root. A kill leaves the skill whole or gone,
        plus at most a trash folder and an intent without outcome, which `recover` settles like a
        stage folder (it has the stage prefix)."""
        check_skill_name(skill)
        self.recover((root,))
        from_revision = self.live_revision(root, skill)
        if from_revision is None:
            raise PromotionError(f"skill {skill!r} is already absent from {root}; nothing was changed")
        if from_revision != expected_from:
            raise PromotionError(
                f"skill {skill!r} is live at {from_revision[:12]} but the removal was made against "
                f"{(expected_from or 'nothing')[:12]}; nothing was changed"
            )
        self.snapshot_live(skill, root, from_revision)
        record = _record(skill, root, from_revision, None, actor, reason, evidence_digest, change_id, extra)
        return self._exchange(action, record, root / skill, None, steps=_REMOVE_STEPS)

    # -- the shared sequence: stage, then intent, one rename, outcome ------------------------

    def _stage(self, root: Path, skill: str, files: Mapping[str, bytes], expect: str | None = None) -> Path:
        """Step 2: write `files` to a new, never-served stage folder beside the live one (checked
        against `expect`, the candidate revision, when given, and against their layout, layout.py);
        nothing is left behind on failure."""
        stage = root / f"{STAGE_PREFIX}{skill}-{secrets.token_hex(4)}"
        try:
            write_tree(stage, files, "stage", self._step)
            if expect is not None and read_skill(root, stage, self.limits, name=skill).revision != expect:
                raise PromotionError("the staged files do not hash to the candidate revision")
            if besides := layout.differences(stage, layout.modes(files)):
                raise PromotionError(
                    f"the staged folder is not laid out as written ({'; '.join(besides)}); nothing "
                    f"was changed (does the filesystem under {root} keep file modes?)"
                )
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        return stage

    def _exchange(
        self,
        action: str,
        record: dict[str, object],
        live: Path,
        stage: Path | None,
        *,
        replace: bool | None = None,
        steps: tuple[str, str] = _SWITCH_STEPS,
    ) -> Outcome:
        """Steps 3 to 5 for every writer: audit the intent, then ONE atomic rename, of `stage`
        onto `live` (an exchange if `replace`; None: if a folder is there at that moment) or, with
        no stage, of `live` out into a trash folder (a removal); fsync the root, delete what was
        displaced, audit the outcome, commit it to git. A failed intent leaves no stage behind."""
        root = live.parent
        try:
            self._step("audit: intent")
            intent = self.audit.append(action=f"{action}-intent", **record)
        except BaseException:
            if stage is not None:
                shutil.rmtree(stage, ignore_errors=True)
            raise
        self._step(steps[0])
        if stage is None:  # a removal: the folder goes, in one rename out of the served names
            displaced = root / f"{STAGE_PREFIX}{live.name}-{secrets.token_hex(4)}"
            rename2(live, displaced, RENAME_NOREPLACE)
        else:
            displaced = stage
            exchange = live.exists() if replace is None else replace
            rename2(stage, live, RENAME_EXCHANGE if exchange else RENAME_NOREPLACE)
        self._step(steps[1])
        fsync_dir(root)
        self._step("cleanup: remove displaced tree")
        shutil.rmtree(displaced, ignore_errors=True)
        self._step("audit: outcome")
        done = self.audit.append(action=action, outcome="done", intent_seq=intent.seq, **record)
        self.commits.commit(root, done)
        from_revision, to_revision = record["from_revision"], record["to_revision"]
        assert from_revision is None or isinstance(from_revision, str)
        assert to_revision is None or isinstance(to_revision, str)
        return Outcome(live.name, from_revision, to_revision, root, intent.seq, done.seq)

    # -- recovery --------------------------------------------------------------------------

    def _laid_out_otherwise(self, root: Path, skill: str, intent: AuditEntry) -> bool:
        """A restore that kept the revision (it fixed modes, hidden entries, folders) is done only
        if the folder is laid out as the revision now; its bytes alone cannot tell."""
        if intent.get("from_revision") != intent.get("to_revision"):
            return False
        live = root / skill
        try:
            return bool(layout.differences(live, layout.modes(self.read_tree(live, skill))))
        except (SkillInvalid, OSError):  # changed again since: not what the restore wrote
            return True

    def recover(self, roots: tuple[Path, ...] = ()) -> list[str]:
        """Settle what a killed promotion left: intents without outcomes, stage and temp folders.

        The outcome is read from disk, not assumed: whichever revision is live is what happened."""
        notes: list[str] = []
        self.audit.finish_key()
        self.audit.repair_torn_tail()
        self.audit.settle_head()
        state = self.audit.verify()
        if not state.ok:  # settle nothing from lines that cannot be trusted
            raise AuditError(
                f"the audit chain is broken at line {state.bad_line}: {state.problem}. Nothing will "
                "be changed until it is investigated (`ingot audit verify`)"
            )
        for folder in (self.runs_dir, self.runs_dir / "pending"):
            remove_stale_temps(folder)  # write_atomic's temp files from a killed write
        entries = self.audit.entries()
        done = {e.get("intent_seq") for e in entries if e.get("outcome")}
        seen_roots = set(roots)
        for entry in entries:
            action = str(entry.get("action", ""))
            if entry.get("root"):
                seen_roots.add(Path(entry.get("root")))
            if not action.endswith("-intent") or entry.seq in done:
                continue
            skill, root = entry.get("skill"), Path(entry.get("root"))
            for stale in root.glob(f"{STAGE_PREFIX}{skill}-*"):
                shutil.rmtree(stale, ignore_errors=True)  # the live folder is never a stage folder
            try:
                live = self.live_revision(root, skill)
            except SkillInvalid as exc:  # settle it anyway: one broken folder must not block all changes
                live = f"invalid ({exc})"
            if live == entry.get("to_revision") and not self._laid_out_otherwise(root, skill, entry):
                outcome = "done (recovered after interruption)"
            elif live == entry.get("from_revision"):
                outcome = "aborted (interrupted before the switch)"
            else:
                outcome = f"unknown: live revision is {(live or 'none')[:60]}"
            self.audit.append(
                action=action.removesuffix("-intent"),
                skill=skill,
                root=str(root),
                from_revision=entry.get("from_revision"),
                to_revision=entry.get("to_revision"),
                actor="ingot-recovery",
                outcome=outcome,
                intent_seq=entry.seq,
                change_id=entry.get("change_id"),
            )
            notes.append(f"{skill}: {outcome}")
        for root in seen_roots:
            for stale in root.glob(f"{STAGE_PREFIX}*"):
                shutil.rmtree(stale, ignore_errors=True)
        if self.revisions.exists():
            for stale in self.revisions.glob("*/.tmp-*"):  # snapshot folders, absent markers
                if stale.is_dir() and not stale.is_symlink():
                    shutil.rmtree(stale, ignore_errors=True)
                else:
                    stale.unlink(missing_ok=True)
        if self.git.enabled:
            notes += self.commits.reconcile(self.audit.entries(), self.live_revision)
        return notes
