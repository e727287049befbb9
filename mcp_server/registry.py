"""Find the skills under one or more roots, validate them, and name each by its content.

A skill is a direct sub-folder of a root holding a `SKILL.md` (YAML frontmatter with `name` and
`description`, then a markdown body), per the Agent Skills spec. Its revision is the SHA-256 of
a canonical-JSON manifest of every file in the folder (relative path, sha256, size; the SEP-2640
manifest shape), so it changes iff a byte of a file changes and never depends on file order or
mtime. Symlinks that leave the folder, device files and files over the size cap are refused.
One broken skill is reported and skipped; it never breaks the others. Reads only: nothing here
writes a skills root (that is `optimize/control/promote/`'s job).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import frontmatter
import rfc8785
import yaml
from fastmcp.skills import SkillManifest

from ingot.errors import SkillInvalid
from mcp_server import skillspec
from mcp_server.skillfiles import Limits, read_folder  # Limits is part of this module's API too

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")  # skillspec's name rule, for other callers
MAX_NAME = skillspec.MAX_NAME
MAX_DESCRIPTION = skillspec.MAX_DESCRIPTION


@dataclass(frozen=True)
class SkillFile:
    """One file of a skill, as it appears in the manifest."""

    path: str  # POSIX, relative to the skill folder
    sha256: str
    size: int


@dataclass(frozen=True)
class Skill:
    """One valid skill at one revision, with its text held in memory."""

    name: str
    description: str
    body: str
    root: Path
    folder: Path
    revision: str
    files: tuple[SkillFile, ...]
    frontmatter: Mapping[str, Any]
    metadata: Mapping[str, Any]
    # What the spec would have written differently, served anyway (skillspec.notes).
    notes: tuple[str, ...] = ()
    # The SEP-2640 manifest hosts are given (validated when the folder was read; None for a
    # candidate built in memory).
    wire: SkillManifest | None = field(default=None, compare=False, repr=False)
    text_files: frozenset[str] = field(default=frozenset(), compare=False, repr=False)  # UTF-8 files

    @property
    def short_revision(self) -> str:
        return self.revision[:12]


@dataclass(frozen=True)
class Problem:
    """A skill folder that was skipped, and why."""

    folder: Path
    reason: str


@dataclass(frozen=True)
class ReloadReport:
    """What one reload changed."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    invalid: tuple[Problem, ...] = ()

    def counts(self) -> dict[str, int]:
        return {
            "added": len(self.added),
            "changed": len(self.changed),
            "removed": len(self.removed),
            "invalid": len(self.invalid),
        }


def manifest_revision(files: Iterable[SkillFile]) -> str:
    """SHA-256 over the canonical JSON of the sorted manifest: the skill's revision."""
    entries = sorted(
        ({"path": f.path, "sha256": f.sha256, "size": f.size} for f in files),
        key=lambda e: e["path"],
    )
    return hashlib.sha256(rfc8785.dumps({"files": entries})).hexdigest()


def parse_skill_md(text: str, folder_name: str) -> tuple[str, str, str, dict[str, Any]]:
    """Validate SKILL.md text against every rule (skillspec.py); return (name, description, body,
    frontmatter as plain JSON)."""
    meta, body = skillspec.load(text)
    name, description = skillspec.check(meta, body, folder_name)
    return name, description.strip(), body, meta


def declared_name(text: str) -> str | None:
    """The `name` a SKILL.md's frontmatter declares, whatever else is wrong with it (None when
    it declares none): for saying "this folder holds skill X, not Y" instead of "invalid"."""
    try:
        name = frontmatter.loads(text.lstrip("\ufeff"), handler=skillspec.StrictYAMLHandler()).metadata.get(
            "name"
        )
    except (SkillInvalid, yaml.YAMLError, ValueError):
        return None
    return name if isinstance(name, str) else None


def read_skill(root: Path, folder: Path, limits: Limits, name: str | None = None) -> Skill:
    """Read, hash and validate one skill folder, or raise `SkillInvalid` saying why.

    `name` is the name the skill must declare: its folder's name unless given (a staged or
    snapshotted copy lives in a folder named otherwise)."""
    return read_skill_files(root, folder, limits, name)[0]


def read_skill_files(
    root: Path, folder: Path, limits: Limits, name: str | None = None
) -> tuple[Skill, dict[str, bytes]]:
    """`read_skill`, plus the bytes it hashed: one safe read, so the files are exactly the
    revision returned (reading them again later could mix in a newer edit)."""
    try:
        contents = read_folder(folder, limits)
    except OSError as exc:
        raise SkillInvalid(f"cannot read the folder: {exc.strerror or exc}") from exc
    if "SKILL.md" not in contents:
        other = next((p for p in contents if p.lower() == "skill.md"), None)
        if other is not None:  # skills-ref accepts skill.md; hosts and SEP-2640 URIs need SKILL.md
            raise SkillInvalid(
                f"the file is named {other}; rename it to SKILL.md (the Agent Skills spec's name)"
            )
        raise SkillInvalid("no SKILL.md in the folder")
    files = [SkillFile(rel, hashlib.sha256(data).hexdigest(), len(data)) for rel, data in contents.items()]
    raw = contents["SKILL.md"]
    if b"\x00" in raw:
        raise SkillInvalid("SKILL.md is binary (contains NUL bytes); it must be UTF-8 text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillInvalid(f"SKILL.md is not valid UTF-8 (byte {exc.start}); re-save it as UTF-8") from exc
    name, description, body, meta = parse_skill_md(text, name or folder.name)
    wire = skillspec.wire_manifest(meta, {f.path: (f.sha256, f.size) for f in files})
    skill = Skill(
        name=name,
        description=description,
        body=body,
        root=root,
        folder=folder,
        revision=manifest_revision(files),
        files=tuple(sorted(files, key=lambda f: f.path)),
        frontmatter=MappingProxyType(meta),
        metadata=MappingProxyType(dict(meta.get("metadata") or {})),
        notes=skillspec.notes(meta),
        wire=wire,
        text_files=frozenset(path for path, data in contents.items() if _is_text(data)),
    )
    return skill, contents


def _is_text(data: bytes) -> bool:
    """UTF-8 without NUL bytes: served to hosts as text, whatever its extension."""
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _fingerprint(folder: Path) -> tuple:
    """Cheap change detector (paths, sizes, mtimes, inodes); the revision stays content-based."""
    marks = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for entry in sorted(filenames):
            if entry.startswith("."):
                continue
            try:
                info = os.stat(os.path.join(dirpath, entry))
                marks.append((dirpath, entry, info.st_size, info.st_mtime_ns, info.st_ino, info.st_ctime_ns))
            except OSError:
                marks.append((dirpath, entry, -1, -1, -1, -1))
    return tuple(marks)


@dataclass
class _Entry:
    fingerprint: tuple
    skill: Skill | None
    problem: Problem | None


@dataclass
class Registry:
    """The skills under `roots`, re-read incrementally: only folders that changed are parsed."""

    roots: tuple[Path, ...]
    limits: Limits = field(default_factory=Limits)
    _entries: dict[Path, _Entry] = field(default_factory=dict)
    _skills: dict[str, Skill] = field(default_factory=dict)
    _problems: list[Problem] = field(default_factory=list)
    _unlistable: set[Path] = field(default_factory=set)  # roots already warned about, until they return

    def skills(self) -> Mapping[str, Skill]:
        return MappingProxyType(self._skills)

    def problems(self) -> list[Problem]:
        return list(self._problems)

    def state(self) -> Hashable:
        """What the last reload read (every valid folder's revision, every skipped folder's
        reason) as a value that changes whenever a skill folder does. No disk access."""
        return (
            frozenset((name, skill.revision) for name, skill in self._skills.items()),
            frozenset((str(p.folder), p.reason) for p in self._problems),
        )

    def folders(self) -> list[tuple[Path, Path]]:
        """(root, folder) for every candidate skill folder, roots in priority order."""
        found = []
        for root in self.roots:
            try:
                children = sorted(root.iterdir(), key=lambda p: p.name)
            except OSError as exc:  # warned once, not on every rescan of a watcher's tick
                if root not in self._unlistable:
                    self._unlistable.add(root)
                    why = (
                        "does not exist" if isinstance(exc, FileNotFoundError) else f"cannot be listed: {exc}"
                    )
                    log.warning("skills root %s %s; serving nothing from it meanwhile", root, why)
                continue
            if root in self._unlistable:
                self._unlistable.discard(root)
                log.info("skills root %s is back", root)
            for child in children:
                if not child.name.startswith(".") and child.is_dir():
                    found.append((root, child))
        return found

    def reload(self, changed: Iterable[Path] | None = None) -> ReloadReport:
        """Re-scan and parse only folders whose files changed since the last scan.

        `changed` (paths a file watcher reported) limits the scan to the skill folders holding
        them; None, or a path outside every skill folder, re-scans every root."""
        before = {name: (skill.revision, skill.folder) for name, skill in self._skills.items()}
        targets = self._folders_for(changed) if changed is not None else None
        if targets is None:
            candidates = self.folders()
            entries: dict[Path, _Entry] = {}
        else:
            candidates = [
                (root, folder)
                for root, folder in targets
                if folder.is_dir() and not folder.name.startswith(".")
            ]
            entries = {f: e for f, e in self._entries.items() if f not in {t for _, t in targets}}
        for root, folder in candidates:
            fingerprint = _fingerprint(folder)
            old = self._entries.get(folder)
            if old is not None and old.fingerprint == fingerprint:
                entries[folder] = old
                continue
            try:
                entries[folder] = _Entry(fingerprint, read_skill(root, folder, self.limits), None)
            except Exception as exc:  # one folder must never break the scan of the others
                reason = str(exc) if isinstance(exc, SkillInvalid) else f"unreadable: {exc!r}"
                entries[folder] = self._broken(folder, fingerprint, reason, old)
        order = {root: i for i, root in enumerate(self.roots)}
        self._entries = dict(sorted(entries.items(), key=lambda kv: (order.get(kv[0].parent, 0), kv[0].name)))
        self._skills, self._problems = self._resolve(self._entries)
        after = {name: (skill.revision, skill.folder) for name, skill in self._skills.items()}
        return ReloadReport(
            added=tuple(sorted(set(after) - set(before))),
            changed=tuple(sorted(n for n in after if n in before and after[n] != before[n])),
            removed=tuple(sorted(set(before) - set(after))),
            invalid=tuple(self._problems),
        )

    @staticmethod
    def _broken(folder: Path, fingerprint: tuple, reason: str, old: _Entry | None) -> _Entry:
        """A folder that no longer reads as a valid skill keeps serving its last valid revision.

        An editor saving in place (truncate, then write) or a half-finished edit must not take a
        working skill offline; the problem is reported until the folder is valid again."""
        last_good = old.skill if old is not None else None
        if last_good is not None:
            reason = f"{reason} (still serving the last valid revision {last_good.short_revision})"
        log.warning("skill folder %s: %s", folder, reason)
        return _Entry(fingerprint, last_good, Problem(folder, reason))

    def _folders_for(self, paths: Iterable[Path]) -> list[tuple[Path, Path]] | None:
        """The (root, skill folder) pairs holding `paths`, or None if a full scan is needed."""
        found: dict[Path, Path] = {}
        for path in paths:
            path = Path(os.path.abspath(path))
            for root in self.roots:
                absolute_root = Path(os.path.abspath(root))
                if path.is_relative_to(absolute_root) and path != absolute_root:
                    found[root / path.relative_to(absolute_root).parts[0]] = root
                    break
            else:
                return None
        return [(root, folder) for folder, root in found.items()]

    def _resolve(self, entries: dict[Path, _Entry]) -> tuple[dict[str, Skill], list[Problem]]:
        skills: dict[str, Skill] = {}
        problems: list[Problem] = []
        for folder, entry in entries.items():  # insertion order = root priority order
            if entry.problem is not None:
                problems.append(entry.problem)
            if entry.skill is not None:
                if entry.skill.name in skills:
                    winner = skills[entry.skill.name].folder
                    log.warning(
                        "duplicate skill %r at %s ignored; %s (earlier root) wins",
                        entry.skill.name,
                        folder,
                        winner,
                    )
                    continue
                skills[entry.skill.name] = entry.skill
        return skills, problems
