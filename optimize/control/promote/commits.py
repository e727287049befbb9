"""Each finished switch as one git commit, when the skills root is in a git work tree (GIT_HISTORY).

A commit is made after the audit outcome, of exactly that skill's folder, on the checked-out
branch; it goes through gitrepo.py and never changes a skill folder. Its message ends in trailers
that describe it completely (signed_history.py reads them back): action, skill, root, revision
(the folder's content digest), change, kind, passport state with any accepted or overridden
cells, approver, evidence digest, and the audit line with its hash and MAC. With a signing key
the commit is signed and its evidence bundle is attached as a note, so a replica or an auditor
holding only the public key can check it all offline. A git failure never undoes a promotion: it
is logged, and `reconcile` (run by recovery) commits a switch the chain records as done but git
does not, attaches a note a kill left off, and re-syncs the user's index where a commit killed
after moving HEAD left the old files staged (their next `git commit` would otherwise revert the
skill). Pushes run in the background and are retried until they land (pushes.py).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

from ingot.errors import SkillInvalid
from optimize.control.approved import FOLDER_SWITCHES
from optimize.control.audit import AuditEntry
from optimize.control.gitrepo import NOTES_REF, TRAILER, GitError, GitHistory, GitRepo
from optimize.control.promote.folders import StepHook
from optimize.control.promote.snapshots import ABSENT
from optimize.control.pushes import Pusher, read_state

log = logging.getLogger(__name__)


def commit_message(entry: AuditEntry, reconciled: bool = False, root: str = ".") -> str:
    """A switch's commit message: what happened in one line, then trailers that tie the commit to
    its audit line and evidence (`git log --grep=Ingot-Change: chg-...` finds a change)."""
    action, skill = entry.get("action"), entry.get("skill")
    before, after = entry.get("from_revision"), entry.get("to_revision")
    change = f" {entry.get('change_id')}" if entry.get("change_id") else ""
    subject = f"ingot: {action} {skill}{change} ({str(before or ABSENT)[:12]} -> {str(after or ABSENT)[:12]})"
    body = [str(entry.get("reason"))] if entry.get("reason") else []
    if reconciled:
        body.append("Committed on recovery: the process was stopped between the switch and this commit.")
    trailers = [
        f"Ingot-Action: {action}",
        f"Ingot-Skill: {skill}",
        f"Ingot-Root: {root}",
        f"Ingot-Revision: {after or ABSENT}",
        f"Ingot-From: {before or ABSENT}",
    ]
    if entry.get("change_id"):
        trailers.append(f"Ingot-Change: {entry.get('change_id')}")
    if entry.get("kind"):
        trailers.append(f"Ingot-Kind: {entry.get('kind')}")
    if entry.get("passport"):
        trailers.append(f"Ingot-Passport: {passport_trailer(entry)}")
    trailers.append(f"Ingot-Approver: {entry.get('actor')}")
    if entry.get("evidence_digest"):
        trailers.append(f"Ingot-Evidence: {entry.get('evidence_digest')}")
    trailers.append(f"{TRAILER}: {entry.seq} {entry.hash} {entry.mac}".rstrip())
    return "\n\n".join([subject, *body, "\n".join(trailers)]) + "\n"


def passport_trailer(entry: AuditEntry) -> str:
    """`ready`, or the state with the cells a person accepted as missing or overrode."""
    parts = [str(entry.get("passport"))]
    if entry.get("accepted_missing"):
        parts.append(f"accepted missing: {', '.join(entry.get('accepted_missing'))}")
    if entry.get("overridden"):
        parts.append(f"overridden: {', '.join(entry.get('overridden'))}")
    return "; ".join(parts)


def evidence_bytes(home: Path, skill: str, digest: str) -> bytes | None:
    """The evidence bundle of `skill` whose SHA-256 is `digest` (evidence.py), or None."""
    for path in sorted((home / "evidence" / skill).glob("*/evidence.json")):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if hashlib.sha256(data).hexdigest() == digest:
            return data
    return None


def _rel(repo: GitRepo, root: Path, skill: str) -> str:
    rel_root = repo.rel(root)
    return f"{rel_root}/{skill}" if rel_root else skill


def _author(entry: AuditEntry) -> str:
    return f"{entry.get('actor') or 'ingot'} (via Ingot)"


class GitCommits:
    """Commits (and pushes) the switches of one Promoter, per skills root."""

    def __init__(self, git: GitHistory, on_step: StepHook, home: Path | None = None) -> None:
        self.git = git
        self.home = home  # the state home: evidence bundles to attach, the push record
        self._step = on_step
        self._repos: dict[Path, GitRepo | None] = {}
        self._pushers: dict[Path, Pusher] = {}

    def _repo(self, root: Path) -> GitRepo | None:
        if not self.git.enabled:
            return None
        if root not in self._repos:
            self._repos[root] = GitRepo.of(root, self.git.signing_key)
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
            message = commit_message(entry, reconciled, repo.rel(root) or ".")
            commit = repo.commit_paths([_rel(repo, root, skill)], message, _author(entry))
            if commit is not None:
                self._step("git: note")
                self._attach(repo, commit, entry)
        except GitError as exc:
            log.warning("the %s of %s is live but not committed to git: %s", entry.get("action"), skill, exc)
            return None
        if commit is not None:
            self.push(root)
        return commit

    def _attach(self, repo: GitRepo, commit: str, entry: AuditEntry) -> bool:
        """The evidence bundle the switch rests on, as the commit's note (if it has one)."""
        digest = entry.get("evidence_digest")
        if not digest or self.home is None:
            return False
        data = evidence_bytes(self.home, str(entry.get("skill")), str(digest))
        if data is None:
            log.warning(
                "the evidence bundle %s of %s is not in %s: commit %s has no note",
                str(digest)[:12],
                entry.get("skill"),
                self.home,
                commit[:12],
            )
            return False
        repo.add_note(commit, data)
        return True

    def push(self, root: Path) -> Pusher | None:
        """Push `root`'s repository to GIT_PUSH_REMOTE in the background (pushes.py)."""
        repo = self._repo(root)
        if repo is None or not self.git.push_remote or self.home is None:
            return None
        pusher = self._pushers.get(repo.top)
        if pusher is None:
            pusher = self._pushers[repo.top] = Pusher(self.home, repo, self.git.push_remote)
        pusher.request()
        return pusher

    def retry_unpushed(self, roots: tuple[Path, ...]) -> None:
        """Push the repository of each of `roots` whose HEAD the push record does not show
        delivered (a commit made by a process that exited before its push landed); `ingot serve`
        runs this at its background tick. A push already under way here keeps its own retries."""
        if not self.git.push_remote or self.home is None:
            return
        state = read_state(self.home, self.git.push_remote)
        for root in roots:
            repo = self._repo(root)
            if repo is None or repo.head() is None or (state is not None and state.pushed == repo.head()):
                continue
            pusher = self._pushers.get(repo.top)
            if pusher is None or not pusher.busy:
                self.push(root)

    def close(self, timeout_s: float) -> None:
        """Finish the pushes under way and start no more."""
        for pusher in self._pushers.values():
            pusher.close(timeout_s)

    def wait_for_pushes(self, timeout_s: float) -> None:
        """Give the pushes in flight up to `timeout_s` (a CLI process is about to exit)."""
        for pusher in self._pushers.values():
            pusher.wait(timeout_s)

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
        for root in sorted(by_root):
            notes += self._attach_missing(root, entries)
            self.push(root)  # anything an exited process committed but could not push
        return notes

    def _attach_missing(self, root: Path, entries: list[AuditEntry]) -> list[str]:
        """Attach the evidence note a kill between commit and note left off, to each of the
        recent Ingot commits that names evidence and has none."""
        repo = self._repo(root)
        if repo is None or self.home is None or repo.head() is None:
            return []
        by_seq = {e.seq: e for e in entries}
        try:
            noted = {
                line.split()[1]
                for line in repo.text("notes", f"--ref={NOTES_REF}", "list").splitlines()
                if " " in line
            }
            recent = repo.text(
                "log",
                "-n",
                "50",
                "--grep=^Ingot-Evidence: ",
                f"--format=%H %(trailers:key={TRAILER},valueonly,separator=%x20)",
                "HEAD",
                "--",
                repo.rel(root) or ".",
            )
        except GitError as exc:
            log.warning("cannot read the notes of %s: %s", repo.top, exc)
            return []
        done = []
        for line in recent.splitlines():
            commit, _, audit = line.partition(" ")
            seq = audit.split()[0] if audit.split() else ""
            entry = by_seq.get(int(seq)) if seq.isdigit() else None
            if commit in noted or entry is None:
                continue
            try:
                if self._attach(repo, commit, entry):
                    done.append(
                        f"{entry.get('skill')}: evidence attached to {commit[:12]} after an interruption"
                    )
            except GitError as exc:
                log.warning("cannot attach evidence to %s: %s", commit[:12], exc)
        return done

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
