"""`ingot loop [SKILL…]`: the background optimizer. Mine, and propose only where it is needed.

For every skill with an eval task set (or the ones named), mine its recorded traffic; a skill
whose mean score is under LOOP_HEALTH_THRESHOLD gets the passes in LOOP_PASSES (body,
description). Everything it produces is quarantined for a human: the loop never promotes.
Skills with no scored traffic are reported and left alone (no evidence of a problem).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ingot.errors import IngotError
from mcp_server.library import Library
from optimize.control.changes import ChangeControl
from optimize.measure.execcheck import Sandbox
from optimize.measure.judge import Judge
from optimize.measure.mining import mine
from optimize.measure.regress import ReplayContext
from optimize.measure.taskset import load_task_set
from optimize.models.llm import LLMClient
from optimize.models.traces import TraceStore
from optimize.search.describe import propose_description
from optimize.search.pipeline import optimize_body
from optimize.search.research import Researcher


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
                    skill, control, library, llm, judge, tasks_dir, candidates, sandbox, research, replay
                )
                details.append(f"body: {outcome.proposed or outcome.reason}")
            if "description" in passes:
                progress(f"description pass for {skill}")
                cases = load_task_set(tasks_dir, skill).routing
                change_id, reason = propose_description(
                    skill, library, control, llm, cases, candidates, research
                )
                details.append(f"description: {change_id or reason}")
            entries.append(LoopEntry(skill, report.mean_score, "optimized", "; ".join(details)))
        except IngotError as exc:  # one skill's problem must not stop the loop for the others
            entries.append(LoopEntry(skill, None, "error", str(exc)))
    return entries
