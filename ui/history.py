"""What was decided before: a skill's audit timeline, and the candidates set aside.

The timeline is the skill's audit entries, newest first, an intent shown only when no outcome
settled it, each linked to its evidence bundle when that bundle is still on disk. A line shows
revisions only when it names them (a trust or bless line moves none; a rejection names only its
candidate), and says when a switch left the skill absent (removed) rather than "none". Set-aside
candidates (displaced or withheld) are read from the chain (decisions.py), never from the words
of the archive that keeps their records.
Read-only: nothing here writes the audit chain or the archive.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optimize.control import evidence as evidence_mod
from optimize.control.approved import FOLDER_SWITCHES
from optimize.control.audit import AuditEntry, AuditError
from optimize.control.changes import ChangeControl
from optimize.control.decisions import SET_ASIDE, fates


@dataclass(frozen=True)
class TimelineEntry:
    seq: int
    time: str
    action: str
    actor: str | None
    from_revision: str | None
    to_revision: str | None
    outcome: str | None
    reason: str | None
    evidence: str | None  # evidence bundle id, when the entry names one that exists
    change_id: str | None
    moves: bool = True  # the line names revisions (a trust or bless line names none)
    names_from: bool = True  # a switch's start (a rejection names only its candidate)

    @property
    def settled(self) -> bool:
        """A switch that happened (not an intent still open, not an aborted one)."""
        return (self.outcome or "").startswith("done")

    @property
    def switched(self) -> bool:
        """This line changed what the skill's folder holds (a promotion, rollback or restore)."""
        return self.settled and self.action in FOLDER_SWITCHES

    @property
    def removes(self) -> bool:
        """This line took the skill out of service: a removal, or a rollback to before it existed."""
        return self.switched and self.to_revision is None

    @property
    def outcome_shown(self) -> str | None:
        """The outcome in words, when it is not plain `done` (a trust line's outcome is the level)."""
        if not self.outcome or self.outcome == "done":
            return None
        return f"level now {self.outcome}" if self.action == "autonomy" else self.outcome


def timeline(control: ChangeControl, skill: str) -> list[TimelineEntry]:
    """The skill's audit entries, newest first, with a link to each one's evidence bundle."""
    bundles = {}
    folder = control.runs_dir / "evidence" / skill
    if folder.is_dir():
        for path in folder.glob("*/evidence.json"):
            bundles[evidence_mod.file_digest(path)] = path.parent.name
    # An "-intent" line is followed by its outcome line; show the outcome (or a lone intent).
    entries = control.history(skill)
    settled = {e.get("intent_seq") for e in entries}
    shown = [e for e in entries if not (str(e.get("action", "")).endswith("-intent") and e.seq in settled)]
    return [_entry(e, bundles) for e in reversed(shown)]


def _entry(entry: AuditEntry, bundles: Mapping[str, str]) -> TimelineEntry:
    def text(key: str) -> str | None:
        value = entry.get(key)
        return str(value) if value is not None else None

    return TimelineEntry(
        seq=entry.seq,
        time=entry.time,
        action=str(entry.get("action", "?")),
        actor=text("actor"),
        from_revision=text("from_revision"),
        to_revision=text("to_revision"),
        outcome=text("outcome"),
        reason=text("reason"),
        evidence=bundles.get(str(entry.get("evidence_digest"))),
        change_id=text("change_id"),
        moves=any(k in entry.fields for k in ("from_revision", "to_revision")),
        names_from=entry.get("action") not in ("reject", "withdraw"),
    )


def set_aside(control: ChangeControl, limit: int = 10) -> list[dict[str, Any]]:
    """Recently displaced or withheld candidates, newest first, as the chain says (their records
    are kept in the archive, never dropped); none while the chain is unreadable."""
    try:
        known = fates(control.audit.entries())
    except AuditError:
        return []
    aside = sorted((f for f in known.values() if f.status in SET_ASIDE), key=lambda f: f.seq, reverse=True)
    return [
        {"skill": f.skill, "id": f.change_id, "status": f.status, "reason": f.reason, "at": f.time}
        for f in aside[:limit]
    ]
