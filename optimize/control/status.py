"""Status and drift: what is served, what Ingot last put live, what waits for review.

Read-only. Also reports whether the execution sandbox can run here (`sandbox_status`).
Drift is a skill whose revision on disk is not the one Ingot's audit chain last put
live (edited by hand, deleted, or broken); a skill Ingot removed (rolled back to "absent") has
drifted only if it is back on disk. The report keeps working over damaged state: an
unreadable audit chain leaves drift unknown (the chain's own verification says where it
breaks), and an unreadable pending record is listed under `invalid` instead of failing. Pending
and archived records the chain does not vouch for are listed, never believed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mcp_server.registry import Limits, Registry, Skill
from optimize.control.approved import FOLDER_SWITCHES
from optimize.control.audit import AuditError, AuditLog
from optimize.control.audit_verify import Verification
from optimize.control.decisions import disagreements, fates
from optimize.control.gitrepo import GitError, GitRepo
from optimize.control.pending import PendingQueue
from optimize.control.promote import layout
from optimize.control.pushes import PushState, read_state
from optimize.measure.sandbox import Sandbox


@dataclass(frozen=True)
class SkillStatus:
    name: str
    root: Path
    live_revision: str | None  # None: missing or invalid on disk
    audited_revision: str | None  # last revision Ingot itself put live; None if never
    pending: str | None  # id of the pending change, if any
    recovery_pending: bool = False  # an audited intent has no outcome yet (a killed promotion)
    removed: bool = False  # Ingot's last completed change to it removed it (rolled back to absent)
    # At its audited revision by bytes, yet the folder differs from that revision's layout
    # (promote/layout.py: modes, hidden entries, empty folders, links): what differs.
    layout: tuple[str, ...] = ()

    @property
    def drifted(self) -> bool:
        """Changed behind Ingot's back. An interrupted change is not drift: recovery settles it
        from what is live, and until then either revision may be the truth."""
        if self.recovery_pending:
            return False
        if self.removed:
            return self.live_revision is not None
        return self.audited_revision is not None and self.audited_revision != self.live_revision

    @property
    def laid_out_otherwise(self) -> bool:
        """Its bytes are the revision Ingot put live, its folder is not that revision's layout:
        MCP serves the same bytes, a harness reading the folder sees other modes or entries."""
        return bool(self.layout) and not self.drifted and not self.recovery_pending


@dataclass(frozen=True)
class GitState:
    """A skills root in a git work tree, compared with the audit chain."""

    head: str | None  # the checked-out commit (None: no commit yet)
    recorded_seq: int | None  # the audit line the newest Ingot commit on HEAD records
    audit_seq: int | None  # the chain's newest finished switch of a skill in this root
    foreign: int  # commits after Ingot's newest that touch the root without Ingot
    problem: str | None = None  # git could not be read
    stale_index: tuple[str, ...] = ()  # files an interrupted commit left staged at their old bytes
    push: PushState | None = None  # the last push to GIT_PUSH_REMOTE (pushes.py), if one was tried
    unpushed: int = 0  # commits on HEAD after the last one a push delivered
    remote: str | None = None  # GIT_PUSH_REMOTE

    @property
    def push_failed(self) -> bool:
        """Commits wait and the last attempt to push them failed (pushes.py retries it)."""
        return self.unpushed > 0 and self.push is not None and self.push.error is not None

    @property
    def in_step(self) -> bool:
        return (
            self.problem is None
            and self.recorded_seq == self.audit_seq
            and self.foreign == 0
            and not self.stale_index
        )


@dataclass(frozen=True)
class RootStatus:
    root: Path
    live_edits: str  # "serve" | "quarantine"
    git: GitState | None  # None: not a git work tree, or GIT_HISTORY is off


@dataclass(frozen=True)
class Status:
    skills: tuple[SkillStatus, ...]
    invalid: tuple[str, ...]
    audit: Verification
    pending: int
    roots: tuple[RootStatus, ...] = ()
    # Pending records the chain does not hold (no `propose` / `evidence` line with their id and
    # evidence digest): hand-made, or edited since; never approvable. Also staged records a
    # killed proposal left (recovery finishes or drops them).
    unaudited: tuple[str, ...] = ()
    # Archived records whose status the chain contradicts (decisions.py): ignored, reported.
    archive_disagrees: tuple[str, ...] = ()

    @property
    def drifted(self) -> tuple[SkillStatus, ...]:
        return tuple(s for s in self.skills if s.drifted)

    @property
    def laid_out_otherwise(self) -> tuple[SkillStatus, ...]:
        return tuple(s for s in self.skills if s.laid_out_otherwise)


def _audited(audit: AuditLog) -> tuple[dict[str, str | None], set[str]]:
    """Each skill's revision as of Ingot's last completed change to it (None: it removed the
    skill), and the skills with an intent that has no outcome yet."""
    try:
        entries = audit.entries()
    except AuditError:
        return {}, set()
    settled = {entry.get("intent_seq") for entry in entries if entry.get("outcome")}
    interrupted = {
        entry.get("skill")
        for entry in entries
        if str(entry.get("action", "")).endswith("-intent") and entry.seq not in settled
    }
    audited = {
        entry.get("skill"): entry.get("to_revision")
        for entry in entries
        if str(entry.get("outcome", "")).startswith("done") and entry.get("skill")
    }
    return audited, interrupted


def report(
    roots: tuple[Path, ...],
    limits: Limits,
    audit: AuditLog,
    queue: PendingQueue,
    root_of: Callable[[str], Path | None],
    live_edits: str = "serve",
    git: bool = False,
    push_remote: str | None = None,
) -> Status:
    """Re-read every root (so this costs a full scan: ~170 ms at 1k skills) and compare."""
    registry = Registry(roots, limits)
    registry.reload()
    audited, interrupted = _audited(audit)
    changes, unreadable = queue.scan()
    pending = {c.skill: c.id for c in changes}
    served = registry.skills()
    removed = {name for name, revision in audited.items() if revision is None}
    skills = [
        SkillStatus(
            s.name,
            s.root,
            s.revision,
            audited.get(s.name),
            pending.get(s.name),
            s.name in interrupted,
            s.name in removed,
            _layout(s) if s.revision == audited.get(s.name) and s.name not in interrupted else (),
        )
        for s in served.values()
    ]
    # A skill Ingot put live that is now missing or unreadable has drifted; one it removed has not.
    skills += [
        SkillStatus(
            name,
            root_of(name) or roots[0],
            None,
            revision,
            pending.get(name),
            name in interrupted,
            name in removed,
        )
        for name, revision in audited.items()
        if name not in served
    ]
    invalid = tuple(f"{p.folder}: {p.reason}" for p in registry.problems()) + tuple(unreadable)
    states = tuple(
        RootStatus(root, live_edits, _git_state(root, audit, push_remote) if git else None) for root in roots
    )
    return Status(
        tuple(sorted(skills, key=lambda s: s.name)),
        invalid,
        audit.verify(),
        len(pending),
        states,
        _unaudited(audit, changes, queue),
        _archive_disagrees(audit, queue),
    )


def _layout(skill: Skill) -> tuple[str, ...]:
    """What `skill`'s folder holds besides its revision's layout (layout.py), its bytes being the
    revision's: each file's expected mode comes from its first bytes. At most five phrases."""
    expected = {}
    for file in skill.files:
        try:
            with open(skill.folder / file.path, "rb") as handle:
                expected[file.path] = layout.file_mode(handle.read(4))
        except OSError:
            pass  # `differences` reports it unreadable or missing
    return tuple(layout.differences(skill.folder, expected, limit=5))


def _archive_disagrees(audit: AuditLog, queue: PendingQueue) -> tuple[str, ...]:
    """Each archived record the chain contradicts (none known while the chain is unreadable)."""
    try:
        known = fates(audit.entries())
    except AuditError:
        return ()
    return tuple(disagreements(queue, known))


def _unaudited(audit: AuditLog, changes: list, queue: PendingQueue) -> tuple[str, ...]:
    """Each pending record the chain does not vouch for, and each staged one, with why."""
    try:
        lines = {
            (e.get("change_id"), e.get("evidence_digest"))
            for e in audit.entries()
            if e.get("action") in ("propose", "evidence")
        }
    except AuditError:
        return ()
    found = [
        f"{c.skill} {c.id}: no audit line holds this record (hand-made or edited): reject it"
        for c in changes
        if (c.id, c.evidence_digest) not in lines
    ]
    found += [
        f"{change.skill if change else path.name}: a proposal was interrupted (staged); the next change "
        "command finishes or drops it"
        for path, change in queue.staged()
    ]
    return tuple(found)


def _git_state(root: Path, audit: AuditLog, push_remote: str | None = None) -> GitState | None:
    """HEAD against the chain: which audit line Ingot's newest commit records, which is the
    chain's newest switch in this root, and how many commits touched the root since without it."""
    repo = GitRepo.of(root)
    if repo is None:
        return None
    try:
        entries = audit.entries()
    except AuditError:
        entries = []
    switched = [
        e
        for e in entries
        if e.get("action") in FOLDER_SWITCHES
        and str(e.get("outcome", "")).startswith("done")
        and e.get("root") == str(root)
    ]
    switches = [e.seq for e in switched]
    try:
        rel_root = repo.rel(root)
        newest = repo.last_ingot_commit(rel_root)
        foreign = len(repo.commits_since(newest.sha, rel_root)) if newest else 0
        skills = sorted({str(e.get("skill")) for e in switched})
        stale = repo.stale_index([f"{rel_root}/{s}" if rel_root else s for s in skills])
        push, unpushed = _push_state(repo, audit.path.parent, push_remote)
        return GitState(
            repo.head(),
            newest.audit_seq if newest else None,
            max(switches, default=None),
            foreign,
            stale_index=tuple(stale),
            push=push,
            unpushed=unpushed,
            remote=push_remote,
        )
    except GitError as exc:
        return GitState(None, None, max(switches, default=None), 0, str(exc))


def _push_state(repo: GitRepo, home: Path, remote: str | None) -> tuple[PushState | None, int]:
    """The push record for `remote` and how many commits on HEAD it has not delivered yet."""
    if not remote:
        return None, 0
    push, head = read_state(home, remote), repo.head()
    if head is None:
        return push, 0
    if push is None or push.pushed is None:
        return push, int(repo.text("rev-list", "--count", head) or 0)
    return push, int(repo.text("rev-list", "--count", f"{push.pushed}..{head}") or 0)


@dataclass(frozen=True)
class SandboxStatus:
    """Whether code from answers and skill scripts can run here, and how it would be confined."""

    mode: str  # "bubblewrap" | "docker" | "none"
    ready: bool
    detail: str  # what it runs with, or why it cannot run
    isolation: str  # what the mode isolates ("" when there is no sandbox)


def sandbox_status(mode: str, sandbox: Sandbox | None) -> SandboxStatus:
    """Probe the configured sandbox (starts one sandboxed process, or asks the Docker engine)."""
    if sandbox is None:
        return SandboxStatus(mode, False, "EXEC_SANDBOX=none", "")
    ready, detail = sandbox.diagnose()
    return SandboxStatus(mode, ready, detail, sandbox.isolation())
