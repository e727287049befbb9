"""Earned autonomy: per skill and change class, how far a change may go without a person.

Levels: `manual` (a person approves each change), `supervised` (promoted after REVIEW_WINDOW
unless a person rejects it), `auto` (promoted as soon as its passport is ready). A class moves
up one level after STREAK clean changes in a row (a ready passport, approved without accepting
anything missing or overriding anything), and only up to the ceiling the operator allowed
(`ingot autonomy allow`). A change's classes are kinds.AUTONOMY_CLASSES: a change to both the
description and the body needs the trust of both; a removal always waits for a person.
Any incident (a rollback, a failing replay of the live revision, the mined live score dropping
below the health bar, drift, an override) drops the class to `manual` at once. Fail-closed: a
change whose passport is not ready waits for a person at every level: autonomy never accepts
missing evidence.

Trust is derived from the audit chain: every level change, ceiling and incident is an audited
`autonomy` line carrying the class's whole trust (level, ceiling, streak, last incident), and
the latest line per skill and class is what autonomy acts on. `<home>/autonomy.json` is a
readable mirror of it (plus the mined scores and reported incidents, which promote nothing):
a hand-edited mirror is never trusted; it is reported (`mirror_problem`), and the autopilot
refuses to act while it disagrees with the chain (fail-closed). A chain that does not verify
leaves every class manual. Deciding is pure (`decide`); promoting is the autopilot's job
(autopilot.py), through the same `approve`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingot.errors import ConfigError
from ingot.fsutil import write_atomic
from optimize.control.audit import AuditEntry, AuditError, AuditLog
from optimize.control.passport import STALE, Passport

LEVELS = ("manual", "supervised", "auto")
CLASSES = ("create", "description", "body")
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Trust:
    """One class of one skill: where it stands and how it got there."""

    level: str = "manual"
    ceiling: str = "manual"
    streak: int = 0  # clean changes in a row since the last level change or incident
    last_incident: str | None = None  # "when: why"


@dataclass(frozen=True)
class Decision:
    """What may happen to a pending change without a person."""

    action: str  # "human" | "promote" | "wait"
    why: str
    ready_at: dt.datetime | None = None  # supervised: when the review window ends


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise ConfigError(f"unknown autonomy level {level!r}: choose one of {', '.join(LEVELS)}")
    return level


def check_class(cls: str) -> str:
    if cls not in CLASSES:
        raise ConfigError(f"unknown change class {cls!r}: choose one of {', '.join(CLASSES)}")
    return cls


def effective(trusts: list[Trust]) -> Trust | None:
    """The trust a change with these classes' trusts has: the least of them (None: no class,
    e.g. a removal, which autonomy never decides)."""
    return min(trusts, key=lambda t: LEVELS.index(t.level)) if trusts else None


def decide(
    trust: Trust | None, passport: Passport, window_start: dt.datetime, window_s: float, now: dt.datetime
) -> Decision:
    """Pure: what autonomy may do with a change of this trust and passport, now."""
    if trust is None:
        return Decision("human", f"a {passport.kind} change is always decided by a person")
    if trust.level == "manual":
        return Decision("human", "this class is manual: a person approves each change")
    if passport.state == STALE:  # nobody may approve it as it stands, autonomy included
        return Decision(
            "human", f"{passport.summary}; until then neither autonomy nor a person can approve it"
        )
    if not passport.ready:
        return Decision("human", f"{passport.summary}. A person decides (fail-closed)")
    if trust.level == "auto":
        return Decision("promote", "auto, and the passport is ready")
    ready = window_start + dt.timedelta(seconds=window_s)
    if now >= ready:
        return Decision(
            "promote", "supervised, ready, and the review window passed without a rejection", ready
        )
    return Decision(
        "wait", f"supervised: goes live at {ready.isoformat(timespec='seconds')} unless rejected", ready
    )


def trusts_in(entries: Iterable[AuditEntry]) -> dict[str, dict[str, Trust]]:
    """Each skill's and class's latest trust, read from the chain's `autonomy` lines. A line
    written before lines carried the whole trust gives its level (and a ceiling it set); its
    streak counts from zero."""
    found: dict[str, dict[str, Trust]] = {}
    for entry in entries:
        skill = entry.get("skill")
        if entry.get("action") != "autonomy" or not skill:
            continue
        recorded = entry.get("trust")
        if isinstance(recorded, Mapping):
            cls = str(recorded.get("class"))
            try:
                trust = Trust(
                    level=check_level(str(recorded.get("level"))),
                    ceiling=check_level(str(recorded.get("ceiling"))),
                    streak=int(recorded.get("streak", 0)),
                    last_incident=recorded.get("last_incident"),
                )
            except (ConfigError, TypeError, ValueError):
                continue
        else:  # a line from before: "<class>: <reason>", outcome the level
            cls, _, reason = str(entry.get("reason", "")).partition(": ")
            before = found.get(skill, {}).get(cls, Trust())
            ceiling = re.search(r"ceiling set to (\w+)", reason)
            level, top = str(entry.get("outcome")), ceiling.group(1) if ceiling else before.ceiling
            if level not in LEVELS or top not in LEVELS:
                continue
            trust = Trust(level, top, 0, before.last_incident)
        if cls in CLASSES and LEVELS.index(trust.level) <= LEVELS.index(trust.ceiling):
            found.setdefault(skill, {})[cls] = trust
    return found


class Autonomy:
    """Trust from the chain; writes (under the change lock) append a line, then the mirror."""

    def __init__(self, runs_dir: Path, audit: AuditLog, streak_needed: int = 3) -> None:
        self.path = runs_dir / "autonomy.json"
        self.audit = audit
        self.streak_needed = streak_needed
        self._stamp: tuple[int, int] | None = None
        self._from_chain: dict[str, dict[str, Trust]] = {}

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {"schema_version": SCHEMA_VERSION, "skills": {}, "mined": {}}
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{self.path} is unreadable ({exc}); fix or remove it (every class becomes manual)"
            ) from exc
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ConfigError(f"{self.path} is not a version-{SCHEMA_VERSION} autonomy record")
        data.setdefault("mined", {})
        data.setdefault("skills", {})
        return data

    def _save(self, data: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(data, indent=1, sort_keys=True).encode())

    def _chain(self) -> dict[str, dict[str, Trust]]:
        """Every class the chain records, by skill (re-read only when the chain's file changes);
        a chain that does not verify grants nothing."""
        try:
            info = os.stat(self.audit.path)
            stamp = (info.st_size, info.st_mtime_ns)
        except FileNotFoundError:
            stamp = (0, 0)
        if stamp != self._stamp:
            try:
                ok = self.audit.verify().ok
                entries = self.audit.entries() if ok else []
            except AuditError:
                ok, entries = False, []
            self._from_chain = trusts_in(entries) if ok else {}
            self._stamp = stamp if ok else None
        return self._from_chain

    def trust(self, skill: str, cls: str) -> Trust:
        return self._chain().get(skill, {}).get(check_class(cls), Trust())

    def table(self, skill: str | None = None) -> dict[str, dict[str, Trust]]:
        """Every class of every skill with a record (or of `skill`), manual where none."""
        names = [skill] if skill else sorted(self._chain())
        return {name: {cls: self.trust(name, cls) for cls in CLASSES} for name in names}

    def mirror_problem(self) -> str | None:
        """Why `autonomy.json` cannot be believed, or None when it says what the chain says."""
        try:
            mirrored = self._load()["skills"]
        except ConfigError as exc:
            return str(exc)
        chain = self._chain()
        for name in sorted({*mirrored, *chain}):
            for cls in CLASSES:
                raw = mirrored.get(name, {}).get(cls) if isinstance(mirrored.get(name), Mapping) else None
                try:
                    said = Trust(**raw) if isinstance(raw, Mapping) else Trust()
                except TypeError:
                    said = None
                recorded = chain.get(name, {}).get(cls, Trust())
                # What grants power: the level and the ceiling (streaks are the chain's alone).
                if said is None or (said.level, said.ceiling) != (recorded.level, recorded.ceiling):
                    if not self.path.exists():
                        file_says, how = "nothing", "is missing"
                    else:
                        file_says = f"level {said.level}, ceiling {said.ceiling}" if said else "unreadable"
                        how = "was edited outside Ingot"
                    return (
                        f"{self.path} does not match the audit chain ({name} {cls}: the file says "
                        f"{file_says}, the chain says level {recorded.level}, ceiling {recorded.ceiling}): "
                        f"it {how}, so autonomy promotes nothing until it agrees. The chain's levels "
                        "apply; `ingot autonomy allow` rewrites the file from the chain"
                    )
        return None

    def _put(self, skill: str, cls: str, trust: Trust, actor: str, reason: str) -> Trust:
        self.audit.append(
            action="autonomy",
            skill=skill,
            actor=actor,
            reason=f"{cls}: {reason}",
            outcome=trust.level,
            trust={"class": cls, **dataclasses.asdict(trust)},
        )
        data = self._load_or_empty()
        data["skills"] = {
            name: {c: dataclasses.asdict(t) for c, t in classes.items()}
            for name, classes in self.table().items()
        }
        self._save(data)
        return trust

    def _load_or_empty(self) -> dict[str, Any]:
        """The mirror's bookkeeping (mined scores, reported incidents), or a fresh one."""
        try:
            return self._load()
        except ConfigError:
            return {"schema_version": SCHEMA_VERSION, "skills": {}, "mined": {}}

    def allow(self, skill: str, cls: str, ceiling: str, actor: str) -> Trust:
        """The operator's ceiling for a class; a level above a lowered ceiling comes down to it."""
        old = self.trust(skill, cls)
        level = LEVELS[min(LEVELS.index(old.level), LEVELS.index(check_level(ceiling)))]
        return self._put(
            skill,
            cls,
            dataclasses.replace(old, ceiling=ceiling, level=level),
            actor,
            f"ceiling set to {ceiling}",
        )

    def record(self, skill: str, cls: str, outcome: str, actor: str, why: str) -> Trust:
        """After a promotion: `clean` (every cell green, no override) extends the streak and may
        lift the level; `not-green` (a person approved it anyway) restarts the streak; an
        `override` is an incident."""
        old = self.trust(skill, cls)
        if outcome == "override":
            return (
                self.incident(skill, (cls,), why, actor)[0]
                if old.level != "manual"
                else self._put(
                    skill,
                    cls,
                    dataclasses.replace(old, streak=0, last_incident=why),
                    actor,
                    f"override: {why}",
                )
            )
        if outcome != "clean":
            if old.streak == 0:
                return old
            return self._put(skill, cls, dataclasses.replace(old, streak=0), actor, f"streak restarts: {why}")
        streak = old.streak + 1
        level = old.level
        if streak >= self.streak_needed and LEVELS.index(level) < LEVELS.index(old.ceiling):
            level, streak = LEVELS[LEVELS.index(level) + 1], 0
            reason = f"{old.level} -> {level} after {self.streak_needed} clean changes in a row"
        else:
            reason = f"clean change {streak} of {self.streak_needed} at {level} (ceiling {old.ceiling})"
        return self._put(skill, cls, dataclasses.replace(old, level=level, streak=streak), actor, reason)

    def incident(self, skill: str, classes: tuple[str, ...], why: str, actor: str) -> list[Trust]:
        """Drop each class to manual at once and remember why."""
        when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        out = []
        for cls in classes:
            old = self.trust(skill, cls)
            if old.level == "manual" and old.ceiling == "manual" and old.streak == 0:
                out.append(old)  # nothing was delegated: nothing to take back
                continue
            new = dataclasses.replace(old, level="manual", streak=0, last_incident=f"{when}: {why}")
            moved = f"{old.level} -> manual"
            if old.level == "manual":  # a streak toward a higher level restarts
                moved = "stays manual" + (f", streak {old.streak} -> 0" if old.streak else "")
            out.append(self._put(skill, cls, new, actor, f"incident ({why}): {moved}"))
        return out

    def first_report(self, skill: str, key: str) -> bool:
        """True the first time an incident with this key (say, a drifted revision) is reported."""
        data = self._load_or_empty()
        seen = data.setdefault("reported", {})
        if seen.get(skill) == key:
            return False
        seen[skill] = key
        self._save(data)
        return True

    def mined(self, skill: str, score: float, health: float) -> bool:
        """Record a mined live score; True when it dropped below the health bar from at or above
        it (an incident: the caller reports it through `ChangeControl.report_incident`)."""
        data = self._load_or_empty()
        before = data["mined"].get(skill)
        data["mined"][skill] = score
        self._save(data)
        return score < health and before is not None and before >= health
