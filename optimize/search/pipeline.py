"""`ingot optimize SKILL`: the body pass, from task set to a quarantined, evidenced rewrite.

Load the skill's task set (refusing a leaky one), search for a better body on the train tasks
(bestofn.py), measure the winner against the live champion on the sealed holdout (ab.py), replay
the skill's blessed goldens with it (regress.py: the "replay" cell), measure every other cell a
body change has (admission checks, routing impact, sandbox checks: measure/evaluate.py, as for
any change), and hand the result to change control as a pending change with its evidence and
cost. It proposes; it never activates: nothing here writes a skills root. Each step (search,
A/B, every cell) is reported to the caller's `on_step` as it starts, with the work done inside.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ingot.errors import IngotError
from ingot.progress import OnStep, Steps
from ingot.seal import Seal
from mcp_server.library import Library
from mcp_server.skillfiles import read_served_files
from mcp_server.skillmd import with_body
from optimize.control.changes import ChangeControl
from optimize.measure.ab import ABRefused, ABRunner, Arm
from optimize.measure.cache import SealedCache
from optimize.measure.evaluate import STEPS as CELL_STEPS
from optimize.measure.evaluate import Candidate, Inputs, steps_of
from optimize.measure.evaluate import evaluate as measure_cells
from optimize.measure.execcheck import Sandbox
from optimize.measure.judge import Judge
from optimize.measure.regress import ReplayContext
from optimize.measure.taskset import load_task_set, origin
from optimize.models.llm import LLMClient
from optimize.search.bestofn import STEPS as SEARCH_STEPS
from optimize.search.bestofn import CandidateSearch
from optimize.search.research import OFF, Researcher


@dataclass(frozen=True)
class Outcome:
    skill: str
    proposed: str | None  # pending change id, or None
    verdict: str | None  # the passport's state (ready, needs-acknowledgement, blocked)
    reason: str
    ab: dict | None = None


def optimize_body(
    skill: str,
    control: ChangeControl,
    library: Library,
    llm: LLMClient,
    judge: Judge,
    tasks_dir: Path,
    candidates: int = 5,
    sandbox: Sandbox | None = None,
    research: Researcher | None = None,
    provenance: dict | None = None,
    replay: ReplayContext | None = None,
    traffic: Sequence[str] = (),
    on_step: OnStep | None = None,
) -> Outcome:
    tasks = load_task_set(tasks_dir, skill)
    if tasks.leakage:
        raise IngotError(f"the task set for {skill!r} can never promote: {'; '.join(tasks.leakage)}")
    seal = Seal(control.runs_dir / "seal.key")
    runner = ABRunner(
        llm,
        judge,
        control.runs_dir / "cache" / "ab",
        sandbox,
        embed=library.embed,
        seal=seal,
        min_samples=control.thresholds.min_samples,
    )
    problem = runner.precheck(tasks)  # before paying for a search whose A/B could not give a verdict
    if problem:
        raise ABRefused(f"{skill}: {problem}")
    champion = library.get(skill)
    champion_files = read_served_files(champion)  # read now: the search can take minutes
    brief = research.brief(skill, champion.description) if research else OFF
    rollouts = SealedCache(control.runs_dir / "cache" / "rollout", seal)
    cells = Inputs(library, tasks_dir, traffic)
    steps = Steps([*SEARCH_STEPS, CELL_STEPS["ab"], *steps_of(cells, ab_given=True), "replay"], on_step)
    search = CandidateSearch(llm, judge, candidates, brief, rollouts).search(
        skill, champion.revision, champion.body, tasks.train, steps
    )
    if search.winner is None:
        return Outcome(skill, None, None, search.reason)
    files = dict(champion_files)
    files["SKILL.md"] = with_body(files["SKILL.md"].decode("utf-8"), search.winner.body).encode()
    ab = runner.run(
        Arm(skill, champion.revision, champion.body, champion_files),
        Arm(skill, search.winner.id, search.winner.body, files),
        tasks,
        steps.begin(CELL_STEPS["ab"]),
    )
    ab["task_set"] = origin(tasks_dir, skill)
    candidate = Candidate(skill, "body", search.winner.id, files, champion.revision, champion_files)
    measurements = measure_cells(candidate, cells, ab=ab, steps=steps)
    count = steps.begin("replay")
    measurements["replay"] = (
        replay.cell(skill, champion_files, files, llm, sandbox, count)
        if replay is not None
        else {"status": "not_measured", "why": "regression replay was not configured for this run"}
    )
    measurements["search"] = {
        "status": "measured",
        "seed_train_mean": round(search.seed_mean, 6),
        "winner": search.winner.id,
        "asked_for": search.winner.angle,
        "winner_train_mean": round(search.winner.mean, 6),
        "candidates": len(search.candidates),
        "diagnosis": list(search.diagnosis),
        "summary": search.reason,
        "research": brief.evidence(),
    }
    cost = llm.ledger.totals()["total"] if llm.ledger else None
    proposed = control.propose(
        skill,
        "optimizer",
        files,
        measurements,
        note=search.reason,
        cost=cost,
        measured_against=champion.revision,
        provenance={**(provenance or {}), "task_set": ab["task_set"]},
        new=False,
    )
    verdict = _verdict(control, proposed.change.evidence_path)
    if proposed.withheld:
        return Outcome(skill, None, verdict, f"{search.reason}; not queued: {proposed.withheld}", ab)
    return Outcome(skill, proposed.change.id, verdict, search.reason, ab)


def _verdict(control: ChangeControl, evidence_path: str | None) -> str | None:
    from optimize.control import evidence

    if evidence_path is None:
        return None
    return evidence.load(control.runs_dir / evidence_path).data["passport"]["state"]
