"""The names change control answers to: which skills and change ids exist, and which live
revision a caller pinned.

Read-only. A name a caller typed that matches nothing is a `NotFound` (exit 2) naming the
nearest ones that do, never an empty answer that looks like "nothing happened yet"
(`ingot history <typo>` used to print nothing and exit 0). Whether a known name may be acted on
(is there a pending change, was it decided since) is changes.py's question, not this module's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

from ingot.errors import ChangeNotFound, ConfigError, SkillNotFound, did_you_mean
from mcp_server.registry import NAME_PATTERN
from optimize.control.audit import AuditError, AuditLog
from optimize.control.pending import PendingQueue
from optimize.control.promote import ABSENT

MIN_PIN = 8  # hex characters of a revision a pin must give (`ingot history` prints 12)


def _folders(folder: Path) -> set[str]:
    try:
        return {p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")}
    except OSError:
        return set()


def known_skills(roots: Iterable[Path], queue: PendingQueue, audit: AuditLog, revisions: Path) -> set[str]:
    """Every skill name change control knows: a folder in a root, a pending change, a line in the
    audit chain, or snapshots (a removed skill is still known, so it can be restored)."""
    names = set().union(*(_folders(root) for root in roots)) | _folders(revisions)
    names |= {change.skill for change in queue.scan()[0]}
    with contextlib.suppress(AuditError):  # a damaged chain must not hide the skills on disk
        names |= {str(e.get("skill")) for e in audit.entries() if e.get("skill")}
    return names


def require_skill(skill: str, known: set[str]) -> str:
    """`skill` if it is known, else `SkillNotFound` with the nearest known names."""
    if skill in known and NAME_PATTERN.match(skill):
        return skill
    shape = "" if NAME_PATTERN.match(skill) else " (names are lowercase letters, digits and single hyphens)"
    raise SkillNotFound(f"no skill named {skill!r}{shape}{did_you_mean(skill, known)}")


def known_changes(skill: str, queue: PendingQueue, audit: AuditLog) -> set[str]:
    """Every change id ever queued for `skill`: pending, or named in the audit chain (every
    queued change has its `propose` line there; an archive file alone makes no id known)."""
    ids = set()
    pending = queue.get(skill)
    if pending is not None:
        ids.add(pending.id)
    with contextlib.suppress(AuditError):
        ids |= {
            str(e.get("change_id")) for e in audit.entries() if e.get("skill") == skill and e.get("change_id")
        }
    return ids


def unknown_change(skill: str, change_id: str, pending: str | None, known: set[str]) -> ChangeNotFound:
    now = f"; the pending change is {pending}" if pending else f"; {skill!r} has no pending change"
    return ChangeNotFound(
        f"no change {change_id!r} was ever queued for {skill!r}{now}{did_you_mean(change_id, known)}"
        " (`ingot pending` lists them)"
    )


def pins(live: str | None, pin: str) -> bool:
    """Whether the live revision is the one a caller pinned: `absent` for no live skill, else
    the full revision or a prefix of at least `MIN_PIN` characters (shorter: `ConfigError`)."""
    if pin == ABSENT:
        return live is None
    if len(pin) < MIN_PIN:
        raise ConfigError(
            f"the live revision you pin ({pin!r}) needs at least {MIN_PIN} characters (or `{ABSENT}`); "
            "`ingot history` prints 12"
        )
    return live is not None and live.startswith(pin)
