"""The autopilot: promotes what earned it, and takes it back at the first incident.

Runs in the long-lived process (`ingot serve`'s background thread, ingot/background.py; or
`ingot autonomy tick` from cron). Each tick, for every pending change: its class's trust, its
passport, and (supervised) its review window, which starts at the change's latest `propose` /
`evidence` line in the audit chain, so a restart mid-window loses nothing. A change autonomy
may promote goes through the same `ChangeControl.approve` as a person's click, with actor
`autonomy`, under the same lock and with every re-verification. It also watches: a skill that
drifted is an incident. Nothing here writes a skills root itself.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ingot.errors import IngotError
from optimize.control.autonomy import Decision, decide
from optimize.control.changes import ChangeControl
from optimize.control.passport import change_class

log = logging.getLogger(__name__)
ACTOR = "autonomy"


@dataclass(frozen=True)
class Step:
    skill: str
    change_id: str | None
    did: str  # "promoted" | "waiting" | "left for a person" | "incident" | "failed"
    why: str

    @property
    def quiet(self) -> bool:
        """Repeated every tick while nothing changes: not worth a log line at INFO."""
        return self.did in ("waiting", "left for a person")

    def __str__(self) -> str:
        return f"{self.skill} {self.change_id or '-'} {self.did}: {self.why}"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Autopilot:
    def __init__(self, control: ChangeControl, clock: Callable[[], dt.datetime] = utcnow) -> None:
        self.control, self.clock = control, clock
        self.window_s = control.review_window_s

    def decision(self, skill: str) -> tuple[Decision, str | None] | None:
        """What autonomy would do with `skill`'s pending change now, and the change id."""
        change = self.control.queue.get(skill)
        if change is None:
            return None
        passport = self.control.passport(change)
        trust = self.control.autonomy.trust(skill, change_class(change.kind, {}))
        start = self.control.queued_at(change) or self.clock()
        return decide(trust, passport, start, self.window_s, self.clock()), change.id

    def tick(self) -> list[Step]:
        steps: list[Step] = []
        steps += self._watch()
        for change in self.control.pending():
            try:
                found = self.decision(change.skill)
            except IngotError as exc:
                steps.append(Step(change.skill, change.id, "failed", str(exc)))
                continue
            if found is None:
                continue
            decision, change_id = found
            if decision.action == "human":
                steps.append(Step(change.skill, change_id, "left for a person", decision.why))
            elif decision.action == "wait":
                steps.append(Step(change.skill, change_id, "waiting", decision.why))
            else:
                steps.append(self._promote(change.skill, change_id, decision.why))
        return steps

    def _promote(self, skill: str, change_id: str | None, why: str) -> Step:
        try:
            outcome = self.control.approve(skill, ACTOR, str(change_id))
        except IngotError as exc:  # refused, conflict, a full disk: a person will see it pending
            log.warning("autonomy could not promote %s %s: %s", skill, change_id, exc)
            return Step(skill, change_id, "failed", str(exc))
        return Step(skill, change_id, "promoted", f"{why}; live at {outcome.to_revision[:12]}")

    def _watch(self) -> list[Step]:
        """Drift is an incident: a managed skill that is no longer the revision Ingot put live."""
        steps = []
        for skill in self.control.status().drifted:
            reported = self.control.report_incident(
                skill.name,
                f"drift: live {str(skill.live_revision)[:12]}, audited {str(skill.audited_revision)[:12]}",
                ACTOR,
                key=str(skill.live_revision),
            )
            if reported:
                steps.append(Step(skill.name, None, "incident", "; ".join(reported)))
        return steps
