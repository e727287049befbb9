"""Each finished switch as one git commit, when the skills root is in a git work tree (GIT_HISTORY).

A commit is made after the audit outcome, of exactly that skill's folder, on the checked-out
branch; it goes through gitrepo.py and never changes a skill folder. A git failure never undoes
a promotion: it is logged, and `reconcile` (run by recovery) commits a switch the chain records
as done but git does not, and re-syncs the user's index where a commit killed after moving HEAD
left the old files staged (their next `git commit` would otherwise revert the skill).
Pushes run in the background: a slow remote never holds the lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from ingot.errors import SkillInvalid
from optimize.control.approved import FOLDER_SWITCHES
from optimize.control.audit import AuditEntry
from optimize.control.gitrepo import GitError, GitHistory, GitRepo
from optimize.control.promote.folders import StepHook
from optimize.control.promote.snapshots import ABSENT

log = logging.getLogger(__name__)


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


class GitCommits:
    """Commits (and pushes) the switches of one Promoter, per skills root."""

    def __init__(self, git: GitHistory, on_step: StepHook) -> None:
        self.git = git
        self._step = on_step
        self._repos: dict[Path, GitRepo | None] = {}
        self.pushes: list[threading.Thread] = []  # background pushes (tests join them)

    def _repo(self, root: Path) -> GitRepo | None:
        if not self.git.enabled:
            return None
        if root not in self._repos:
            self._repos[root] = GitRepo.of(root)
        return self._repos[root]

    def commit(self, root: Path, entry: AuditEntry, reconciled: bool = False) -> str | None:
        """In a git work tree, record a finished switch as one commit of exactly that skill's
        folder on the checked-out branch. It runs after the outcome line: a kill before it
        leaves the folder ahead of HEAD, and recovery commits it (`reconcile`). A git
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

    def reconcile(
        self, entries: list[AuditEntry], live_revision: Callable[[Path, str], str | None]
    ) -> list[str]:
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
                    live = live_revision(root, skill)
                except SkillInvalid:
                    continue
                if live == entry.get("to_revision") and self.commit(root, entry, reconciled=True):
                    notes.append(f"{skill}: committed to git after an interruption (audit line {entry.seq})")
            notes += self._sync_index(repo, [_rel(repo, root, str(e.get("skill"))) for e in switched])
        return notes

    def _sync_index(self, repo: GitRepo, rel_paths: list[str]) -> list[str]:
        """Re-sync the user's index where a commit killed between update-ref and the index reset
        left the old files staged (the work tree already matches HEAD there)."""
        try:
            stale = repo.stale_index(rel_paths)
            if stale:
                repo.sync_index(stale)
        except GitError as exc:
            log.warning("cannot re-sync the git index of %s: %s", repo.top, exc)
            return []
        return [
            f"git index re-synced with HEAD for {len(stale)} file(s) an interrupted commit left staged"
        ] * bool(stale)
