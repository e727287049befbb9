"""Which revision of each skill is approved, read from the audit chain, and serving only those.

A skill's approved revision is the one Ingot last put (or found and adopted) in its live
folder: the `to_revision` of its latest promote / rollback / restore / adopt line. An intent
counts from the moment it is written (the switch on disk follows it, so a reload in between
must already accept the new revision); an intent that recovery settles as aborted gives the
approval back to what was approved before it (never to what a restore found). `None` means
"approved absent" (a skill Ingot removed).

With LIVE_EDITS=quarantine the served library is pinned through `Pinned` once protection has
started (the guard's `protect` line in the chain; `protected.json` only mirrors it, so deleting
the file protects nothing less): a skill whose folder
holds its approved revision is served from the folder; one edited behind Ingot's back is
served from the snapshot of its approved revision (`runs/revisions/<skill>/<revision>/`) until
the guard restores the folder; a folder that was never approved is not served at all.
Read-only: nothing here writes a skills root or the chain.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from ingot.errors import SkillInvalid
from mcp_server.registry import Limits, Skill, read_skill
from optimize.control.audit import AuditEntry, AuditError, AuditLog

log = logging.getLogger(__name__)
FOLDER_SWITCHES = ("promote", "create", "rollback", "restore")  # actions that change a live folder
SWITCHES = (*FOLDER_SWITCHES, "adopt")  # and those that approve what a folder holds
MARKER = "protected.json"  # in the state home: protection started (the baseline was adopted)
PROTECT = "protect"  # the audit action recording the same, which a deleted marker cannot undo


def approved_revisions(entries: Iterable[AuditEntry]) -> dict[str, str | None]:
    """Each skill the chain knows, with its approved revision (None: approved absent).

    An intent approves its `to_revision` from the moment it is written; an intent that recovery
    settles as aborted gives the approval back to whatever was approved just before it, never
    to its `from_revision`: a restore's `from_revision` is what the guard found in the folder
    (an agent's edit, a planted folder, nothing), which no one approved."""
    approved: dict[str, str | None] = {}
    before: dict[int, tuple[bool, str | None]] = {}  # intent seq -> (known, approved) before it
    for entry in entries:
        action, skill = str(entry.get("action", "")), entry.get("skill")
        if not skill or action.removesuffix("-intent") not in SWITCHES:
            continue
        outcome = str(entry.get("outcome", ""))
        if action.endswith("-intent"):
            before[entry.seq] = (skill in approved, approved.get(skill))
            approved[skill] = entry.get("to_revision")
        elif outcome.startswith("done"):
            approved[skill] = entry.get("to_revision")
        elif outcome.startswith("aborted"):
            known, revision = before.get(entry.get("intent_seq"), _unmatched(entry, approved))
            if known:
                approved[skill] = revision
            else:
                approved.pop(skill, None)
    return approved


def _unmatched(entry: AuditEntry, approved: Mapping[str, str | None]) -> tuple[bool, str | None]:
    """What an aborted outcome whose intent is not in the chain gives approval back to: a
    restore never approves what it found (the approval stands), anything else its from_revision."""
    skill = entry.get("skill")
    if str(entry.get("action")) == "restore":
        return skill in approved, approved.get(skill)
    return True, entry.get("from_revision")


class ApprovedRevisions:
    """`approved_revisions` of one chain, re-read only when the chain's file changes, and only
    from a chain that verifies: a line edited, forged or removed without the key (or a chain
    deleted whose claims remember it) approves nothing. While the chain does not verify, the
    approvals last verified stand and protection counts as started (fail closed): a process
    that never saw it verify serves no folder under quarantine."""

    def __init__(self, audit: AuditLog) -> None:
        self.audit = audit
        self._stamp: tuple[int, ...] | None = None
        self._approved: dict[str, str | None] = {}
        self._protected = False
        self._problem: str | None = None  # why the chain does not verify, or None
        self._ever_verified = False  # whether this process ever read a chain that verified

    def _stamp_now(self) -> tuple[int, ...]:
        """The chain file's identity and change time (ctime and inode: an edit that restores the
        size and mtime still moves them)."""
        try:
            info = os.stat(self.audit.path)
        except FileNotFoundError:
            return (0,)
        return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def current(self) -> Mapping[str, str | None]:
        stamp = self._stamp_now()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                state, entries = self.audit.verified_entries()
                problem = None if state.ok else f"line {state.bad_line}: {state.problem}"
            except AuditError as exc:
                problem, entries = str(exc), []
            if problem is not None:
                if problem != self._problem:
                    log.warning(
                        "the audit chain does not verify (%s): only approvals read before from a "
                        "chain that verified count%s; run `ingot audit verify`",
                        problem,
                        "" if self._ever_verified else " (none were, so no folder is approved)",
                    )
                self._problem, self._protected = problem, True
                return dict(self._approved)
            self._problem, self._ever_verified = None, True
            self._approved = approved_revisions(entries)
            self._protected = any(e.get("action") == PROTECT for e in entries)
        return dict(self._approved)

    def problem(self) -> str | None:
        """Why the chain does not verify (approvals are then those last verified), or None."""
        self.current()
        return self._problem

    def protected(self) -> bool:
        """Whether the chain records that protection started (the guard's `protect` line), or
        does not verify (fail closed)."""
        self.current()
        return self._protected


class Pinned:
    """A library filter: every served skill at its approved revision, or not served. Until
    protection has started (`marker`, written by the guard's baseline adoption), everything on
    disk is served: there is no baseline to hold it to yet."""

    def __init__(self, approved: ApprovedRevisions, revisions: Path, limits: Limits, marker: Path) -> None:
        self.approved, self.revisions, self.limits, self.marker = approved, revisions, limits, marker
        self._snapshots: dict[tuple[str, str], Skill] = {}
        self._told: set[tuple[str, str]] = set()

    def _tell(self, name: str, revision: str, message: str, *args: object) -> None:
        """Log once per skill and revision, not at every reload."""
        if (name, revision) not in self._told:
            self._told.add((name, revision))
            log.warning(message, *args)

    def __call__(self, skills: Mapping[str, Skill], roots: tuple[Path, ...]) -> dict[str, Skill]:
        if not self.marker.exists():
            if not self.approved.protected():
                return dict(skills)
            self._tell(
                MARKER,
                "missing",
                "%s is missing but the audit chain says protection started: serving approved "
                "revisions only (the guard writes it again)",
                self.marker,
            )
        approved, broken = self.approved.current(), self.approved.problem() is not None
        served: dict[str, Skill] = {}
        for name, skill in skills.items():
            revision = approved.get(name, "unapproved")
            if revision == skill.revision:
                served[name] = skill
            elif revision == "unapproved":
                if not broken:  # else the chain's warning already says why
                    self._tell(name, skill.revision, "not serving %s: its folder was never approved", name)
            elif revision is not None:
                pinned = self._snapshot(name, revision, skill.root)
                if pinned is not None:
                    served[name] = pinned
        for name, revision in approved.items():  # approved, but the folder was deleted or broken
            if name not in served and name not in skills and revision is not None:
                pinned = self._snapshot(name, revision, roots[0])
                if pinned is not None:
                    served[name] = pinned
        return served

    def _snapshot(self, name: str, revision: str, root: Path) -> Skill | None:
        key = (name, revision)
        if key not in self._snapshots:
            folder = self.revisions / name / revision
            try:
                skill = read_skill(folder.parent, folder, self.limits, name=name)
            except (SkillInvalid, OSError) as exc:
                self._tell(
                    name,
                    revision,
                    "not serving %s: its folder is not the approved revision %s, whose snapshot is "
                    "unreadable (%s); roll it back or approve what is there",
                    name,
                    revision[:12],
                    exc,
                )
                return None
            if skill.revision != revision:
                self._tell(
                    name, revision, "not serving %s: the snapshot of %s was edited", name, revision[:12]
                )
                return None
            self._snapshots[key] = skill
        return dataclasses.replace(self._snapshots[key], root=root)
