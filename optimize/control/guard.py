"""Protected live roots (LIVE_EDITS=quarantine): the folders harnesses read hold approved revisions.

When protection starts, the skills as they are become the approved baseline (`adopt`, audited).
From then on, each tick (`ingot serve`'s background thread, or `ingot guard`) looks at every
skill folder in the roots; one that is not at its approved revision (its files' bytes, and the
folder laid out as that revision is: each file's mode, no hidden entries, no empty folders, no
links; promote/layout.py), and has been unchanged for INBOX_SETTLE_S, is handled in three
crash-safe steps:

1. keep: its files are copied to `<home>/direct-edits/<skill>/<time>-<revision>/` with a record
   (a broken folder is kept too, with why; a deleted one has nothing to keep);
2. restore: promote/ puts the approved revision back (audited, one atomic exchange; a skill
   that was never approved is removed);
3. queue: a valid kept edit becomes a pending change with source `direct-edit`, through the
   same admission checks as any other, against the approved revision it would replace.

Every tick first settles what a killed write left (recovery, as before every write): a restore
interrupted before its switch is settled as aborted, the approval stays with the approved
revision (approved.py), and this tick restores the folder again. A kill between steps is
finished by the next tick (kept records not yet queued are queued; an edit already kept is not
kept twice). Hidden files added to a protected folder (which a served revision leaves out but a
harness reading the folder sees) are kept and removed like any other edit; a folder whose files
are the approved ones but laid out otherwise (a `chmod`, an empty folder) is restored with
nothing to keep or queue. Meanwhile the served library serves approved revisions only
(approved.py), so no agent is ever handed an unapproved edit. A tick whose restore fails says
so (`failed` events; `ingot guard` exits non-zero).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingot import faults
from ingot.errors import IngotError, WriteFailed
from ingot.fsutil import check_relative, fsync_dir, hidden_entries, write_atomic
from mcp_server.library import Similarity
from mcp_server.registry import Registry, read_skill_files
from mcp_server.skillfiles import read_folder
from optimize.control.approved import MARKER, PROTECT
from optimize.control.audit import AuditError
from optimize.control.changes import ChangeControl
from optimize.control.inbox import newest_mtime
from optimize.control.promote import Outcome, layout
from optimize.control.quarantine import CandidateRefused, admit

log = logging.getLogger(__name__)
ACTOR = "ingot-guard"
SimilarTo = Callable[[str, str], Similarity]
LAID_OUT = "laid out otherwise"  # the approved files, but other modes, empty folders, links


@dataclass(frozen=True)
class GuardEvent:
    skill: str
    did: str  # "adopted" | "recovered" | "queued" | "kept" | "restored" | "failed" | "waiting"
    detail: str
    change_id: str | None = None

    @property
    def quiet(self) -> bool:
        """A folder still being written is logged at debug level by `ingot serve`'s ticks."""
        return self.did == "waiting"

    def __str__(self) -> str:
        return f"{self.skill} {self.did}: {self.detail}"


@dataclass(frozen=True)
class Kept:
    """One out-of-band edit, copied aside before its folder was restored."""

    path: Path  # <home>/direct-edits/<skill>/<stamp>-<revision>/
    skill: str
    root: str
    found: str  # "edited" | "new" | "invalid (why)" | "hidden files (names)"
    revision: str | None  # None for a broken folder, or one whose only change is hidden files
    status: str  # "kept" (not queued yet) | "queued" | "refused" | "invalid" | "hidden"
    change_id: str | None = None
    why: str | None = None
    digest: str | None = None  # of every byte kept (files and hidden files): one keep per state


class Guard:
    def __init__(
        self,
        control: ChangeControl,
        similar_to: SimilarTo,
        *,
        settle_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.control, self.similar_to, self.settle_s, self.clock = control, similar_to, settle_s, clock
        self.kept_dir = control.runs_dir / "direct-edits"
        self.marker = control.runs_dir / MARKER
        self._registry = Registry(control.roots, control.limits)
        self._layouts: dict[str, dict[str, int]] = {}  # revision -> its files' modes

    # -- the baseline ------------------------------------------------------------------------

    def adopt(self) -> list[GuardEvent]:
        """The first time protection runs, approve what is live as the baseline and record that
        protection started (an audited `protect` line, mirrored by protected.json); afterwards
        only snapshot approved revisions that lack one (a folder that appears later is a new
        skill waiting for review, never a baseline). A deleted protected.json is written again
        from the chain: it never makes the next run adopt a new baseline."""
        first = not self.control.approvals.protected() and not self.marker.exists()
        notes = self._adopt(baseline=first)
        with self.control.writing():
            if not self.control.approvals.protected():
                self.control.audit.append(
                    action=PROTECT,
                    actor=ACTOR,
                    reason="protection started"
                    + (" (recorded from protected.json)" if self.marker.exists() else ""),
                )
            if not self.marker.exists():
                write_atomic(
                    self.marker,
                    json.dumps({"since": _now(), "roots": [str(r) for r in self.control.roots]}).encode(),
                )
        return [GuardEvent(n.split(":", 1)[0], "adopted", n.split(": ", 1)[-1]) for n in notes]

    def _adopt(self, baseline: bool) -> list[str]:
        """With `baseline`, take the live skills as they are as the approved baseline: each skill
        the chain has never approved gets a snapshot and an audited `adopt` line. Always, an
        approved revision that is live without a snapshot (promoted before new revisions were
        snapshotted) gets one."""
        control, notes = self.control, []
        with control.writing():
            approved = control.approvals.current()
            for skill in control.status().skills:
                if skill.live_revision is None:
                    continue
                known = skill.name in approved
                if (known and approved[skill.name] != skill.live_revision) or (not known and not baseline):
                    continue  # edited behind Ingot's back, or new since: `check` handles it
                try:
                    control.promoter.snapshot_live(skill.name, skill.root, skill.live_revision)
                except (OSError, IngotError) as exc:
                    notes.append(f"{skill.name}: could not snapshot {skill.live_revision[:12]}: {exc}")
                    continue
                if not known:
                    control.audit.append(
                        action="adopt",
                        skill=skill.name,
                        root=str(skill.root),
                        to_revision=skill.live_revision,
                        actor=ACTOR,
                        outcome="done",
                        reason="approved as found: the baseline when its live folder came under protection",
                    )
                    notes.append(f"{skill.name}: adopted at {skill.live_revision[:12]}")
        return notes

    # -- each tick -----------------------------------------------------------------------------

    def check(self) -> list[GuardEvent]:
        """One tick: settle what a killed write left, then hold every folder to its approved
        revision (or adopt the baseline, the first time)."""
        events = [
            GuardEvent(note.split(":", 1)[0], "recovered", note.split(": ", 1)[-1])
            for note in self.control.recover()
        ]
        if not self.control.approvals.protected():
            return events + self.adopt()  # the first tick: the baseline
        if not self.marker.exists():
            events += self.adopt()  # the mirror was deleted: written again, nothing adopted
        approved = self.control.approvals.current()
        on_disk = self._on_disk(approved)
        for kept in self.kept():  # kept and restored, then stopped before it was queued
            if kept.status == "kept" and kept.revision is not None:
                folder_at = on_disk.get(kept.skill, (None, None))[1]
                if folder_at == approved.get(kept.skill, "unapproved"):  # restored: measure against it
                    events += self._queue(kept)
        for name, (root, state) in sorted(on_disk.items()):
            known, revision = name in approved, approved.get(name)
            if known and state == revision:
                continue
            folder = root / name
            if folder.exists() and self.clock() - newest_mtime(folder) < self.settle_s:
                served = f"served at {revision[:12]}" if known and revision else "not served"
                events.append(  # still being written: the library serves the approval meanwhile
                    GuardEvent(
                        name,
                        "waiting",
                        f"changed less than {self.settle_s:g} s ago (INBOX_SETTLE_S): {served} "
                        "meanwhile; handled once it stops changing",
                    )
                )
                continue
            events += self._handle(name, root, state, known)
        for name, revision in approved.items():  # approved, and the folder is gone
            if revision is not None and self.control.root_of(name) is None:
                events += self._restore(name, "its folder was deleted", None)
        return events

    def _on_disk(self, approved: dict[str, str | None]) -> dict[str, tuple[Path, str]]:
        """Each skill folder's state: its revision, "invalid (why)", "hidden files (names)", or,
        when its files are its approved revision but the folder holds more or other than that
        revision's layout (layout.py: modes, empty folders, links), "laid out otherwise: (what)".
        First root wins."""
        self._registry.reload()
        broken = {p.folder: p.reason for p in self._registry.problems()}
        found: dict[str, tuple[Path, str]] = {}
        for root, folder in self._registry.folders():
            if folder.name in found:
                continue
            skill = self._registry.skills().get(folder.name)
            if folder in broken or skill is None or skill.folder != folder:
                reason = broken.get(folder, "not a valid skill folder").split(" (still serving", 1)[0]
                found[folder.name] = (root, f"invalid ({reason})")
            elif hidden := hidden_entries(folder):
                found[folder.name] = (root, f"hidden files ({', '.join(hidden)})")
            elif skill.revision == approved.get(folder.name) and (
                besides := layout.differences(folder, self._modes(folder.name, skill.revision, folder))
            ):
                found[folder.name] = (root, f"{LAID_OUT}: {'; '.join(besides)}")
            else:
                found[folder.name] = (root, skill.revision)
        return found

    def _modes(self, skill: str, revision: str, folder: Path) -> dict[str, int]:
        """The modes of `revision`'s files in its layout, from its approved snapshot (from the
        folder itself, which holds the same bytes, if the snapshot cannot be read); kept per
        revision, as its bytes never change."""
        if revision not in self._layouts:
            try:
                files = self.control.promoter.snapshots.verified(skill, revision)
            except (OSError, IngotError):
                try:
                    files = read_folder(folder, self.control.limits)
                except (OSError, IngotError):
                    return {}  # every file then differs: restoring says what is wrong
            self._layouts[revision] = layout.modes(files)
        return self._layouts[revision]

    def _handle(self, name: str, root: Path, state: str, known: bool) -> list[GuardEvent]:
        if state.startswith(LAID_OUT):  # its bytes are the approval's: nothing to keep or queue
            why = "its files are the approved revision's, so nothing was kept"
            return self._restore(name, why, None, shown=f"{state}; {why}")
        revision = None if state.startswith(("invalid", "hidden files")) else state
        found = ("edited" if known else "new") if revision is not None else state
        try:
            kept = self._keep(name, root, found, revision)
        except (OSError, IngotError) as exc:
            return [GuardEvent(name, "failed", f"could not keep the edit aside ({exc}); left in place")]
        events = self._restore(name, f"out-of-band edit ({found}) kept at {kept.path}", kept)
        if events and events[-1].did == "restored" and kept.revision is not None:
            events += self._queue(kept)
        return events

    def _restore(self, name: str, why: str, kept: Kept | None, shown: str | None = None) -> list[GuardEvent]:
        """Restore and say so: `why` goes in the audit line (which adds what the restore found),
        `shown` (else `why`) in the event."""
        try:
            outcome = self._restore_approved(name, why)
        except WriteFailed as exc:  # already says what failed (errno text, path), what is served, what to do
            return [GuardEvent(name, "failed", str(exc))]
        except IngotError as exc:
            return [GuardEvent(name, "failed", f"could not restore the approved revision: {exc}")]
        now = f"at {outcome.to_revision[:12]}" if outcome.to_revision else "removed (never approved)"
        return [GuardEvent(name, "restored", f"{now}; {shown or why}")]

    def _restore_approved(self, skill: str, why: str) -> Outcome:
        """Put `skill`'s live folder back to its approved revision (Promoter.restore, crash-safe
        and audited); a folder that was never approved is removed (it has been kept)."""
        control = self.control
        with control.writing():
            revision = control.approvals.current().get(skill)
            root = control.root_of(skill) or self._recorded_root(skill)
            try:
                return control.promoter.restore(skill, root, revision, actor=ACTOR, reason=why)
            except (OSError, AuditError) as exc:
                raise control.fault("restore", skill, revision, exc) from exc

    def _recorded_root(self, skill: str) -> Path:
        """The root the chain last recorded for `skill` (its folder is gone), else the first."""
        for entry in reversed(self.control.audit.entries()):
            root = entry.get("root")
            if entry.get("skill") == skill and root and Path(root) in self.control.roots:
                return Path(root)
        return self.control.roots[0]

    # -- keeping what was found ----------------------------------------------------------------

    def _keep(self, name: str, root: Path, found: str, revision: str | None) -> Kept:
        """Copy the folder aside (files within the skill limits; symlinks and specials are not
        followed) before anything replaces it; what was kept already (a tick killed before its
        restore) is not kept twice."""
        folder = root / name
        try:
            files = read_folder(folder, self.control.limits)
            why = None
        except (OSError, IngotError) as exc:
            files, why = {}, f"its files could not be read: {exc}"
        hidden = _hidden_files(folder, self.control.limits.max_skill_bytes)
        digest = _digest(files, hidden)
        for earlier in self.kept():
            if earlier.skill == name and (
                earlier.digest == digest or (revision and earlier.revision == revision)
            ):
                return earlier
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%f")
        final = self.kept_dir / name / f"{stamp}-{(revision or 'invalid')[:12]}"
        temp = final.parent / f".tmp-{secrets.token_hex(4)}"
        for rel, data in files.items():
            _write_kept(temp / "files" / check_relative(rel), data)
        for rel, data in hidden.items():  # kept apart: never part of a candidate
            _write_kept(temp / "hidden" / rel, data)
        status = "kept" if revision is not None else ("hidden" if found.startswith("hidden") else "invalid")
        kept = Kept(
            final,
            name,
            str(root),
            found,
            revision,
            status,
            why=why or (found if not revision else None),
            digest=digest,
        )
        temp.mkdir(parents=True, exist_ok=True)
        write_atomic(temp / "record.json", json.dumps(_record(kept), indent=1).encode())
        fsync_dir(temp)
        faults.point("rename the kept edit into place")
        os.rename(temp, final)
        fsync_dir(final.parent)
        return kept

    def _queue(self, kept: Kept) -> list[GuardEvent]:
        """A valid kept edit becomes a pending change (the folder holds the approved revision
        again, so it is measured against that). Any step may fail; the next tick finds the kept
        record not yet marked queued and finishes it, never queueing one edit twice."""
        files_dir = kept.path / "files"
        try:
            skill, files = read_skill_files(files_dir.parent, files_dir, self.control.limits, name=kept.skill)
            pending = self.control.queue.get(kept.skill)
            if pending is not None and pending.candidate_revision == kept.revision:
                self._update(kept, "queued", change_id=pending.id)
                return []
            description = skill.description
            try:
                proposed = admit(
                    self.control,
                    kept.skill,
                    files,
                    "direct-edit",
                    self.similar_to(kept.skill, description),
                    f"edited in place in {kept.root}; kept at {kept.path}",
                )
            except CandidateRefused as exc:
                self._update(kept, "refused", why=str(exc))
                return [
                    GuardEvent(kept.skill, "kept", f"not queued ({exc}); the edit is kept at {kept.path}")
                ]
            change = proposed.change
            self._update(kept, "queued", change_id=change.id)
        except (OSError, IngotError) as exc:  # a busy lock, a full disk: the next tick finishes it
            return [GuardEvent(kept.skill, "failed", f"could not queue the kept edit yet: {exc}")]
        detail = proposed.withheld or f"queued as {change.id} for review (source direct-edit)"
        return [GuardEvent(kept.skill, "queued", detail, change.id)]

    def kept(self) -> list[Kept]:
        """Every kept edit, oldest first."""
        found = []
        for record in sorted(self.kept_dir.glob("*/*/record.json")) if self.kept_dir.exists() else []:
            if record.parent.name.startswith("."):  # a keep killed before its rename: not kept
                continue
            try:
                data = json.loads(record.read_text())
                found.append(
                    Kept(
                        record.parent,
                        str(data["skill"]),
                        str(data["root"]),
                        str(data["found"]),
                        data.get("revision"),
                        str(data["status"]),
                        data.get("change_id"),
                        data.get("why"),
                        data.get("digest"),
                    )
                )
            except (OSError, ValueError, KeyError) as exc:
                log.warning("kept edit %s is unreadable: %s", record.parent, exc)
        return found

    def _update(self, kept: Kept, status: str, change_id: str | None = None, why: str | None = None) -> None:
        data = {**_record(kept), "status": status, "change_id": change_id, "why": why}
        write_atomic(kept.path / "record.json", json.dumps(data, indent=1).encode())


def _write_kept(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    faults.point(f"write kept {target.name}")
    with open(target, "xb") as handle:
        handle.write(data)
        handle.flush()
        faults.point(f"fsync kept {target.name}")
        os.fsync(handle.fileno())


def _hidden_files(folder: Path, budget: int) -> dict[str, bytes]:
    """The regular hidden files under `folder` (a path with any dot-named part), up to `budget`
    bytes in all; symlinks and special files are not followed or read."""
    found: dict[str, bytes] = {}
    if not folder.is_dir() or folder.is_symlink():
        return found
    for dirpath, _dirnames, filenames in os.walk(folder, followlinks=False):
        for entry in sorted(filenames):
            path = Path(dirpath) / entry
            rel = path.relative_to(folder)
            if not any(part.startswith(".") for part in rel.parts) or not path.is_file() or path.is_symlink():
                continue
            try:
                data = path.read_bytes()[: max(budget, 0)]
            except OSError:
                continue
            budget -= len(data)
            found[rel.as_posix()] = data
    return found


def _digest(files: dict[str, bytes], hidden: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for part, found in (("files", files), ("hidden", hidden)):
        for rel in sorted(found):
            digest.update(f"{part}/{rel}\0{len(found[rel])}\0".encode())
            digest.update(found[rel])
    return digest.hexdigest()


def _record(kept: Kept) -> dict[str, Any]:
    return {
        "skill": kept.skill,
        "root": kept.root,
        "found": kept.found,
        "revision": kept.revision,
        "status": kept.status,
        "change_id": kept.change_id,
        "why": kept.why,
        "digest": kept.digest,
        "kept_at": _now(),
    }


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
