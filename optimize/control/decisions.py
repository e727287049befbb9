"""What became of each change, read from the audit chain; the archive's words decide nothing.

`pending/archive/` keeps the record of every change that left review (approved, rejected,
withdrawn, displaced, withheld) with a status written into it, for people to read. That status
is a copy in a plain file, which anything able to write the state home can forge. A change's
fate is taken from the keyed chain alone (`fates`): its finished `promote` line, its `reject` or
`withdraw` line, the next `propose` line for its skill (which displaced it), or its own withheld
`propose` line. So a forged archive record can neither block an approval nor pass as one.
`disagreements` names each archived record the chain contradicts, for `ingot status` to report;
none is ever believed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from optimize.control.audit import AuditEntry
from optimize.control.pending import ID_PATTERN, PendingQueue

DECIDED = ("approved", "rejected", "withdrawn")  # a person's (or autonomy's) decision
SET_ASIDE = ("displaced", "withheld")  # left review without a decision
WITHHELD = "withheld: "  # how a withheld candidate's `propose` line starts its reason


@dataclass(frozen=True)
class Fate:
    """How one change left review, by the chain line that says so."""

    change_id: str
    skill: str
    status: str  # one of DECIDED or SET_ASIDE
    seq: int  # the audit line
    time: str
    actor: str | None  # who decided (None: set aside by a newer candidate)
    reason: str | None = None
    by: str | None = None  # the change that displaced it

    def said(self) -> str:
        """The fate in words, with its audit line: "approved by ana (audit line 7, 2026-…)"."""
        who = f" by {self.actor}" if self.actor and self.status in DECIDED else ""
        whom = f" by {self.by}" if self.by else ""
        return f"{self.status}{who}{whom} (audit line {self.seq}, {self.time})"


def fates(entries: Iterable[AuditEntry], skill: str | None = None) -> dict[str, Fate]:
    """Each change that left review (of `skill`, or of every skill), by id, from the chain's
    lines in order. Each skill's review slot is followed through them: a `propose` line that is
    not withheld takes the slot, displacing whichever change held it; a finished `promote`, a
    `reject` or a `withdraw` line empties it."""
    found: dict[str, Fate] = {}
    holder: dict[str, str] = {}  # skill -> the change in its slot
    for entry in entries:
        name, action = str(entry.get("skill") or ""), entry.get("action")
        change_id = entry.get("change_id")
        if not change_id or (skill is not None and name != skill):
            continue
        actor = str(entry.get("actor")) if entry.get("actor") else None
        reason = str(entry.get("reason") or "")
        status = None
        if action == "promote" and str(entry.get("outcome", "")).startswith("done"):
            status = "approved"
        elif action in ("reject", "withdraw"):
            status = "rejected" if action == "reject" else "withdrawn"
        elif action == "propose" and reason.startswith(WITHHELD):
            found[change_id] = Fate(
                change_id, name, "withheld", entry.seq, entry.time, None, reason[len(WITHHELD) :]
            )
        elif action == "propose":
            previous = holder.get(name)
            if previous is not None and previous != change_id:
                found[previous] = Fate(
                    previous,
                    name,
                    "displaced",
                    entry.seq,
                    entry.time,
                    None,
                    f"displaced by {change_id}",
                    change_id,
                )
            holder[name] = change_id
        if status is not None:
            found[change_id] = Fate(change_id, name, status, entry.seq, entry.time, actor, reason or None)
            if holder.get(name) == change_id:
                del holder[name]
    return found


def disagreements(queue: PendingQueue, known: dict[str, Fate]) -> list[str]:
    """Each archived record whose status the chain contradicts (`known`: `fates` of every
    skill), with what each says: forged or edited, and ignored."""
    found = []
    folder = queue.archive_folder
    for path in sorted(folder.glob("*/*.json")) if folder.is_dir() else []:
        if not ID_PATTERN.match(path.stem):
            continue  # an unreadable record displaced under a made-up name: nothing to check
        try:
            claimed = str(json.loads(path.read_bytes()).get("archived_status"))
        except (OSError, ValueError, AttributeError):
            claimed = "unreadable"
        fate = known.get(path.stem)
        if fate is None or fate.status != claimed or fate.skill != path.parent.name:
            chain = f"says {fate.said()}" if fate is not None else "holds no decision for it"
            found.append(
                f"{path.parent.name} {path.stem}: pending/archive says {claimed!r}, but the audit chain "
                f"{chain}: the archive record is ignored (forged or edited); the chain decides"
            )
    return found
