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
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from ingot.errors import IngotError
from optimize.control import evidence as evidence_mod
from optimize.control.autonomy import CLASSES, Decision, Trust, decide, effective
from optimize.control.changes import ChangeControl
from optimize.control.kinds import AUTONOMY_CLASSES, CELLS
from optimize.control.passport import FAIL, Cell, Passport, passport
from optimize.control.pending import PendingChange
from optimize.control.promote import ABSENT

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


def change_passport(control: ChangeControl, change: PendingChange) -> Passport:
    """The change's evidence as passport cells, judged against what is live now."""
    try:
        data = evidence_mod.load(control.runs_dir / (change.evidence_path or "")).data
    except evidence_mod.EvidenceError as exc:
        why = f"the evidence cannot be read ({exc}): re-evaluate it (`ingot evaluate`)"
        return Passport(change.kind, tuple(Cell(name, FAIL, why) for name in CELLS))
    return passport(data, control.live_revision(change.skill), control.thresholds, change.id)


def change_trust(control: ChangeControl, change: PendingChange) -> Trust | None:
    """The trust autonomy has for `change`: the least of its classes' (None: never automatic)."""
    classes = AUTONOMY_CLASSES.get(change.kind, ("body", "description"))
    return effective([control.autonomy.trust(change.skill, cls) for cls in classes])


def queued_at(control: ChangeControl, change: PendingChange) -> dt.datetime | None:
    """When the change's latest evidence was attached (its `propose` or `evidence` line): where a
    supervised review window starts, kept in the chain so a restart loses nothing."""
    lines = [
        e
        for e in control.audit.entries()
        if e.get("change_id") == change.id and e.get("action") in ("propose", "evidence")
    ]
    return dt.datetime.fromisoformat(lines[-1].time) if lines else None


def report_incident(
    control: ChangeControl, skill: str, why: str, actor: str, key: str | None = None
) -> list[str]:
    """An incident after a promotion (drift, a failing replay of the live revision, a mined score
    below the health bar): every class of `skill` drops to manual, and if autonomy itself put the
    live revision there, it is rolled back to the one it displaced (a skill it created is
    removed). `key` makes reports of the same occurrence (say, one drifted revision) count once."""
    with control.writing():
        if key is not None and not control.autonomy.first_report(skill, key):
            return []
        notes = [f"{skill}: {why}; every class is manual"]
        control.autonomy.incident(skill, CLASSES, why, actor)
        last = next(  # the last switch of the live folder, by anyone
            (
                e
                for e in reversed(control.history(skill))
                if e.get("action") in ("promote", "rollback") and str(e.get("outcome", "")).startswith("done")
            ),
            None,
        )
        root = control.root_of(skill)
        undo = last is not None and last.get("action") == "promote" and last.get("actor") == ACTOR
        displaced = last.get("from_revision") if last is not None else None
        target = str(displaced or ABSENT)
        if undo and root is not None and target in control.snapshots(skill):
            try:
                control.promoter.rollback(
                    skill, root, target, actor, f"automatic rollback after incident: {why}"
                )
                notes.append(f"{skill}: autonomy's promotion rolled back to {target[:12]}")
            except (OSError, IngotError) as exc:
                notes.append(f"{skill}: the automatic rollback failed ({exc}); roll it back by hand")
        return notes


class Autopilot:
    def __init__(
        self,
        control: ChangeControl,
        clock: Callable[[], dt.datetime] = utcnow,
        disk_state: Callable[[], Hashable] | None = None,
    ) -> None:
        """`disk_state` (the serving library's `on_disk`) lets the drift watch skip its full
        status scan while nothing on disk has changed: at 10k skills that scan costs 1.7 s of
        CPU, the check 2 ms (scripts/bench_drift_watch.py). Without it, every tick scans."""
        self.control, self.clock, self.disk_state = control, clock, disk_state
        self.window_s = control.review_window_s
        self._watched: Hashable = object()  # the disk state the last complete watch saw

    def decision(self, skill: str) -> tuple[Decision, str | None] | None:
        """What autonomy would do with `skill`'s pending change now, and the change id."""
        change = self.control.queue.get(skill)
        if change is None:
            return None
        cells = change_passport(self.control, change)
        trust = change_trust(self.control, change)
        start = queued_at(self.control, change) or self.clock()
        return decide(trust, cells, start, self.window_s, self.clock()), change.id

    def tick(self) -> list[Step]:
        steps: list[Step] = []
        steps += self._watch()
        problem = self.control.autonomy.mirror_problem()
        if problem is not None:  # fail-closed: a state file that disagrees with the chain
            return [*steps, Step("autonomy", None, "failed", problem)]
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
        state = self.disk_state() if self.disk_state is not None else object()
        if state == self._watched:
            return []  # no folder changed since a watch that finished: no new drift to find
        steps = []
        for skill in self.control.status().drifted:
            reported = report_incident(
                self.control,
                skill.name,
                f"drift: live {str(skill.live_revision)[:12]}, audited {str(skill.audited_revision)[:12]}",
                ACTOR,
                key=str(skill.live_revision),
            )
            if reported:
                steps.append(Step(skill.name, None, "incident", "; ".join(reported)))
        self._watched = state  # only now: a watch that raised is tried again next tick
        return steps
