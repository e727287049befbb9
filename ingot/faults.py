"""Fault points: the named places where every state writer can be stopped or made to fail.

Each durable step a change-control writer takes (a write, an fsync, a rename, an unlink, a git
command) is preceded by `point(name)`; fsutil's primitives call it for their own steps, so a
writer built from them is covered without naming each syscall. Nothing is installed in
production, where a point costs one global lookup. The crash and fault tests install a hook in a
forked child (tests/optimize/control/killpoints.py) that SIGKILLs it at the N-th point, or raises
EIO there, and then check what recovery makes of it: this is the seam those tests use instead of
patching, like `Promoter(on_step=)`. What is not a point: writes made inside SQLite caches and
inside git's own processes (a point sits before and after each git command instead).
Ground floor: imports nothing from Ingot.
"""

from __future__ import annotations

from collections.abc import Callable

Hook = Callable[[str], None]
_hook: Hook | None = None


def install(hook: Hook | None) -> None:
    """Call `hook(name)` at every fault point from now on (None removes it)."""
    global _hook
    _hook = hook


def point(name: str) -> None:
    """A durable step is about to happen: the installed hook may stop or fail the process here."""
    if _hook is not None:
        _hook(name)
