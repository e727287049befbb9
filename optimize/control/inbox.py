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

Exactly once: whether a candidate was proposed is read from the audit chain, whose `propose`
line names the candidate's origin, and `propose` checks it again under the lock after recovery
(inbox_state.py, proposals.py). So a pass killed at any write, or run by two processes at once,
queues each revision once; a refused or same-as-live candidate is reported once (`<home>/inbox.json`)
and checked again each pass; a restart loses nothing. A candidate identical to what is live
queues nothing.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingot.errors import IngotError
from mcp_server.library import Similarity
from mcp_server.registry import NAME_PATTERN
from optimize.control.changes import ChangeControl
from optimize.control.gitrepo import GitError, GitRepo
from optimize.control.inbox_state import InboxState, Seen
from optimize.control.promote import tree_revision
from optimize.control.proposals import AlreadyProposed
from optimize.control.quarantine import CandidateRefused, admit, read_candidate

log = logging.getLogger(__name__)
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
        self.state = InboxState(control.runs_dir, control.audit)
        self.path = self.state.path
        served = {Path(os.path.realpath(r)) for r in control.roots}
        for root in self.candidate_roots:
            if root in served or any(root.is_relative_to(s) for s in served):
                raise IngotError(
                    f"CANDIDATE_ROOTS includes {root}, which is (inside) a served skills root; a "
                    "candidate folder must never be served: use a folder outside SKILLS_DIRS"
                )

    # -- state -------------------------------------------------------------------------------

    def seen(self) -> dict[str, dict[str, Any]]:
        """Each origin Ingot has read: its revision (or git tree), change id and outcome (from the
        chain where it proposed one)."""
        return self.state.load().listing()

    def _remember(self, key: str, record: Mapping[str, Any] | None) -> None:
        """Record a reported refusal or same-as-live outcome (None: forget the origin). Losing it
        to a kill costs one repeated report, never a proposal."""
        with self.control.writing():  # recovery first, as before every write
            self.state.put(key, record)

    # -- scanning ----------------------------------------------------------------------------

    def scan(self) -> list[InboxEvent]:
        """One pass: settle what a killed write left, read what the chain says was proposed (a
        seen-list that disagrees is refused), then queue, report or withdraw each candidate."""
        self.control.recover()
        seen = self.state.load()
        events: list[InboxEvent] = []
        present: set[str] = set()
        for root in self.candidate_roots:
            for folder in sorted(root.iterdir()) if root.is_dir() else []:
                if folder.name.startswith(".") or not folder.is_dir() or folder.is_symlink():
                    continue
                key = str(folder)
                present.add(key)
                if self.clock() - newest_mtime(folder) < self.settle_s:
                    continue  # still being written
                event = self._folder(folder, seen)
                if event is not None:
                    events.append(event)
        if self.branch:
            for root in self.control.roots:
                events += self._git(root, seen, present)
        events += self._gone(seen, present)
        return events

    def _owned(self, key: str) -> bool:
        """Whether this inbox's configuration covers `key` (a removed CANDIDATE_ROOT's entries are
        left alone rather than withdrawn)."""
        if key.startswith("git:"):
            return bool(self.branch)
        return any(Path(key).parent == root for root in self.candidate_roots)

    def _folder(self, folder: Path, seen: Seen) -> InboxEvent | None:
        name, key = folder.name, str(folder)
        if not NAME_PATTERN.match(name):
            why = f"{name!r} is not a skill name (lowercase letters, digits, single hyphens)"
            return self._refused(seen, key, name, key, None, why)
        try:
            files, description = read_candidate(folder, name, self.control, new=self._new(name))
        except CandidateRefused as exc:
            return self._refused(seen, key, name, key, None, str(exc))
        return self._candidate(seen, key, name, "inbox", key, files, description)

    def _git(self, root: Path, seen: Seen, present: set[str]) -> list[InboxEvent]:
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
            latest = seen.latest(key)
            if latest is not None and latest.tree == tree:
                continue  # the chain's line for this origin was read from this very tree
            origin = f"git:{sha}"
            if not NAME_PATTERN.match(skill):
                refused = self._refused(seen, key, skill, origin, tree, f"{skill!r} is not a skill name")
                events += [refused] if refused else []
                continue
            with tempfile.TemporaryDirectory(prefix="ingot-git-candidate-") as scratch:
                try:
                    folder = repo.export(sha, rel_path, Path(scratch), self.control.limits)
                    files, description = read_candidate(folder, skill, self.control, new=self._new(skill))
                except (GitError, CandidateRefused) as exc:
                    refused = self._refused(seen, key, skill, origin, tree, str(exc))
                    events += [refused] if refused else []
                    continue
            event = self._candidate(seen, key, skill, origin, origin, files, description, tree=tree)
            if event is not None:
                events.append(event)
        return events

    def _new(self, skill: str) -> bool:
        """A candidate for a skill that is not live is a create (an inbox may hold new skills)."""
        return self.control.live_revision(skill) is None

    def _candidate(
        self,
        seen: Seen,
        key: str,
        skill: str,
        source: str,
        origin: str,
        files: Mapping[str, bytes],
        description: str,
        tree: str | None = None,
    ) -> InboxEvent | None:
        revision = tree_revision(files)
        latest = seen.latest(key)
        if latest is not None and latest.revision == revision:
            return None  # the chain holds its propose line: queued (or withheld) once, never again
        after = {"after": latest.seq if latest else 0}
        record = {"skill": skill, "revision": revision, "tree": tree, "change_id": None} | after
        if self.control.live_revision(skill) == revision:
            report = seen.reports.get(key) or {}
            if (report.get("did"), report.get("revision")) == ("same as live", revision):
                return None  # reported already (and checked again just now)
            self._remember(key, {**record, "did": "same as live"})
            why = f"{revision[:12]} is already live; nothing to review"
            return InboxEvent(skill, origin, "same as live", why)
        pending = self.control.queue.get(skill)
        if pending is not None and pending.candidate_revision == revision:
            return None  # these very bytes wait for review already, from another proposer
        try:
            similarity = self.similar_to(skill, description)
            proposed = admit(
                self.control,
                skill,
                files,
                source,
                similarity,
                f"written to {origin}",
                origin=key,
                origin_tree=tree,
            )
        except AlreadyProposed:
            return None  # another pass (another process) proposed it since this one read the chain
        except CandidateRefused as exc:
            return self._refused(seen, key, skill, origin, tree, str(exc), revision)
        except IngotError as exc:  # the lock was busy, a disk was full: try again next scan
            log.warning("inbox: could not queue %s from %s: %s", skill, origin, exc)
            return None
        change = proposed.change
        did = "withheld" if proposed.withheld else "queued"
        if did == "queued" and self.queued is not None:
            self.queued(skill, change.id)
        detail = proposed.withheld or f"{change.kind} {change.id}; `ingot evaluate {skill}` measures it"
        return InboxEvent(skill, origin, did, detail, change.id)

    def _refused(
        self,
        seen: Seen,
        key: str,
        skill: str,
        origin: str,
        tree: str | None,
        why: str,
        revision: str | None = None,
    ) -> InboxEvent | None:
        report = seen.reports.get(key) or {}
        if (report.get("did"), report.get("why")) == ("refused", why):
            return None  # reported once; it was checked again and still fails the same way
        latest = seen.latest(key)
        self._remember(
            key,
            {"skill": skill, "revision": revision, "tree": tree, "change_id": None}
            | {"did": "refused", "why": why, "after": latest.seq if latest else 0},
        )
        return InboxEvent(skill, origin, "refused", why)

    def _gone(self, seen: Seen, present: set[str]) -> list[InboxEvent]:
        """Candidates deleted since they were read: withdraw the pending change one of them
        proposed (by the chain), then forget what was reported for it. A kill in between
        withdraws nothing more next pass (the change is no longer pending) and forgets it then."""
        events: list[InboxEvent] = []
        known = {*seen.proposals, *seen.filed}
        gone = [k for k in sorted(known) if k not in present and self._owned(k)]
        if not gone:
            return events
        waiting = {c.id: c for c in self.control.queue.scan()[0]}
        for key in gone:
            ids = {p.change_id for p in seen.proposals.get(key, ())}
            for change_id in sorted(ids & set(waiting)):
                skill = waiting[change_id].skill
                try:
                    withdrawn = self.control.withdraw(skill, change_id, "inbox", "its candidate was deleted")
                except (OSError, IngotError) as exc:
                    log.warning(
                        "inbox: could not withdraw %s %s (next scan retries): %s", skill, change_id, exc
                    )
                    continue
                if withdrawn:
                    origin = key if not key.startswith("git:") else f"git branch {self.branch}"
                    events.append(
                        InboxEvent(skill, origin, "withdrawn", "its candidate was deleted", change_id)
                    )
            if key in seen.filed:
                self._remember(key, None)
        return events
