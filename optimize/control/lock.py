"""The one change-control lock, shared by the CLI, the UI and background jobs across processes.

Every write to a skills root, the pending queue or the audit chain happens under it. It is an
OS file lock (via `filelock`), so it is released when its holder dies, even by SIGKILL.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from ingot.errors import IngotError

DEFAULT_WAIT_S = 30.0


class PromotionConflict(IngotError):
    """Another change-control operation holds the lock, or already did what was asked."""

    exit_code = 3


@contextmanager
def change_lock(runs_dir: Path, wait_s: float = DEFAULT_WAIT_S) -> Iterator[None]:
    """Hold the change-control lock; raise `PromotionConflict` after `wait_s` seconds."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(runs_dir / "change.lock")
    try:
        lock.acquire(timeout=wait_s)
    except Timeout as exc:
        raise PromotionConflict(
            f"another Ingot process is changing skills (lock {runs_dir / 'change.lock'} held for "
            f"{wait_s:.0f} s); retry when it finishes"
        ) from exc
    try:
        yield
    finally:
        lock.release()
