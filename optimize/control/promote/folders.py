"""The two filesystem moves a promotion is made of: write a folder durably, switch two atomically.

`write_tree` creates a new folder laid out as layout.py says (each file's mode from its bytes,
folders 0755, whatever the umask) and fsyncs every file and directory in it before returning,
reporting each step to the fault-injection hook. `rename2` exchanges two folders (or moves one
onto a free name) in ONE atomic rename, or raises: a filesystem without such a rename is refused
rather than served a gap. Neither decides what to write or when; promoter.py and snapshots.py do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno as _errno
import functools
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath

from ingot.errors import PromotionError
from ingot.fsutil import check_relative, fsync_dir
from optimize.control.promote.layout import FOLDER, file_mode

StepHook = Callable[[str], None]

RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
_AT_FDCWD = -100


def write_tree(folder: Path, files: Mapping[str, bytes], label: str, step: StepHook) -> None:
    """Create `folder` holding exactly `files` (relative path -> bytes) in their layout, all of it
    fsynced (a file's fsync carries its mode, a folder's its entries and mode)."""
    folder.mkdir(parents=True)
    for rel in sorted(files):
        target = folder / check_relative(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        step(f"{label}: write {rel}")
        with open(target, "xb") as handle:
            handle.write(files[rel])
            os.fchmod(handle.fileno(), file_mode(files[rel]))
            handle.flush()
            step(f"{label}: fsync {rel}")
            os.fsync(handle.fileno())
    folders = {folder} | {folder / p for r in files for p in PurePosixPath(r).parents}
    for directory in sorted(folders, key=lambda p: -len(p.parts)):
        os.chmod(directory, FOLDER)
        if directory != folder:
            fsync_dir(directory)
    step(f"{label}: fsync folder")
    fsync_dir(folder)


_UNSUPPORTED = frozenset({_errno.EINVAL, _errno.ENOSYS, _errno.EOPNOTSUPP, _errno.ENOTSUP})


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, found once (find_library runs ldconfig in a subprocess: ~15 ms)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def rename2(source: Path, target: Path, flags: int) -> None:
    """renameat2 on Linux, renamex_np on macOS; refuse anything that is not atomic
    (`PromotionError`). A rename the system refused for another reason is an `OSError` with its
    errno and `target`, which callers report as the failed write it is."""
    libc = _libc()
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        result = libc.renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags)
    elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        mac_flags = {RENAME_EXCHANGE: 0x2, RENAME_NOREPLACE: 0x4}[flags]  # RENAME_SWAP, RENAME_EXCL
        result = libc.renamex_np(os.fsencode(source), os.fsencode(target), mac_flags)
    else:
        raise PromotionError(
            "this platform has no atomic folder exchange; Ingot will not promote "
            "with a gap. Use Linux (ext4, xfs, btrfs, tmpfs) or macOS (APFS)"
        )
    if result != 0:
        errno = ctypes.get_errno()
        if errno in _UNSUPPORTED:  # the only answers that mean "this filesystem cannot exchange"
            raise PromotionError(
                f"the filesystem under {target.parent} cannot switch folders atomically "
                f"({os.strerror(errno)}); Ingot will not promote with a gap. Keep skills roots on "
                "ext4, xfs, btrfs, tmpfs or APFS. Nothing was changed"
            )
        # Anything else (an I/O error, a full disk, permissions) is a failed write: its errno text
        # and the folder, shown by the caller with what is still served and what to do.
        raise OSError(errno, os.strerror(errno), str(target))
