"""`ingot optimize SKILL --description`: a better description, measured by the real router.

The teacher proposes descriptions from the routing cases the current one gets wrong (the only
model calls). Each candidate is scored by the live router over the whole library with the
skill's description replaced in memory: top-1 and recall@3 on cases that expect a skill, and
no-route precision (the skill does not take cases meant for nothing or for others). The skill's
routing cases are split by a hash of their text and candidates are *selected* on one half only.
The evidence for the chosen one is the routing-impact cell (measure/impact.py) over every
routing case of every task set and recent traffic, with the select half (the cases the teacher
was shown, recorded with the change) and any case pasted into the candidate left out of the
metrics as leakage: no metric may regress (each on enough held-out cases), one must improve,
and no other skill's case may be taken. A candidate whose description would shadow or copy
another skill's is never chosen.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ingot.progress import OnStep, Steps
from mcp_server.library import Library
from mcp_server.router import Router
from mcp_server.skillfiles import read_served_files
from mcp_server.skillmd import with_description
from optimize.measure.checks import collision_check
from optimize.measure.evaluate import Candidate, Inputs, steps_of
from optimize.measure.evaluate import evaluate as measure_cells
from optimize.measure.impact import METRIC_NAMES, case_key
from optimize.measure.taskset import RoutingCase
from optimize.models.llm import LLMClient
from optimize.models.prompting import render
from optimize.search.research import OFF, Brief, Researcher


class _Proposals(BaseModel):
    descriptions: list[str]


@dataclass(frozen=True)
class DescriptionOutcome:
    chosen: str | None
    measurements: dict | None
    reason: str
    seen: tuple[str, ...] = ()  # case_key of every case the teacher was shown (the select half)


def split(cases: Sequence[RoutingCase]) -> tuple[list[RoutingCase], list[RoutingCase]]:
    """(select, gate): a stable split by the hash of each case's text."""
    select, gate = [], []
    for case in cases:
        (select if hashlib.sha256(case.task.encode()).digest()[0] % 2 == 0 else gate).append(case)
    return select, gate


def metrics(router: Router, skill: str, cases: Sequence[RoutingCase]) -> dict[str, float | None]:
    """top-1 and recall@3 over the cases expecting a skill, no-route precision over the cases not
    expecting `skill`; a metric with no cases is None (missing), never a perfect score."""
    expecting = [c for c in cases if c.expected]
    others = [c for c in cases if c.expected != skill]
    top1 = recall3 = clean = 0
    for case in cases:
        result = router.route(case.task, k=3)
        chosen = result.skill.name if result.skill else None
        if case.expected:
            top1 += chosen == case.expected
            recall3 += case.expected in {c.name for c in result.ranked[:3]}
        if case.expected != skill:
            clean += chosen != skill
    return {
        "top1": round(top1 / len(expecting), 4) if expecting else None,
        "recall_at_3": round(recall3 / len(expecting), 4) if expecting else None,
        "no_route_precision": round(clean / len(others), 4) if others else None,
    }


def _selection_score(values: Mapping[str, float | None]) -> float:
    """What candidates are ordered by on the select half: the sum of the measured metrics (a
    missing one is missing for every candidate alike, so it adds nothing to any)."""
    return sum(v for v in values.values() if v is not None)


def router_with(library: Library, skill: str, description: str | None) -> Router:
    """A private router over the served library, with `skill`'s description replaced."""
    if description is None:
        return library.router_with({})
    return library.router_with({skill: dataclasses.replace(library.get(skill), description=description)})


def optimize_description(
    skill: str,
    library: Library,
    llm: LLMClient,
    cases: Sequence[RoutingCase],
    n: int = 5,
    brief: Brief = OFF,
    steps: Steps | None = None,
) -> DescriptionOutcome:
    steps = steps or Steps(DESCRIBE_STEPS)
    select, gate = split(cases)
    if not select or not gate:
        return DescriptionOutcome(
            None,
            None,
            f"need routing cases on both sides of the split "
            f"(select {len(select)}, gate {len(gate)}); add more routing cases",
        )
    current = library.get(skill).description
    champion = router_with(library, skill, None)
    listing = "\n".join(f"- {'SHOULD' if c.expected == skill else 'SHOULD NOT'}: {c.task}" for c in select)
    prompt = render("optimize_describe", n=n, name=skill, description=current, cases=listing)
    prompt += brief.prompt_section()
    steps.begin(DESCRIBE_STEPS[0])
    proposals, _ = llm.complete_json("teacher", [{"role": "user", "content": prompt}], _Proposals)
    scored: list[tuple[float, str, Router]] = []
    refused: list[str] = []
    texts = [d.strip() for d in proposals.descriptions if d.strip()][:n]
    count = steps.begin(DESCRIBE_STEPS[1])
    for done, text in enumerate(texts):
        count(done, len(texts), "candidates routed")
        if len(text) > 1024:
            refused.append("over 1024 characters")
            continue
        similarity = library.similarity(skill, text)
        collision = collision_check(similarity.named, skill, similarity.alone)
        if not collision.passed:
            refused.append(collision.detail)
            continue
        router = router_with(library, skill, text)
        scored.append((_selection_score(metrics(router, skill, select)), text, router))
    count(len(texts), len(texts), "candidates routed")
    if not scored:
        return DescriptionOutcome(
            None, None, "no usable candidate: " + "; ".join(refused or ["none proposed"])
        )
    _, chosen, router = max(scored, key=lambda item: item[0])
    before, after = metrics(champion, skill, gate), metrics(router, skill, gate)
    measurements = {
        "routing": {
            "status": "measured",
            "champion": before,
            "challenger": after,
            "collisions": [],  # clashing candidates were refused above; the passport re-checks this
            "select_cases": len(select),
            "held_out_cases": len(gate),
            "refused": refused,
            "research": brief.evidence(),
        }
    }
    seen = tuple(sorted(case_key(c.task) for c in select))
    shown = ", ".join(
        f"{METRIC_NAMES.get(m, m)} {before[m]:.3f} -> {after[m]:.3f}"
        for m in before
        if isinstance(before.get(m), int | float) and isinstance(after.get(m), int | float)
    )
    why = (
        f"picked on the select half of its routing cases ({len(select)}); on the other half "
        f"({len(gate)}): {shown or 'no metric measured'}. The passport (routing impact, leaving out "
        "what the author saw) decides"
    )
    return DescriptionOutcome(chosen, measurements, why, seen)


DESCRIBE_STEPS = ("writing candidate descriptions", "routing the candidates")  # then the cells


def description_files(library: Library, skill: str, description: str) -> Mapping[str, bytes]:
    files = read_served_files(library.get(skill))
    files["SKILL.md"] = with_description(files["SKILL.md"].decode("utf-8"), description).encode()
    return files


def description_evidence(
    skill: str,
    library: Library,
    files: Mapping[str, bytes],
    tasks_dir: Path,
    traffic: Sequence[str],
    selection: dict,
    seen: tuple[str, ...] = (),
    steps: Steps | None = None,
) -> dict[str, Any]:
    """The cells a description change rests on, measured as for any change (measure/evaluate.py):
    admission checks and routing impact over every routing case and recent traffic, the cases
    the teacher was shown (`seen`) left out as leakage; plus how the candidate was selected."""
    champion = library.get(skill)
    candidate = Candidate(skill, "description", "candidate", files, champion.revision, None, frozenset(seen))
    cells = measure_cells(candidate, Inputs(library, tasks_dir, traffic), steps=steps)
    return {**cells, "selection": {"status": "measured", **selection}}


def propose_description(
    skill: str,
    library: Library,
    control: Any,
    llm: LLMClient,
    cases: Sequence[RoutingCase],
    candidates: int = 5,
    research: Researcher | None = None,
    tasks_dir: Path | None = None,
    traffic: Sequence[str] = (),
    on_step: OnStep | None = None,
) -> tuple[str | None, str]:
    """Run the description pass and queue its winner: (change id or None, what happened);
    each step reported to `on_step` as it starts."""
    champion = library.get(skill)
    brief = research.brief(skill, champion.description) if research else OFF
    tasks_dir = tasks_dir or Path("optimize/tasks")
    steps = Steps([*DESCRIBE_STEPS, *steps_of(Inputs(library, tasks_dir, traffic))], on_step)
    found = optimize_description(skill, library, llm, cases, candidates, brief, steps)
    if found.chosen is None or found.measurements is None:
        return None, found.reason
    files = description_files(library, skill, found.chosen)
    measurements = description_evidence(
        skill,
        library,
        files,
        tasks_dir,
        traffic,
        dict(found.measurements["routing"]),
        found.seen,
        steps,
    )
    cost = llm.ledger.totals()["total"] if llm.ledger else None
    proposed = control.propose(
        skill,
        "optimizer",
        files,
        measurements,
        cost=cost,
        measured_against=champion.revision,
        new=False,
        seen=found.seen,
    )
    if proposed.withheld:
        return None, f"{found.reason}; not queued: {proposed.withheld}"
    return proposed.change.id, found.reason
