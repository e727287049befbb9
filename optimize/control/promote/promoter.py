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
import functools
import json
import logging
import os
import secrets
import shutil
import sys
import threading
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
from optimize.control.approved import FOLDER_SWITCHES
from optimize.control.audit import AuditEntry, AuditError, AuditLog
from optimize.control.gitrepo import GitError, GitHistory, GitRepo

log = logging.getLogger(__name__)

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


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, found once (find_library runs ldconfig in a subprocess: ~15 ms)."""
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


def commit_message(entry: AuditEntry, reconciled: bool = False) -> str:
    """A promotion's commit message: what happened in one line, then trailers that tie the commit
    to its audit line and evidence (`git log --grep=Ingot-Change: chg-...` finds a change)."""
    action, skill = entry.get("action"), entry.get("skill")
    before, after = entry.get("from_revision"), entry.get("to_revision")
    change = f" {entry.get('change_id')}" if entry.get("change_id") else ""
    subject = f"ingot: {action} {skill}{change} ({str(before or ABSENT)[:12]} -> {str(after or ABSENT)[:12]})"
    body = [str(entry.get("reason"))] if entry.get("reason") else []
    if reconciled:
        body.append("Committed on recovery: the process was stopped between the switch and this commit.")
    trailers = [
        f"Ingot-Skill: {skill}",
        f"Ingot-Audit: {entry.seq} {entry.hash}",
        f"Ingot-Revision: {after or ABSENT}",
        f"Ingot-Actor: {entry.get('actor')}",
    ]
    if entry.get("change_id"):
        trailers.append(f"Ingot-Change: {entry.get('change_id')}")
    if entry.get("evidence_digest"):
        trailers.append(f"Ingot-Evidence: {entry.get('evidence_digest')}")
    return "\n\n".join([subject, *body, "\n".join(trailers)]) + "\n"


def _rel(repo: GitRepo, root: Path, skill: str) -> str:
    rel_root = repo.rel(root)
    return f"{rel_root}/{skill}" if rel_root else skill


def _author(entry: AuditEntry) -> str:
    return f"{entry.get('actor') or 'ingot'} (via Ingot)"


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
        self._on_step = on_step or (lambda _name: None)
        self.audit = AuditLog(runs_dir, self._on_step)
        self.limits = limits or Limits()
        self.git = git or GitHistory(enabled=False)
        self._repos: dict[Path, GitRepo | None] = {}
        self.pushes: list[threading.Thread] = []  # background pushes (tests join them)

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

    def has_snapshot(self, skill: str, revision: str) -> bool:
        """A complete, unedited snapshot of `revision` exists (unreadable counts as incomplete)."""
        final = self.snapshot_path(skill, revision)
        if not final.is_dir():
            return False
        with contextlib.suppress(SkillInvalid):
            return tree_revision(self.read_tree(final, skill)) == revision
        return False

    def snapshot_live(self, skill: str, root: Path, revision: str) -> None:
        """Snapshot the live tree of `skill`, which must be at `revision` (kept if one exists)."""
        if self.has_snapshot(skill, revision):
            return
        files = self.read_tree(root / skill, skill)
        if tree_revision(files) != revision:
            raise PromotionError(f"skill {skill!r} changed on disk while being snapshotted; retry")
        self._store_snapshot(skill, revision, files)

    def _store_snapshot(self, skill: str, revision: str, files: Mapping[str, bytes]) -> None:
        """Write `files` as the snapshot of `revision` (kept if a verified one is there already)."""
        if self.has_snapshot(skill, revision):
            return
        final = self.snapshot_path(skill, revision)
        if final.exists():  # an incomplete or edited snapshot must not stand in for it: keep it aside
            os.rename(final, final.parent / f".bad-{revision[:12]}-{secrets.token_hex(4)}")
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
            self.snapshot_live(skill, root, from_revision)
        else:
            self._record_absent(skill, root)
        # The new revision is snapshotted too: with LIVE_EDITS=quarantine the served library and
        # the guard restore it from here if its folder is edited behind Ingot's back.
        self._store_snapshot(skill, to_revision, files)
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
        self._commit(root, done)
        return Outcome(skill, from_revision, to_revision, root, intent.seq, done.seq)

    def rollback(self, skill: str, root: Path, revision: str, actor: str, reason: str | None) -> Outcome:
        """Restore a snapshot (itself snapshotting what it displaces) after checking its hash;
        `ABSENT` removes a skill Ingot created."""
        if revision == ABSENT:
            return self._remove(skill, root, actor=actor, reason=reason)
        files = self._verified_snapshot(skill, revision)
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
        folder goes) whatever is there now: an out-of-band edit, a broken folder, nothing.

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
        if from_revision == revision and live.exists() == (revision is not None):
            raise PromotionError(f"skill {skill!r} is already at its approved revision; nothing was changed")
        if from_revision is not None:
            self.snapshot_live(skill, root, from_revision)
        stage = None
        if revision is not None:
            files = self._verified_snapshot(skill, revision)
            stage = root / f"{STAGE_PREFIX}{skill}-{secrets.token_hex(4)}"
            try:
                self._write_tree(stage, files, "stage")
            except BaseException:
                shutil.rmtree(stage, ignore_errors=True)
                raise
        record = {
            "skill": skill,
            "root": str(root),
            "from_revision": from_revision,
            "to_revision": revision,
            "evidence_digest": None,
            "actor": actor,
            "reason": f"{reason} (found {found})",
            "change_id": change_id,
        }
        try:
            self._step("audit: intent")
            intent = self.audit.append(action="restore-intent", **record)
        except BaseException:
            if stage is not None:
                shutil.rmtree(stage, ignore_errors=True)
            raise
        self._step("switch: rename")
        if stage is None:  # approved absent: the folder goes, in one rename out of the served names
            stage = root / f"{STAGE_PREFIX}{skill}-{secrets.token_hex(4)}"
            _rename2(live, stage, _RENAME_NOREPLACE)
        else:
            _rename2(stage, live, _RENAME_EXCHANGE if live.exists() else _RENAME_NOREPLACE)
        self._step("switch: fsync root")
        fsync_dir(root)
        self._step("cleanup: remove displaced tree")
        shutil.rmtree(stage, ignore_errors=True)
        self._step("audit: outcome")
        done = self.audit.append(action="restore", outcome="done", intent_seq=intent.seq, **record)
        self._commit(root, done)
        return Outcome(skill, from_revision, revision, root, intent.seq, done.seq)

    def _verified_snapshot(self, skill: str, revision: str) -> dict[str, bytes]:
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
        return files

    # -- git: each switch is also a commit ------------------------------------------------------

    def _repo(self, root: Path) -> GitRepo | None:
        if not self.git.enabled:
            return None
        if root not in self._repos:
            self._repos[root] = GitRepo.of(root)
        return self._repos[root]

    def _commit(self, root: Path, entry: AuditEntry, reconciled: bool = False) -> str | None:
        """In a git work tree, record a finished switch as one commit of exactly that skill's
        folder on the checked-out branch. It runs after the outcome line: a kill before it
        leaves the folder ahead of HEAD, and `recover` commits it (`_reconcile_git`). A git
        failure never undoes a promotion; it is logged, and the next recovery retries."""
        repo = self._repo(root)
        if repo is None:
            return None
        skill = str(entry.get("skill"))
        self._step("git: commit")
        try:
            commit = repo.commit_paths(
                [_rel(repo, root, skill)], commit_message(entry, reconciled), _author(entry)
            )
        except GitError as exc:
            log.warning("the %s of %s is live but not committed to git: %s", entry.get("action"), skill, exc)
            return None
        if commit is not None and self.git.push_remote:
            self._push(repo)
        return commit

    def _push(self, repo: GitRepo) -> None:
        """Push in the background: a slow or unreachable remote never holds the change lock."""
        remote = str(self.git.push_remote)

        def push() -> None:
            try:
                repo.push(remote)
            except GitError as exc:
                log.warning(
                    "could not push %s to %s: %s (the next promotion pushes again)", repo.top, remote, exc
                )

        thread = threading.Thread(target=push, name="ingot-git-push", daemon=True)
        thread.start()
        self.pushes.append(thread)

    def _reconcile_git(self, entries: list[AuditEntry]) -> list[str]:
        """Commit every switch whose outcome is in the chain but not in git (a kill between the
        swap and the commit). Only a folder that holds exactly what the chain says Ingot put
        there is committed: anything else is drift, and never Ingot's to commit."""
        last: dict[str, AuditEntry] = {}
        for entry in entries:
            action = str(entry.get("action", ""))
            if action in FOLDER_SWITCHES and str(entry.get("outcome", "")).startswith("done"):
                last[str(entry.get("skill"))] = entry
        notes = []
        by_root: dict[Path, list[AuditEntry]] = {}
        for entry in last.values():
            by_root.setdefault(Path(str(entry.get("root"))), []).append(entry)
        for root, switched in sorted(by_root.items()):
            repo = self._repo(root)
            if repo is None:
                continue
            try:
                dirty = repo.dirty([_rel(repo, root, str(e.get("skill"))) for e in switched])
            except GitError as exc:
                log.warning("cannot compare %s with git: %s", root, exc)
                continue
            for entry in switched:
                skill = str(entry.get("skill"))
                if _rel(repo, root, skill) not in dirty:
                    continue
                try:
                    live = self.live_revision(root, skill)
                except SkillInvalid:
                    continue
                if live == entry.get("to_revision") and self._commit(root, entry, reconciled=True):
                    notes.append(f"{skill}: committed to git after an interruption (audit line {entry.seq})")
        return notes

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
        self.snapshot_live(skill, root, from_revision)
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
        self._commit(root, done)
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
        if self.git.enabled:
            notes += self._reconcile_git(self.audit.entries())
        return notes
