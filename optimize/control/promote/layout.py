"""The folder a revision is written as, and what a folder on disk holds besides it.

A revision names bytes only (registry.py: path, sha256 and size of every non-hidden file, the
SEP-2640 manifest), so everything else about its folder is derived from those bytes, and every
writer (stage, snapshot) lays it out the same way: each file regular, mode 0755 if it starts with
`#!` or is an ELF binary (something a harness may run directly), 0644 otherwise; each folder
0755 and on the path of at least one file (no empty folders); nothing hidden. A folder is at a
revision only when its files hash to it and `differences` finds nothing; the guard and
`Promoter.restore` decide with exactly this. Owner, group and times are not compared. Reads only.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

EXECUTABLE, REGULAR, FOLDER = 0o755, 0o644, 0o755
_RUNNABLE = (b"#!", b"\x7fELF")  # a script's interpreter line, an ELF binary's magic


def file_mode(data: bytes) -> int:
    """The mode a file with these bytes is written with."""
    return EXECUTABLE if data.startswith(_RUNNABLE) else REGULAR


def modes(files: Mapping[str, bytes]) -> dict[str, int]:
    """Each file's mode in the layout of `files` (relative path -> bytes)."""
    return {rel: file_mode(data) for rel, data in files.items()}


def differences(folder: Path, expected: Mapping[str, int], limit: int = 20) -> list[str]:
    """What `folder` holds that the layout of a revision whose files have the `expected` modes
    does not (at most `limit`, as short phrases): hidden entries, folders on no file's path,
    links and special files, missing files, other modes. Bytes are the revision's business:
    compare them first (the registry's revision of the folder)."""
    folders = {"."} | {str(p) for rel in expected for p in PurePosixPath(rel).parents}
    found: list[str] = []
    seen: set[str] = set()
    _check(folder, ".", folders, expected, found, seen)
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        base = Path(dirpath)
        for entry in sorted((*dirnames, *filenames)):
            rel = (base / entry).relative_to(folder).as_posix()
            if entry.startswith("."):
                found.append(f"hidden {rel}")
            else:
                _check(base / entry, rel, folders, expected, found, seen)
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]  # a link is listed, not entered
        if len(found) >= limit:
            return found[:limit]
    found += [f"{rel} missing" for rel in sorted(set(expected) - seen)]
    return found[:limit]


def _check(
    path: Path, rel: str, folders: set[str], expected: Mapping[str, int], found: list[str], seen: set[str]
) -> None:
    try:
        info = os.lstat(path)
    except OSError as exc:
        found.append(f"{rel} unreadable ({exc.strerror or exc})")
        return
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode):
        if rel not in folders:
            found.append(f"folder {rel}/ holds no file of the revision")
        elif mode != FOLDER:
            found.append(f"{'the folder' if rel == '.' else rel + '/'} mode {mode:04o}, not {FOLDER:04o}")
    elif stat.S_ISLNK(info.st_mode):
        found.append(f"{rel} is a link, not a file")
    elif not stat.S_ISREG(info.st_mode):
        found.append(f"{rel} is a special file")
    elif rel not in expected:
        found.append(f"{rel} is not in the revision")
    else:
        seen.add(rel)
        if mode != expected[rel]:
            found.append(f"{rel} mode {mode:04o}, not {expected[rel]:04o}")
