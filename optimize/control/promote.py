"""Promote a verified candidate into a skills root, or roll one back.

The only code that writes a skills root. The caller holds the change-control lock (lock.py)
and has already decided the change may happen (gate.py, changes.py); this module makes it
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
Filesystems without an atomic exchange are refused rather than served a gap.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ingot.errors import PromotionError, SkillInvalid
from ingot.fsutil import check_relative, fsync_dir, remove_stale_temps
from mcp_server.registry import (
    NAME_PATTERN,
    Limits,
    SkillFile,
    manifest_revision,
    read_skill,
    read_skill_files,
)
from optimize.control.audit import AuditError, AuditLog

STAGE_PREFIX = ".ingot-stage-"
ABSENT = "absent"  # the snapshot of a skill before Ingot created it: rolling back to it removes it
StepHook = Callable[[str], None]


@dataclass(frozen=True)
class Outcome:
    """What a promotion or rollback did."""

    skill: str
    from_revision: str | None
    to_revision: str | None  # None: the skill was removed (rolled back to "absent")
    root: Path
    intent_seq: int
    seq: int  # the outcome line's sequence number: this decision's unique, increasing id


def tree_revision(files: Mapping[str, bytes]) -> str:
    import hashlib

    return manifest_revision(
        SkillFile(path, hashlib.sha256(data).hexdigest(), len(data)) for path, data in files.items()
    )


def check_skill_name(name: str) -> str:
    if not isinstance(name, str) or len(name) > 64 or not NAME_PATTERN.match(name):
        raise PromotionError(
            f"{name!r} is not a valid skill name (lowercase letters, digits, single hyphens)"
        )
    return name


# -- atomic exchange ---------------------------------------------------------------------------

_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2
_AT_FDCWD = -100


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _rename2(source: Path, target: Path, flags: int) -> None:
    """renameat2 on Linux, renamex_np on macOS; refuse anything that is not atomic."""
    libc = _libc()
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        result = libc.renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags)
    elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        mac_flags = {_RENAME_EXCHANGE: 0x2, _RENAME_NOREPLACE: 0x4}[flags]  # RENAME_SWAP, RENAME_EXCL
        result = libc.renamex_np(os.fsencode(source), os.fsencode(target), mac_flags)
    else:
        raise PromotionError(
            "this platform has no atomic folder exchange; Ingot will not promote "
            "with a gap. Use Linux (ext4, xfs, btrfs, tmpfs) or macOS (APFS)"
        )
    if result != 0:
        errno = ctypes.get_errno()
        raise PromotionError(
            f"atomic switch of {target} failed: {os.strerror(errno)} (errno {errno}); "
            "the filesystem may not support it. Nothing was changed"
        )


class Promoter:
    """Writes skills roots and `runs/revisions`; call only while holding the change lock."""

    def __init__(self, runs_dir: Path, limits: Limits | None = None, on_step: StepHook | None = None) -> None:
        self.runs_dir = runs_dir
        self.revisions = runs_dir / "revisions"
        self._on_step = on_step or (lambda _name: None)
        self.audit = AuditLog(runs_dir, self._on_step)
        self.limits = limits or Limits()

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
        return read_skill_files(folder.parent, folder, self.limits, name=skill)[1]

    def snapshot_path(self, skill: str, revision: str) -> Path:
        return self.revisions / check_skill_name(skill) / revision

    # -- writing ---------------------------------------------------------------------------

    def _write_tree(self, folder: Path, files: Mapping[str, bytes], label: str) -> None:
        folder.mkdir(parents=True)
        for rel in sorted(files):
            target = folder / check_relative(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            self._step(f"{label}: write {rel}")
            with open(target, "xb") as handle:
                handle.write(files[rel])
                handle.flush()
                self._step(f"{label}: fsync {rel}")
                os.fsync(handle.fileno())
        for directory in sorted({(folder / r).parent for r in files}, key=lambda p: -len(p.parts)):
            fsync_dir(directory)
        self._step(f"{label}: fsync folder")
        fsync_dir(folder)

    def _snapshot(self, skill: str, root: Path, revision: str) -> None:
        final = self.snapshot_path(skill, revision)
        if final.exists():
            with contextlib.suppress(SkillInvalid):  # unreadable counts as incomplete
                if tree_revision(self.read_tree(final, skill)) == revision:
                    return
            # An incomplete or edited snapshot must not stand in for the revision: keep it aside.
            os.rename(final, final.parent / f".bad-{revision[:12]}-{secrets.token_hex(4)}")
        files = self.read_tree(root / skill, skill)
        if tree_revision(files) != revision:
            raise PromotionError(f"skill {skill!r} changed on disk while being snapshotted; retry")
        final.parent.mkdir(parents=True, exist_ok=True)
        temp = final.parent / f".tmp-{revision[:12]}-{secrets.token_hex(4)}"
        self._write_tree(temp, files, "snapshot")
        self._step("snapshot: rename into place")
        os.rename(temp, final)
        fsync_dir(final.parent)

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
    ) -> Outcome:
        """Make `files` the live tree of `skill` in `root`, atomically; see the module docstring."""
        check_skill_name(skill)
        for rel in files:
            check_relative(rel)
        if "SKILL.md" not in files:
            raise PromotionError("a candidate must contain SKILL.md")
        self.recover((root,))
        to_revision = tree_revision(files)
        live = root / skill
        from_revision = self.live_revision(root, skill)
        if from_revision != expected_from:
            raise PromotionError(
                f"skill {skill!r} is live at {(from_revision or 'nothing')[:12]} but the change was "
                f"made against {(expected_from or 'nothing')[:12]}; nothing was changed"
            )
        if from_revision == to_revision:
            raise PromotionError(f"skill {skill!r} is already live at {to_revision[:12]}")
        if from_revision is not None:
            self._snapshot(skill, root, from_revision)
        else:
            self._record_absent(skill, root)
        stage = root / f"{STAGE_PREFIX}{skill}-{secrets.token_hex(4)}"
        try:
            self._write_tree(stage, files, "stage")
            if read_skill(root, stage, self.limits, name=skill).revision != to_revision:
                raise PromotionError("the staged files do not hash to the candidate revision")
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        record = {
            "skill": skill,
            "root": str(root),
            "from_revision": from_revision,
            "to_revision": to_revision,
            "evidence_digest": evidence_digest,
            "actor": actor,
            "reason": reason,
            "change_id": change_id,
        }
        try:
            self._step("audit: intent")
            intent = self.audit.append(action=f"{action}-intent", **record)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        self._step("switch: rename")
        _rename2(stage, live, _RENAME_EXCHANGE if from_revision is not None else _RENAME_NOREPLACE)
        self._step("switch: fsync root")
        fsync_dir(root)
        self._step("cleanup: remove displaced tree")
        shutil.rmtree(stage, ignore_errors=True)
        self._step("audit: outcome")
        done = self.audit.append(action=action, outcome="done", intent_seq=intent.seq, **record)
        return Outcome(skill, from_revision, to_revision, root, intent.seq, done.seq)

    def rollback(self, skill: str, root: Path, revision: str, actor: str, reason: str | None) -> Outcome:
        """Restore a snapshot (itself snapshotting what it displaces) after checking its hash;
        `ABSENT` removes a skill Ingot created."""
        if revision == ABSENT:
            return self._remove(skill, root, actor=actor, reason=reason)
        snapshot = self.snapshot_path(skill, revision)
        if not snapshot.is_dir():
            raise PromotionError(
                f"no snapshot of {skill!r} at {revision[:12]}; `ingot history {skill}` "
                "lists the revisions that can be restored"
            )
        files = self.read_tree(snapshot, skill)
        if tree_revision(files) != revision:
            raise PromotionError(
                f"the snapshot {snapshot} no longer hashes to {revision[:12]} "
                "(edited after it was taken); refusing to restore it"
            )
        return self.switch(
            skill,
            root,
            files,
            expected_from=self.live_revision(root, skill),
            action="rollback",
            actor=actor,
            reason=reason,
        )

    # -- removal: rolling a skill Ingot created back to "absent" -----------------------------

    def _record_absent(self, skill: str, root: Path) -> None:
        """Step 1 for a new skill: the snapshot of "nothing here", written like any snapshot
        (temp file, fsync, rename). Kept once recorded; a marker left by a creation that was
        then aborted is harmless, because `absent_recorded` also wants the creation in the chain."""
        marker = self.snapshot_path(skill, ABSENT)
        if marker.is_file():
            return
        marker.parent.mkdir(parents=True, exist_ok=True)
        temp = marker.parent / f".tmp-{ABSENT}-{secrets.token_hex(4)}"
        data = {"schema_version": 1, "skill": skill, "root": str(root)}
        self._step("snapshot: write absent")
        with open(temp, "xb") as handle:
            handle.write(json.dumps(data, sort_keys=True).encode())
            handle.flush()
            self._step("snapshot: fsync absent")
            os.fsync(handle.fileno())
        self._step("snapshot: rename absent into place")
        os.rename(temp, marker)
        fsync_dir(marker.parent)

    def absent_recorded(self, skill: str) -> bool:
        """Whether `skill` may be rolled back to absent: its marker is there and names it, and
        the keyed chain holds a completed creation of it (from no revision) by Ingot."""
        marker = self.snapshot_path(skill, ABSENT)
        try:
            if marker.is_symlink() or json.loads(marker.read_bytes()).get("skill") != skill:
                return False
        except (OSError, ValueError, AttributeError):
            return False
        return any(
            e.get("skill") == skill
            and e.get("from_revision") is None
            and e.get("to_revision")
            and str(e.get("outcome", "")).startswith("done")
            for e in self.audit.entries()
        )

    def _remove(self, skill: str, root: Path, *, actor: str, reason: str | None) -> Outcome:
        """Roll `skill` back to absent: snapshot it (so this, too, can be undone), audit the
        intent, then one atomic rename of the live folder into a dot-prefixed trash folder in the
        same root. A kill leaves the skill whole or gone, plus at most a trash folder and an intent
        without outcome, which `recover` settles like a stage folder (it has the stage prefix)."""
        check_skill_name(skill)
        self.recover((root,))
        if not self.absent_recorded(skill):
            raise PromotionError(
                f"no absent snapshot of {skill!r}: Ingot did not create it, so it will not remove it; "
                f"`ingot history {skill}` lists the revisions that can be restored"
            )
        live = root / skill
        from_revision = self.live_revision(root, skill)
        if from_revision is None:
            raise PromotionError(f"skill {skill!r} is already absent from {root}; nothing was changed")
        self._snapshot(skill, root, from_revision)
        record = {
            "skill": skill,
            "root": str(root),
            "from_revision": from_revision,
            "to_revision": None,
            "evidence_digest": None,
            "actor": actor,
            "reason": reason,
            "change_id": None,
        }
        self._step("audit: intent")
        intent = self.audit.append(action="rollback-intent", **record)
        trash = root / f"{STAGE_PREFIX}{skill}-{secrets.token_hex(4)}"
        self._step("remove: rename into trash")
        _rename2(live, trash, _RENAME_NOREPLACE)
        self._step("remove: fsync root")
        fsync_dir(root)
        self._step("cleanup: remove displaced tree")
        shutil.rmtree(trash, ignore_errors=True)
        self._step("audit: outcome")
        done = self.audit.append(action="rollback", outcome="done", intent_seq=intent.seq, **record)
        return Outcome(skill, from_revision, None, root, intent.seq, done.seq)

    # -- recovery --------------------------------------------------------------------------

    def recover(self, roots: tuple[Path, ...] = ()) -> list[str]:
        """Settle what a killed promotion left: intents without outcomes, stage and temp folders.

        The outcome is read from disk, not assumed: whichever revision is live is what happened."""
        notes: list[str] = []
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
            if live == entry.get("to_revision"):
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
        return notes
