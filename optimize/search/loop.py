"""`ingot loop [SKILL…]`: the background optimizer. Mine, and propose only where it is needed.

For every skill with an eval task set (or the ones named), mine its recorded traffic; a skill
whose mean score is under LOOP_HEALTH_THRESHOLD gets the passes in LOOP_PASSES (body,
description). Everything it produces is quarantined for a human: the loop never promotes.
Skills with no scored traffic are reported and left alone (no evidence of a problem).

The two passes never displace each other. When the body pass queued a change whose passport is
not blocked, the description pass *composes*: its description on that change's files, measured
anew as one change to both (checks, routing impact, A/B). If its passport is at least as good,
it replaces the body change (archived as displaced, still visible); if worse, it is archived as
withheld and the body change keeps its slot.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingot.errors import IngotError
from ingot.seal import Seal
from mcp_server.library import Library
from optimize.control.autopilot import report_incident
from optimize.control.changes import ChangeControl
from optimize.measure.ab import ABRunner
from optimize.measure.evaluate import Candidate, Inputs
from optimize.measure.evaluate import evaluate as measure
from optimize.measure.execcheck import Sandbox
from optimize.measure.judge import Judge
from optimize.measure.mining import mine
from optimize.measure.mining import record as record_score
from optimize.measure.regress import ReplayContext
from optimize.measure.taskset import load_task_set
from optimize.models.llm import LLMClient
from optimize.models.traces import TraceStore
from optimize.search.describe import optimize_description, propose_description, with_description
from optimize.search.pipeline import optimize_body
from optimize.search.research import OFF, Researcher


@dataclass(frozen=True)
class LoopEntry:
    skill: str
    mean_score: float | None
    action: str  # "healthy" | "no traffic" | "optimized" | "error"
    detail: str


def skills_with_task_sets(tasks_dir: Path) -> list[str]:
    return sorted(p.stem for p in tasks_dir.glob("*.yaml")) if tasks_dir.exists() else []


def run_loop(
    skills: Sequence[str],
    library: Library,
    control: ChangeControl,
    llm: LLMClient,
    judge: Judge,
    store: TraceStore,
    tasks_dir: Path,
    threshold: float,
    passes: Sequence[str],
    candidates: int = 5,
    progress: Callable[[str], None] = lambda _m: None,
    sandbox: Sandbox | None = None,
    research: Researcher | None = None,
    replay: ReplayContext | None = None,
) -> list[LoopEntry]:
    entries = []
    for skill in skills or skills_with_task_sets(tasks_dir):
        progress(f"mining {skill}")
        try:
            report = mine(skill, store, library, judge, control.runs_dir / "cache" / "verdicts.jsonl")
            record_score(control.runs_dir / "mining", report, dt.datetime.now(dt.UTC))
            if report.mean_score is not None and control.autonomy.mined(skill, report.mean_score, threshold):
                why = f"mined live score {report.mean_score:.2f} dropped below {threshold:.2f}"
                progress("; ".join(report_incident(control, skill, why, "ingot-loop")))
            if report.mean_score is None:
                entries.append(LoopEntry(skill, None, "no traffic", "no scored traces; nothing to fix"))
                continue
            if report.mean_score >= threshold:
                entries.append(
                    LoopEntry(
                        skill,
                        report.mean_score,
                        "healthy",
                        f"mean {report.mean_score:.2f} >= {threshold:.2f}",
                    )
                )
                continue
            details = []
            if "body" in passes:
                progress(f"body pass for {skill}")
                outcome = optimize_body(
                    skill,
                    control,
                    library,
                    llm,
                    judge,
                    tasks_dir,
                    candidates,
                    sandbox=sandbox,
                    research=research,
                    replay=replay,
                    traffic=_traffic(store),
                )
                details.append(f"body: {outcome.proposed or outcome.reason}")
            if "description" in passes:
                progress(f"description pass for {skill}")
                details.append(
                    "description: "
                    + _description_pass(
                        skill, library, control, llm, judge, store, tasks_dir, candidates, sandbox, research
                    )
                )
            entries.append(LoopEntry(skill, report.mean_score, "optimized", "; ".join(details)))
        except IngotError as exc:  # one skill's problem must not stop the loop for the others
            entries.append(LoopEntry(skill, None, "error", str(exc)))
    return entries


def _traffic(store: TraceStore) -> list[str]:
    """Recent routed tasks, for routing impact."""
    return [r.task for r in store.read().records if r.route in ("match", "related") and r.task]


def _passing_body_change(control: ChangeControl, skill: str) -> Any:
    """The skill's pending change if the loop's body pass queued it and nothing in its passport
    failed (ready, or waiting for acknowledgement of what is missing)."""
    change = control.queue.get(skill)
    if change is None or change.source != "optimizer" or change.kind != "body":
        return None
    verdict = control.passport(change)
    return change if verdict is not None and verdict.sound else None


def _description_pass(
    skill: str,
    library: Library,
    control: ChangeControl,
    llm: LLMClient,
    judge: Judge,
    store: TraceStore,
    tasks_dir: Path,
    candidates: int,
    sandbox: Sandbox | None,
    research: Researcher | None,
) -> str:
    """Queue the description pass's result, composed with a passing body change when there is one."""
    cases = load_task_set(tasks_dir, skill).routing
    traffic = _traffic(store)
    body_change = _passing_body_change(control, skill)
    if body_change is None:
        change_id, reason = propose_description(
            skill, library, control, llm, cases, candidates, research, tasks_dir, traffic
        )
        return change_id or reason
    brief = research.brief(skill, library.get(skill).description) if research else OFF
    found = optimize_description(skill, library, llm, cases, candidates, brief)
    if found.chosen is None:
        return found.reason
    files = dict(body_change.files)
    files["SKILL.md"] = with_description(files["SKILL.md"].decode("utf-8"), found.chosen).encode()
    runner = ABRunner(
        llm,
        judge,
        control.runs_dir / "cache" / "ab",
        sandbox,
        embed=library.embed,
        seal=Seal(control.runs_dir / "seal.key"),
        min_samples=control.thresholds.min_samples,
    )
    composed = Candidate(
        skill,
        "both",
        "composed",
        files,
        body_change.champion_revision,
        control.champion_files(skill),
        frozenset(found.seen),
    )
    measurements = measure(composed, Inputs(library, tasks_dir, traffic, runner))
    proposed = control.propose(
        skill,
        "optimizer",
        files,
        measurements,
        note=f"composed: the body of {body_change.id} with the description pass's winner",
        cost=llm.ledger.totals()["total"] if llm.ledger else None,
        measured_against=body_change.champion_revision,
        new=False,
        seen=found.seen,
    )
    if proposed.withheld:
        return f"composed with {body_change.id} but not queued: {proposed.withheld}"
    return f"{proposed.change.id} (composed with {body_change.id}, which it displaced)"
