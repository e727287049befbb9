"""The candidate inbox: where agents write skills, turned into pending changes; never served.

Two kinds of source, scanned by `Inbox.scan` (each tick of `ingot serve`, or `ingot inbox`):

* CANDIDATE_ROOTS: folders agents write to. A skill folder there (its name is the skill's name)
  that is new or changed, and has been unchanged for INBOX_SETTLE_S (so a half-written folder is
  not read), becomes a pending change with source `inbox`, through the same admission checks as
  `create_skill` and `ingot propose`. Re-writing it replaces its pending change under the usual
  displacement rules; deleting it withdraws the change if that is still the one pending.
* CANDIDATE_BRANCH, for each skills root in a git work tree: a skill folder that commits on that
  branch changed since it left HEAD becomes a pending change with source `git:<sha>` (the last
  commit touching it). Nothing is checked out; files come from `git archive`.

What was seen is kept in `<home>/inbox.json` (origin -> revision, change id, outcome), so a
candidate is queued once per revision, a refused one is not retried until it changes, and a
restart loses nothing. A candidate identical to what is live queues nothing.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingot.errors import IngotError
from ingot.fsutil import write_atomic
from mcp_server.library import Similarity
from mcp_server.registry import NAME_PATTERN
from optimize.control.changes import ChangeControl
from optimize.control.gitrepo import GitError, GitRepo
from optimize.control.promote import tree_revision
from optimize.control.quarantine import CandidateRefused, admit, read_candidate

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1
SimilarTo = Callable[[str, str], Similarity]


@dataclass(frozen=True)
class InboxEvent:
    """What one scan did with one candidate."""

    skill: str
    origin: str  # the candidate folder, or "git:<sha>"
    did: str  # "queued" | "withheld" | "refused" | "withdrawn" | "same as live"
    detail: str
    change_id: str | None = None

    def __str__(self) -> str:
        return f"{self.skill} from {self.origin} {self.did}: {self.detail}"


def newest_mtime(folder: Path) -> float:
    newest = folder.stat().st_mtime
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in (*dirnames, *filenames):
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
            except FileNotFoundError:
                continue  # deleted while we looked: the next scan sees the settled folder
    return newest


class Inbox:
    def __init__(
        self,
        control: ChangeControl,
        candidate_roots: tuple[Path, ...],
        similar_to: SimilarTo,
        *,
        branch: str | None = None,
        settle_s: float = 2.0,
        queued: Callable[[str, str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.control = control
        self.candidate_roots = tuple(Path(os.path.realpath(r.expanduser())) for r in candidate_roots)
        self.similar_to, self.branch, self.settle_s = similar_to, branch, settle_s
        self.queued, self.clock = queued, clock
        self.path = control.runs_dir / "inbox.json"
        served = {Path(os.path.realpath(r)) for r in control.roots}
        for root in self.candidate_roots:
            if root in served or any(root.is_relative_to(s) for s in served):
                raise IngotError(
                    f"CANDIDATE_ROOTS includes {root}, which is (inside) a served skills root; a "
                    "candidate folder must never be served: use a folder outside SKILLS_DIRS"
                )

    # -- state -------------------------------------------------------------------------------

    def seen(self) -> dict[str, dict[str, Any]]:
        """Each origin Ingot has read: its revision (or git tree), change id and outcome."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("%s is unreadable (%s); every candidate will be read again", self.path, exc)
            return {}
        return dict(data.get("seen", {})) if data.get("schema_version") == SCHEMA_VERSION else {}

    def _remember(self, key: str, record: Mapping[str, Any] | None) -> None:
        with self.control.writing():  # recovery first, as before every write
            seen = self.seen()
            if record is None:
                seen.pop(key, None)
            else:
                seen[key] = dict(record)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            data = {"schema_version": SCHEMA_VERSION, "seen": seen}
            write_atomic(self.path, json.dumps(data, indent=1, sort_keys=True).encode())

    # -- scanning ----------------------------------------------------------------------------

    def scan(self) -> list[InboxEvent]:
        events: list[InboxEvent] = []
        seen = self.seen()
        present: set[str] = set()
        for root in self.candidate_roots:
            for folder in sorted(root.iterdir()) if root.is_dir() else []:
                if folder.name.startswith(".") or not folder.is_dir() or folder.is_symlink():
                    continue
                key = str(folder)
                present.add(key)
                if self.clock() - newest_mtime(folder) < self.settle_s:
                    continue  # still being written
                event = self._folder(folder, seen.get(key))
                if event is not None:
                    events.append(event)
        if self.branch:
            for root in self.control.roots:
                events += self._git(root, seen, present)
        for key, record in seen.items():
            if key not in present and self._owned(key):
                events += self._gone(key, record)
        return events

    def _owned(self, key: str) -> bool:
        """Whether this inbox's configuration covers `key` (a removed CANDIDATE_ROOT's entries are
        left alone rather than withdrawn)."""
        if key.startswith("git:"):
            return bool(self.branch)
        return any(Path(key).parent == root for root in self.candidate_roots)

    def _folder(self, folder: Path, before: Mapping[str, Any] | None) -> InboxEvent | None:
        name, key = folder.name, str(folder)
        if not NAME_PATTERN.match(name):
            why = f"{name!r} is not a skill name (lowercase letters, digits, single hyphens)"
            return self._refused(key, name, key, None, why, before)
        try:
            files, description = read_candidate(folder, name, self.control, new=self._new(name))
        except CandidateRefused as exc:
            return self._refused(key, name, key, None, str(exc), before)
        return self._candidate(key, name, "inbox", key, files, description, before)

    def _git(self, root: Path, seen: Mapping[str, Mapping[str, Any]], present: set[str]) -> list[InboxEvent]:
        repo = GitRepo.of(root)
        if repo is None or self.branch is None:
            return []
        events = []
        rel_root = repo.rel(root)
        try:
            touched = repo.touched(self.branch, rel_root)
        except GitError as exc:
            log.warning("inbox: cannot read branch %s in %s: %s", self.branch, repo.top, exc)
            return []
        for skill, sha in touched.items():
            key = f"git:{root}:{skill}"
            rel_path = f"{rel_root}/{skill}" if rel_root else skill
            tree = repo.tree(sha, rel_path)
            if tree is None:
                continue  # deleted on the branch: withdrawn below, like a deleted folder
            present.add(key)
            before = seen.get(key)
            if before is not None and before.get("tree") == tree:
                continue
            origin = f"git:{sha}"
            if not NAME_PATTERN.match(skill):
                why = f"{skill!r} is not a skill name"
                events.append(self._refused(key, skill, origin, tree, why, before))
                continue
            with tempfile.TemporaryDirectory(prefix="ingot-git-candidate-") as scratch:
                try:
                    folder = repo.export(sha, rel_path, Path(scratch), self.control.limits)
                    files, description = read_candidate(folder, skill, self.control, new=self._new(skill))
                except (GitError, CandidateRefused) as exc:
                    events.append(self._refused(key, skill, origin, tree, str(exc), before))
                    continue
            event = self._candidate(key, skill, origin, origin, files, description, before, tree=tree)
            if event is not None:
                events.append(event)
        return events

    def _new(self, skill: str) -> bool:
        """A candidate for a skill that is not live is a create (an inbox may hold new skills)."""
        return self.control.live_revision(skill) is None

    def _candidate(
        self,
        key: str,
        skill: str,
        source: str,
        origin: str,
        files: Mapping[str, bytes],
        description: str,
        before: Mapping[str, Any] | None,
        tree: str | None = None,
    ) -> InboxEvent | None:
        revision = tree_revision(files)
        if before is not None and before.get("revision") == revision:
            return None  # this revision was handled already (queued, refused or the same as live)
        record = {"skill": skill, "revision": revision, "tree": tree, "change_id": None}
        if self.control.live_revision(skill) == revision:
            self._remember(key, {**record, "did": "same as live"})
            why = f"{revision[:12]} is already live; nothing to review"
            return InboxEvent(skill, origin, "same as live", why)
        pending = self.control.queue.get(skill)
        if pending is not None and pending.candidate_revision == revision:
            self._remember(key, {**record, "did": "queued", "change_id": pending.id})
            return None  # queued by an earlier scan that was cut short, or by another process
        try:
            similarity = self.similar_to(skill, description)
            proposed = admit(self.control, skill, files, source, similarity, f"written to {origin}")
        except CandidateRefused as exc:
            return self._refused(key, skill, origin, tree, str(exc), before, revision)
        except IngotError as exc:  # the lock was busy, a disk was full: try again next scan
            log.warning("inbox: could not queue %s from %s: %s", skill, origin, exc)
            return None
        change = proposed.change
        did = "withheld" if proposed.withheld else "queued"
        self._remember(key, {**record, "did": did, "change_id": change.id})
        if did == "queued" and self.queued is not None:
            self.queued(skill, change.id)
        detail = proposed.withheld or f"{change.kind} {change.id}; `ingot evaluate {skill}` measures it"
        return InboxEvent(skill, origin, did, detail, change.id)

    def _refused(
        self,
        key: str,
        skill: str,
        origin: str,
        tree: str | None,
        why: str,
        before: Mapping[str, Any] | None,
        revision: str | None = None,
    ) -> InboxEvent | None:
        if before is not None and before.get("did") == "refused" and before.get("why") == why:
            return None  # reported once; fixed candidates have a new revision and are read again
        self._remember(
            key,
            {"skill": skill, "revision": revision, "tree": tree, "change_id": None}
            | {"did": "refused", "why": why},
        )
        return InboxEvent(skill, origin, "refused", why)

    def _gone(self, key: str, record: Mapping[str, Any]) -> list[InboxEvent]:
        """The candidate was deleted: withdraw its change if that is still the one pending, and
        only then forget the candidate (a kill in between withdraws it again next scan, a no-op;
        the other order would leave the change pending with nothing left to withdraw it)."""
        skill, change_id = str(record.get("skill")), record.get("change_id")
        withdrawn = False
        if change_id:
            try:
                withdrawn = self.control.withdraw(skill, str(change_id), "inbox", "its candidate was deleted")
            except (OSError, IngotError) as exc:
                log.warning("inbox: could not withdraw %s %s (next scan retries): %s", skill, change_id, exc)
                return []
        self._remember(key, None)
        origin = key if not key.startswith("git:") else f"git branch {self.branch}"
        if not withdrawn:
            return []
        return [InboxEvent(skill, origin, "withdrawn", "its candidate was deleted", str(change_id))]
