"""What a revision is, and the snapshots of revisions kept in `runs/revisions/<skill>/<revision>/`.

Writes only the state home, never a skills root (it reads live folders to snapshot them). A
snapshot is written to a temp folder, fsynced and renamed into place, kept once complete, and
trusted only while its files still hash to the revision it is named for. `absent` is the
snapshot of a skill before Ingot created it: a marker, honoured only with that creation audited.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from ingot.errors import PromotionError, SkillInvalid
from ingot.fsutil import fsync_dir
from mcp_server.registry import NAME_PATTERN, Limits, SkillFile, manifest_revision, read_skill_files
from optimize.control.audit import AuditLog
from optimize.control.promote.folders import StepHook, write_tree

ABSENT = "absent"  # the snapshot of a skill before Ingot created it: rolling back to it removes it


def tree_revision(files: Mapping[str, bytes]) -> str:
    return manifest_revision(
        SkillFile(path, hashlib.sha256(data).hexdigest(), len(data)) for path, data in files.items()
    )


def check_skill_name(name: str) -> str:
    if not isinstance(name, str) or len(name) > 64 or not NAME_PATTERN.match(name):
        raise PromotionError(
            f"{name!r} is not a valid skill name (lowercase letters, digits, single hyphens)"
        )
    return name


class Snapshots:
    """The snapshot store under `revisions`; writes only while the caller holds the change lock."""

    def __init__(self, revisions: Path, limits: Limits, audit: AuditLog, on_step: StepHook) -> None:
        self.revisions = revisions
        self.limits = limits
        self.audit = audit
        self._step = on_step

    def path(self, skill: str, revision: str) -> Path:
        return self.revisions / check_skill_name(skill) / revision

    def read_tree(self, folder: Path, skill: str) -> dict[str, bytes]:
        """The files of a valid skill folder (live, staged or snapshotted) by relative path."""
        return read_skill_files(folder.parent, folder, self.limits, name=skill)[1]

    def has(self, skill: str, revision: str) -> bool:
        """A complete, unedited snapshot of `revision` exists (unreadable counts as incomplete)."""
        final = self.path(skill, revision)
        if not final.is_dir():
            return False
        with contextlib.suppress(SkillInvalid):
            return tree_revision(self.read_tree(final, skill)) == revision
        return False

    def snapshot_live(self, skill: str, root: Path, revision: str) -> None:
        """Snapshot the live tree of `skill`, which must be at `revision` (kept if one exists)."""
        if self.has(skill, revision):
            return
        files = self.read_tree(root / skill, skill)
        if tree_revision(files) != revision:
            raise PromotionError(f"skill {skill!r} changed on disk while being snapshotted; retry")
        self.store(skill, revision, files)

    def store(self, skill: str, revision: str, files: Mapping[str, bytes]) -> None:
        """Write `files` as the snapshot of `revision` (kept if a verified one is there already)."""
        if self.has(skill, revision):
            return
        final = self.path(skill, revision)
        if final.exists():  # an incomplete or edited snapshot must not stand in for it: keep it aside
            os.rename(final, final.parent / f".bad-{revision[:12]}-{secrets.token_hex(4)}")
        final.parent.mkdir(parents=True, exist_ok=True)
        temp = final.parent / f".tmp-{revision[:12]}-{secrets.token_hex(4)}"
        write_tree(temp, files, "snapshot", self._step)
        self._step("snapshot: rename into place")
        os.rename(temp, final)
        fsync_dir(final.parent)

    def verified(self, skill: str, revision: str) -> dict[str, bytes]:
        """The files of the snapshot of `revision`, refused if missing or no longer hashing to it."""
        snapshot = self.path(skill, revision)
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

    # -- "absent": the snapshot of a skill Ingot created ------------------------------------

    def record_absent(self, skill: str, root: Path) -> None:
        """Step 1 for a new skill: the snapshot of "nothing here", written like any snapshot
        (temp file, fsync, rename). Kept once recorded; a marker left by a creation that was
        then aborted is harmless, because `absent_recorded` also wants the creation in the chain."""
        marker = self.path(skill, ABSENT)
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
        marker = self.path(skill, ABSENT)
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
