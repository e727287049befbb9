"""Reading a skill folder's files safely: one descriptor per file, no link or pipe surprises.

Every read opens the file once with O_NOFOLLOW | O_NONBLOCK and checks its type and size on the
open descriptor, so a file swapped for a symlink, a FIFO or something bigger between check and
read is refused instead of followed, blocked on, or read whole. Symlinks inside a skill folder
are allowed only if they resolve inside it and not to a hidden file. Parsing and validating
SKILL.md is registry.py's job; this module only hands back bytes.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ingot.errors import SkillChanged, SkillInvalid, SkillNotFound

if TYPE_CHECKING:
    from mcp_server.registry import Skill


@dataclass(frozen=True)
class Limits:
    """Safety caps applied to every skill folder."""

    max_file_bytes: int = 1 << 20
    max_skill_bytes: int = 16 << 20
    max_files: int = 512


def read_regular(path: Path, rel: str, max_bytes: int, expected_size: int | None = None) -> bytes:
    """Read one regular file through a single open descriptor (no check-then-use race).

    O_NOFOLLOW refuses a symlink swapped in after the path was resolved; O_NONBLOCK keeps a FIFO
    swapped in from blocking; the type and size are checked on the open file, and at most
    `max_bytes` + 1 bytes are read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise SkillInvalid(f"{rel} cannot be opened: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SkillInvalid(f"{rel} is not a regular file (device, socket or pipe)")
        if info.st_size > max_bytes:
            raise SkillInvalid(
                f"{rel} is {info.st_size} bytes, over the {max_bytes}-byte file limit (MAX_FILE_BYTES)"
            )
        if expected_size is not None and info.st_size != expected_size:
            raise SkillChanged(f"{rel} changed size on disk")
        chunks, remaining = [], max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise SkillInvalid(f"{rel} grew over the {max_bytes}-byte file limit while being read")
        return data
    finally:
        os.close(fd)


def resolve_inside(path: Path, real_folder: Path, rel: str) -> Path:
    """The real path of a file in a skill folder, refusing links that leave it or reach hidden files."""
    if not path.is_symlink():
        return path
    try:
        target = Path(os.path.realpath(path, strict=True))
    except (OSError, RuntimeError) as exc:
        raise SkillInvalid(f"{rel} is a broken or looping symlink") from exc
    if not target.is_relative_to(real_folder):
        raise SkillInvalid(f"{rel} is a symlink that leaves the skill folder")
    if any(part.startswith(".") for part in target.relative_to(real_folder).parts):
        raise SkillInvalid(f"{rel} is a symlink to a hidden file")
    return target


def read_folder(folder: Path, limits: Limits) -> dict[str, bytes]:
    """Every non-hidden file under `folder`, checked and read once, by relative POSIX path."""
    if folder.is_symlink():
        raise SkillInvalid(
            "the skill folder is a symlink; Ingot serves real folders only (copy it in, "
            "or add its parent as a skills root)"
        )
    real_folder = Path(os.path.realpath(folder))
    contents: dict[str, bytes] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        base = Path(dirpath)
        for entry in sorted(dirnames):
            if entry.startswith("."):
                dirnames.remove(entry)
            elif (base / entry).is_symlink():
                raise SkillInvalid(
                    f"{(base / entry).relative_to(folder).as_posix()} is a symlinked "
                    "directory; replace it with a real folder"
                )
        for entry in sorted(filenames):
            if entry.startswith("."):
                continue
            path = base / entry
            rel = path.relative_to(folder).as_posix()
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:
                raise SkillInvalid(f"a file name under {base.name!r} is not valid UTF-8; rename it") from None
            data = read_regular(resolve_inside(path, real_folder, rel), rel, limits.max_file_bytes)
            total += len(data)
            if total > limits.max_skill_bytes:
                raise SkillInvalid(f"folder is over the {limits.max_skill_bytes}-byte skill limit")
            contents[rel] = data
            if len(contents) > limits.max_files:
                raise SkillInvalid(f"more than {limits.max_files} files (MAX_SKILL_FILES)")
    return contents


def read_served_file(skill: Skill, rel: str) -> bytes:
    """The bytes of one file of `skill`'s served revision, checked against its manifest entry.

    A file that is gone, swapped for a link, a pipe or a bigger file, or whose bytes changed, is
    a `SkillChanged` error, never a silent mix of revisions."""
    listed = {f.path: f for f in skill.files}.get(rel)
    if listed is None:
        raise SkillNotFound(f"skill {skill.name!r} has no file {rel!r}")
    stale = (
        f"{skill.name}/{rel} {{}} since revision {skill.short_revision} was indexed; "
        "call reload_skills and retry"
    )
    path = skill.folder / rel
    if not path.exists() and not path.is_symlink():
        raise SkillChanged(stale.format("is gone from disk"))
    try:
        target = resolve_inside(path, Path(os.path.realpath(skill.folder)), rel)
        data = read_regular(target, rel, listed.size, expected_size=listed.size)
    except (SkillInvalid, SkillChanged) as exc:
        raise SkillChanged(stale.format(f"changed on disk ({exc})")) from exc
    if hashlib.sha256(data).hexdigest() != listed.sha256:
        raise SkillChanged(stale.format("changed on disk"))
    return data


def read_served_files(skill: Skill) -> dict[str, bytes]:
    """Every file of `skill`'s served revision, each checked as `read_served_file` does."""
    return {f.path: read_served_file(skill, f.path) for f in skill.files}
