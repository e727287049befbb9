"""Durable, atomic file writes and path checks that serving and change control both need.

Ground floor: imports only `ingot.errors`, so the MCP server, change control and the UI can all
use it. Guarantee: `write_atomic` never leaves a partly written target, and never follows a
symlink planted at its temp name. It does not lock: callers that race on one file serialise
themselves (change control holds its lock; session records are last-writer-wins)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from ingot import faults
from ingot.errors import UnsafePath


def fsync_dir(path: Path) -> None:
    """fsync a folder, so a rename or new entry in it survives a power cut."""
    faults.point(f"fsync folder {path.name}")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o600, durable: bool = True) -> None:
    """Replace `path` with `data` atomically: a fresh O_EXCL temp file (never a followed symlink),
    renamed over the target. `durable` also fsyncs the file and the folder (a power cut keeps it);
    records that may be lost without harm (a session's last route) skip the two fsyncs."""
    faults.point(f"create temp for {path.name}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            faults.point(f"write {path.name}")
            handle.write(data)
            if durable:
                handle.flush()
                faults.point(f"fsync {path.name}")
                os.fsync(handle.fileno())
        faults.point(f"rename into {path.name}")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


TEMP_NAME = re.compile(r"^\.[^/]+\.[A-Za-z0-9_]{8}\.tmp$")  # what write_atomic's mkstemp creates


def remove_stale_temps(folder: Path, of: str | None = None) -> list[str]:
    """Delete the temp files a killed `write_atomic` left in `folder` (only those of the file named
    `of`, if given); returns their names.

    Only for files whose writers are serialised by a lock the caller holds: a temp file of a
    write in progress would otherwise be removed under it."""
    removed = []
    try:
        candidates = [
            p
            for p in folder.iterdir()
            if TEMP_NAME.match(p.name) and (of is None or p.name.startswith(f".{of}.")) and p.is_file()
        ]
    except FileNotFoundError:
        return removed
    for path in candidates:
        path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed


def check_relative(path: str) -> str:
    """`path` if it is a plain relative path (no absolute, `..`, hidden or empty parts), else
    `UnsafePath`: candidate files are laid out under a folder Ingot controls, never outside it."""
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\\" in path
        or "\x00" in path
        or any(p in {"", ".", ".."} or p.startswith(".") for p in parts)
    ):
        raise UnsafePath(f"candidate file path {path!r} is not a plain relative path")
    return path


def hidden_entries(folder: Path, limit: int = 20) -> list[str]:
    """The hidden files and folders anywhere under `folder` (relative paths, at most `limit`),
    which a served revision leaves out but a harness reading the folder directly still sees.
    Symlinked folders are not followed."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        base = Path(dirpath)
        for entry in sorted((*dirnames, *filenames)):
            if entry.startswith("."):
                found.append((base / entry).relative_to(folder).as_posix())
                if len(found) >= limit:
                    return found
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
    return found
