"""Evaluate a pending change end to end: measure every evidence cell, attach the new bundle.

One function for every way a change gets evaluated: `ingot evaluate SKILL --change ID`, the
automatic run after `ingot propose` and after an agent's `create_skill` when models are
configured, and the UI's Evaluate action (which runs the command). Settings become objects here
(like runtime.py); measuring is optimize/measure/evaluate.py's job and attaching the bundle is
change control's. A failed run keeps what it paid for (runtime.model_run's journal): rerunning
the same command resumes. Progress (each cell as it starts, the work done inside it) goes to the
caller's `on_step` (ingot/progress.py); nothing here prints.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ingot.model_runtime import (
    evaluation_inputs,
    model_run,
    models_missing,
    provenance,
    replay_context,
    sandbox,
)
from ingot.progress import Count, OnStep, Steps
from ingot.runtime import actor
from ingot.settings import Settings
from mcp_server.library import Library
from optimize.control import evidence as evidence_mod
from optimize.control.changes import ChangeControl
from optimize.control.evidence import Evidence
from optimize.control.kinds import KINDS, why_not_applicable
from optimize.control.passport import Passport, passport
from optimize.control.proposals import Proposed
from optimize.measure.evaluate import Candidate, steps_of
from optimize.measure.evaluate import evaluate as measure
from optimize.models.llm import LLMClient

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Evaluated:
    change_id: str
    evidence: Evidence
    passport: Passport  # the verdict, judged against what is live now
    ledger: str | None  # where the run's ledger was written


@dataclass(frozen=True)
class Measured:
    """One run's measurements for a candidate, with what they cost and what produced them."""

    measurements: dict[str, Any]
    cost: dict[str, Any] | None
    provenance: dict[str, Any]


def measured_run(
    settings: Settings,
    library: Library,
    candidate: Candidate,
    journal: str,
    record: Callable[[Measured], T],
    on_step: OnStep | None = None,
) -> T:
    """Measure `candidate`'s every cell in one paid run and hand the result to `record` (which
    attaches or queues it) inside the run, so a failure keeps the journal and a rerun resumes.
    `on_step` hears each cell start and each unit of work inside it."""
    with model_run(settings, f"evaluate-{candidate.skill}", journal=journal) as llm:
        missing = models_missing(settings)
        inputs = evaluation_inputs(settings, library, llm if missing is None else None)
        inputs.extra_cells = {"replay": _replay_cell(settings, llm, missing)}
        measurements = measure(candidate, inputs, steps=Steps(steps_of(inputs), on_step))
        totals = llm.ledger.totals() if llm.ledger else None
        cost = (
            {**totals["total"], "run_id": totals["run_id"], "ledger": f"ledgers/{totals['run_id']}.json"}
            if totals
            else None
        )
        ab = measurements.get("ab", {})
        record_of = {
            **provenance(settings, llm),
            "task_set": ab.get("task_set") if isinstance(ab, dict) else None,
        }
        return record(Measured(measurements, cost, record_of))


def evaluate_change(
    settings: Settings,
    library: Library,
    control: ChangeControl,
    skill: str,
    change_id: str,
    by: str | None = None,
    on_step: OnStep | None = None,
) -> Evaluated:
    """Measure the pending `change_id` of `skill` and rest it on the new bundle (`on_step`: see
    `measured_run`)."""
    change = control.pending_change(skill, change_id)  # unknown, decided or displaced: one clear error
    candidate = Candidate(
        skill,
        change.kind,
        None if change.removal else change.candidate_revision,
        None if change.removal else change.files,
        change.champion_revision,
        control.champion_files(skill) if change.champion_revision else None,
        frozenset(change.seen),
    )

    def attach(found: Measured) -> Evidence:
        return control.attach_evidence(
            skill,
            change_id,
            found.measurements,
            by or actor(settings),
            cost=found.cost,
            provenance=found.provenance,
            measured_against=change.champion_revision,
        )[1]

    bundle = measured_run(settings, library, candidate, f"evaluate-{skill}-{change_id}", attach, on_step)
    verdict = passport(bundle.data, control.live_revision(skill), control.thresholds)
    ledger = (bundle.data.get("cost") or {}).get("ledger")
    return Evaluated(change_id, bundle, verdict, ledger)


def propose_measured(
    settings: Settings,
    library: Library,
    control: ChangeControl,
    skill: str,
    files: Mapping[str, bytes],
    note: str | None,
    new: bool,
    on_step: OnStep | None = None,
) -> tuple[Proposed, Evaluated]:
    """`ingot propose` with evaluation: admit the candidate (refused at once by a failed check),
    measure every cell before it is queued, then queue it on that evidence, so whether it
    displaces or is withheld behind the waiting change is judged on what it really is."""
    from optimize.control.kinds import what_changes
    from optimize.control.promote import tree_revision
    from optimize.control.quarantine import admission

    admission(skill, files, library.similarity)  # a failed check refuses it before anything is paid
    champion = control.champion_files(skill)
    kind = what_changes(champion, files, skill).kind
    revision = tree_revision(files)
    candidate = Candidate(skill, kind, revision, files, control.live_revision(skill), champion)

    def queue(found: Measured) -> Proposed:
        return control.propose(
            skill,
            "operator",
            files,
            found.measurements,
            note,
            cost=found.cost,
            measured_against=candidate.champion_revision,
            provenance=found.provenance,
            new=new,
        )

    journal = f"propose-{skill}-{revision[:12]}"
    proposed = measured_run(settings, library, candidate, journal, queue, on_step)
    bundle = evidence_mod.load(control.runs_dir / str(proposed.change.evidence_path))
    verdict = passport(bundle.data, control.live_revision(skill), control.thresholds)
    ledger = (bundle.data.get("cost") or {}).get("ledger")
    return proposed, Evaluated(proposed.change.id, bundle, verdict, ledger)


def _replay_cell(
    settings: Settings, llm: LLMClient, missing: str | None
) -> Callable[[Candidate, Count], dict]:
    """The regression-replay cell: the skill's blessed runs replayed with the candidate's bytes."""

    def cell(change: Candidate, count: Count) -> dict:
        why = why_not_applicable(change.kind, "replay") if change.kind in KINDS else None
        if why is not None:  # nothing to pay for: the passport shows the cell as n/a anyway
            return {"status": "not_applicable", "why": why}
        if missing is not None:
            return {"status": "not_measured", "why": missing}
        context = replay_context(settings)
        return context.cell(
            change.skill, change.champion_files, change.candidate_files, llm, sandbox(settings), count
        )

    return cell


class BackgroundEvaluator:
    """Evaluates changes queued by agents (`create_skill`) one at a time in a worker thread of the
    serving process, so a tool call never waits on a model. A failure is logged and leaves the
    change pending with its admission evidence; `ingot evaluate` can run it again."""

    def __init__(self, settings: Settings, library: Library, control: ChangeControl) -> None:
        self.settings, self.library, self.control = settings, library, control
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._worker = threading.Thread(target=self._run, name="ingot-evaluator", daemon=True)
        self._worker.start()

    def submit(self, skill: str, change_id: str) -> None:
        self._queue.put((skill, change_id))

    def close(self) -> None:
        self._queue.put(None)
        self._worker.join(timeout=30)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            skill, change_id = item
            try:
                result = evaluate_change(
                    self.settings, self.library, self.control, skill, change_id, by="ingot-auto"
                )
                log.info("evaluated %s %s: %s", skill, change_id, result.passport.state)
            except Exception as exc:  # the worker must outlive one bad evaluation
                log.warning("could not evaluate %s %s: %s (run `ingot evaluate`)", skill, change_id, exc)
