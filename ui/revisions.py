"""A skill's revisions: every one that has been live under change control, or is live now.

Read from the skill's audit lines in one pass: each completed switch (a promotion, rollback,
adoption or recovery whose outcome is done) put a revision live at a time, by an actor, for a
change; the revision a switch replaced was live before it. The revision on disk now is listed
even when Ingot never put it there (a skill Ingot has not changed, or one edited by hand). The
Library's count and the revision page are the same list, so they cannot disagree. A proposed
candidate is not a revision of the skill until it goes live. Read-only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from optimize.control.audit import AuditEntry


@dataclass(frozen=True)
class Switch:
    """One time change control put a revision live."""

    seq: int
    time: str
    action: str  # promote, rollback, adopt, ...
    actor: str | None
    change_id: str | None
    reason: str | None


@dataclass(frozen=True)
class Revision:
    revision: str
    live: bool
    switches: tuple[Switch, ...]  # newest first; empty when Ingot never put it live
    origin: str | None  # how it came to be live, when no switch says so
    kept: bool = False  # a snapshot is stored, so History can roll back to it


def _switches(entries: Iterable[AuditEntry]) -> list[AuditEntry]:
    return [
        e
        for e in entries
        if str(e.get("outcome", "")).startswith("done") and not str(e.get("action", "")).endswith("-intent")
    ]


def _switch(entry: AuditEntry) -> Switch:
    def text(key: str) -> str | None:
        value = entry.get(key)
        return None if value is None else str(value)

    return Switch(
        entry.seq, entry.time, str(entry.get("action", "?")), text("actor"), text("change_id"), text("reason")
    )


def revisions(entries: Iterable[AuditEntry], live: str | None, kept: Collection[str] = ()) -> list[Revision]:
    """`entries` (one skill's audit lines, oldest first) as its revisions, newest first."""
    switches = _switches(entries)
    put: dict[str, list[Switch]] = defaultdict(list)
    found: dict[str, tuple[int, str]] = {}  # a revision no switch put live -> (seq seen, how it was live)
    for number, entry in enumerate(switches):
        before, after = entry.get("from_revision"), entry.get("to_revision")
        if before and not put.get(before) and before not in found:
            found[before] = (
                entry.seq,
                "live before Ingot's first change to this skill"
                if number == 0
                else f"put live outside change control; found live when #{entry.seq} replaced it",
            )
        if after:
            put[after].append(_switch(entry))
    if live and live not in put and live not in found:
        found[live] = (
            switches[-1].seq if switches else 0,
            "live now, put there outside change control (drift)"
            if switches
            else "live as found: Ingot has not changed this skill",
        )
    listed = [
        (s[-1].seq, Revision(r, r == live, tuple(reversed(s)), None, r in kept)) for r, s in put.items()
    ] + [(seq, Revision(r, r == live, (), why, r in kept)) for r, (seq, why) in found.items() if r not in put]
    # Newest first: by the last time each went (or was found) live; what is live now leads.
    return [rev for _, rev in sorted(listed, key=lambda x: (x[1].live, x[0]), reverse=True)]


def counts(entries: Iterable[AuditEntry], live: Mapping[str, str | None]) -> dict[str, int]:
    """How many revisions each skill in `live` has (the length of its `revisions` list), from
    one pass over the whole chain."""
    by_skill: dict[str, list[AuditEntry]] = defaultdict(list)
    for entry in entries:
        skill = entry.get("skill")
        if skill in live:
            by_skill[skill].append(entry)
    return {name: len(revisions(by_skill.get(name, ()), revision)) for name, revision in live.items()}
