"""Bring state from an older Ingot into a state home: move a per-folder `runs/` in, and key its
unkeyed audit chain.

Moves, never copies-and-forgets: every entry of the old folder is renamed into the home (or
copied and then removed across filesystems), under the change lock, and the old folder keeps
only a note saying where its state went. The chain is checked under the old rules and adopted
with one keyed `adopt` line (audit.py); a chain that does not verify is refused, untouched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ingot.errors import ConfigError
from optimize.control.audit import AuditEntry, AuditLog
from optimize.control.lock import change_lock

NOTE = "MOVED-TO-STATE-HOME.txt"
SKIP = {"change.lock", "audit.jsonl.lock", NOTE}


def move_state(legacy: Path, home: Path, actor: str) -> tuple[list[str], AuditEntry | None]:
    """Move `legacy`'s contents into `home` and adopt its chain; returns what moved and the adopt line."""
    legacy, home = legacy.resolve(), home.resolve()
    if not legacy.is_dir():
        raise ConfigError(f"{legacy} is not a folder; pass the old RUNS_DIR (usually ./runs)")
    if legacy == home:
        raise ConfigError(
            f"{legacy} is already this library's state home; run `ingot migrate` without --from"
        )
    with change_lock(home), change_lock(legacy):
        entries = sorted(p for p in legacy.iterdir() if p.name not in SKIP)
        clashes = [p.name for p in entries if (home / p.name).exists()]
        if clashes:
            raise ConfigError(
                f"the state home {home} already holds {', '.join(clashes)}; nothing was moved. Move or "
                "remove those first if they are empty leftovers, or keep the old folder with INGOT_HOME"
            )
        legacy_chain = AuditLog(legacy)
        if (legacy / "audit.jsonl").exists() and not (legacy / "audit.key").exists():
            checked = legacy_chain.verify_legacy()
            if not checked.ok:
                raise ConfigError(
                    f"the audit chain in {legacy} does not verify (line {checked.bad_line}: "
                    f"{checked.problem}); nothing was moved. Investigate it first"
                )
        moved = []
        for entry in entries:
            shutil.move(str(entry), str(home / entry.name))
            moved.append(entry.name)
        (legacy / NOTE).write_text(f"Ingot's state from this folder was moved to {home}.\n")
    return moved, adopt_chain(home, actor)


def adopt_chain(home: Path, actor: str) -> AuditEntry | None:
    """Key the home's chain if an older Ingot wrote it unkeyed; None when it is already keyed."""
    audit = AuditLog(home)
    if audit.key_path.exists() or not audit.path.exists():
        return None
    with change_lock(home):
        return audit.adopt(actor)
