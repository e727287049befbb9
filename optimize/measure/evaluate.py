"""Measure one proposed change, whatever made it: every evidence cell that applies, or why not.

`ingot evaluate SKILL --change ID` (and the UI's Evaluate, and the automatic run after a
proposal) land here with the change's files and the live champion's. Cells:
- `checks`: Agent Skills validation, injection phrases, collision (with names, and as text alone);
- `routing_impact`: the whole library's routing cases and recent traffic, with and without it;
- `ab`: held-out A/B when the skill has a task set (a new skill against *no skill at all*);
  not applicable to a description change (the body is unchanged) or a removal;
- `sandbox_checks`: what the task set's `check:` specs found, per arm; not applicable where no
  code runs (no scripts on either side, no `check:` specs);
- `replay` (given by the caller, measure/regress.py): the skill's blessed runs replayed with the
  candidate's bytes. A cell that cannot run says why, never a default.
Measures and never decides: the verdict is the passport's (control/passport.py) when control
attaches the bundle. Each cell is reported as a step as it starts, with the work done inside it
(ingot/progress.py `Steps`); nothing here prints. Imports no control or search (tests/test_layout.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ingot.errors import IngotError, SkillInvalid, first_line
from ingot.progress import Count, Steps, uncounted
from mcp_server.library import Library
from mcp_server.registry import Skill, parse_skill_md
from optimize.measure.ab import ABRefused, ABRunner, Arm
from optimize.measure.checks import CheckResult, collision_check, injection_check
from optimize.measure.impact import LabelledCase, routing_impact
from optimize.measure.taskset import TaskSetError, load_task_set, origin, parse_task_set


def not_measured(why: str) -> dict[str, str]:
    return {"status": "not_measured", "why": why}


def not_applicable(why: str) -> dict[str, str]:
    return {"status": "not_applicable", "why": why}


@dataclass(frozen=True)
class Candidate:
    """The change under test: the skill, its kind (control/kinds.py), and both sides' files (no
    champion: a create; no candidate files: a removal)."""

    skill: str
    kind: str  # "create" | "body" | "description" | "both" | "removal"
    candidate_revision: str | None
    candidate_files: Mapping[str, bytes] | None = field(repr=False)
    champion_revision: str | None = None
    champion_files: Mapping[str, bytes] | None = field(default=None, repr=False)
    seen: frozenset[str] = frozenset()  # routing cases its author was shown (impact.case_key)


@dataclass
class Inputs:
    """What the cells need; `runner` is None when no models are configured (the A/B then says so)."""

    library: Library
    tasks_dir: Path
    traffic: Sequence[str] = ()
    runner: ABRunner | None = None
    no_models: str = "no models configured: set BASE_URL, AGENT_MODEL and JUDGE_MODEL (see .env.example)"
    # name -> cell; each is shown as the step of that name and counts its work through `Count`
    extra_cells: Mapping[str, Callable[[Candidate, Count], dict[str, Any]]] = field(default_factory=dict)


# The evidence cells as the passport names them: the steps `evaluate` reports, in order.
STEPS = {
    "checks": "checks",
    "routing_impact": "routing impact",
    "ab": "held-out A/B",
    "sandbox_checks": "sandbox checks",
}


def _parse(skill: str, files: Mapping[str, bytes]) -> tuple[str, str, dict]:
    text = files["SKILL.md"].decode("utf-8")
    _, description, body, meta = parse_skill_md(text, skill)
    return description, body, meta


def as_skill(name: str, files: Mapping[str, bytes], revision: str = "candidate") -> Skill:
    """A candidate as the router sees a skill (text in memory, nothing on disk)."""
    description, body, meta = _parse(name, files)
    return Skill(
        name, description, body, Path("."), Path("."), revision, (), meta, meta.get("metadata") or {}
    )


def checks_cell(change: Candidate, library: Library) -> dict[str, Any]:
    if change.candidate_files is None:
        return not_applicable("a removal adds no text to serve")
    try:
        description, body, _ = _parse(change.skill, change.candidate_files)
        validation = CheckResult(True, "Agent Skills frontmatter, name, description and body are valid")
    except (KeyError, UnicodeDecodeError, SkillInvalid) as exc:
        failed = CheckResult(False, f"not a valid skill: {exc}")
        return {"status": "measured", "results": {"validation": failed.as_json()}}
    similarity = library.similarity(change.skill, description)
    return {
        "status": "measured",
        "results": {
            "validation": validation.as_json(),
            "injection": injection_check(f"{description}\n{body}").as_json(),
            "collision": collision_check(similarity.named, change.skill, similarity.alone).as_json(),
        },
    }


def labelled_cases(tasks_dir: Path) -> tuple[list[LabelledCase], list[str]]:
    """Every routing case of every task set, and the problems of sets that could not be read."""
    cases, problems = [], []
    for path in sorted(tasks_dir.glob("*.yaml")) if tasks_dir.exists() else []:
        try:
            parsed = parse_task_set(path.stem, yaml.safe_load(path.read_text()), str(path))
        except (TaskSetError, yaml.YAMLError, OSError) as exc:
            problems.append(f"{path.name}: {first_line(exc)}")
            continue
        cases += [LabelledCase(c.task, c.expected, f"task set {path.stem}") for c in parsed.routing]
    return cases, problems


def impact_cell(change: Candidate, inputs: Inputs) -> dict[str, Any]:
    cases, problems = labelled_cases(inputs.tasks_dir)
    if not cases and not inputs.traffic:
        return not_measured(
            "no routing cases in any task set and no recorded traffic: add `routing:` cases to a task set"
        )
    champion_router = inputs.library.router_with({})
    if change.candidate_files is None:
        candidate_router, text, collisions = inputs.library.router_with({change.skill: None}), "", []
    else:
        candidate = as_skill(change.skill, change.candidate_files)
        candidate_router = inputs.library.router_with({change.skill: candidate})
        text = f"{candidate.description}\n{candidate.body}"
        collision = checks_cell(change, inputs.library)["results"].get("collision", {})
        collisions = [] if collision.get("passed", True) else [collision.get("detail", "collision")]
    cell = routing_impact(
        change.skill,
        champion_router,
        candidate_router,
        cases,
        inputs.traffic,
        {"unreadable_task_sets": problems, "embedding_model": inputs.library.model_digest()},
        seen=change.seen,
        candidate_text=text,
    )
    cell["collisions"] = collisions
    return cell


def ab_cell(change: Candidate, inputs: Inputs, count: Count = uncounted) -> dict[str, Any]:
    if change.kind == "description":
        return not_applicable("a description change leaves the body unchanged: routing impact measures it")
    if change.candidate_files is None:
        return not_applicable("a removal serves nothing in its place to measure")
    if inputs.runner is None:
        return not_measured(inputs.no_models)
    try:
        tasks = load_task_set(inputs.tasks_dir, change.skill)
    except TaskSetError as exc:
        return not_measured(str(exc))
    _, body, _ = _parse(change.skill, change.candidate_files)
    if change.champion_files is None:
        champion = Arm(change.skill, None, None)
    else:
        champion = Arm(
            change.skill,
            change.champion_revision,
            _parse(change.skill, change.champion_files)[1],
            change.champion_files,
        )
    challenger = Arm(change.skill, change.candidate_revision, body, change.candidate_files)
    try:
        cell = inputs.runner.run(champion, challenger, tasks, count)
    except ABRefused as exc:
        return not_measured(str(exc))
    cell["task_set"] = origin(inputs.tasks_dir, change.skill)
    return cell


def runs_code(files: Mapping[str, bytes] | None) -> bool:
    """Whether a skill's files include scripts (which the agent may run in the sandbox)."""
    return any(path.startswith("scripts/") for path in files or {})


def sandbox_cell(change: Candidate, ab: Mapping[str, Any], tasks_dir: Path) -> dict[str, Any]:
    """What the task set's `check:` specs found when the A/B ran the answers' code; not
    applicable where no code runs (no scripts on either side, no `check:` specs)."""
    if change.kind in ("description", "removal"):
        return not_applicable(f"a {change.kind} change runs no code")
    scripts = runs_code(change.candidate_files) or runs_code(change.champion_files)
    specs = False
    if (tasks_dir / f"{change.skill}.yaml").exists():
        try:
            specs = any(t.check is not None for t in load_task_set(tasks_dir, change.skill).holdout)
        except TaskSetError as exc:
            return not_measured(f"whether `check:` specs exist is unknown: {first_line(exc)}")
    if not scripts and not specs:
        return not_applicable(
            "nothing in this skill runs code: no scripts on either side and no `check:` specs in its task set"
        )
    if not specs:
        return not_measured(
            "the skill has scripts and no `check:` spec in its task set runs them: add one (a fixture and an "
            "assert script)"
        )
    if ab.get("status") != "measured":
        return not_measured("the held-out A/B did not run, so no `check:` spec ran")
    found: dict[str, dict[str, int]] = {"champion": {}, "challenger": {}}
    for case in ab.get("cases", []):
        for side in found:
            check = case.get(f"{side}_check")
            if check:
                found[side][check["status"]] = found[side].get(check["status"], 0) + 1
    if not found["challenger"]:
        return not_measured("the task set's `check:` specs gave no result for the candidate's answers")
    return {"status": "measured", **found}


def steps_of(inputs: Inputs, ab_given: bool = False) -> list[str]:
    """The steps `evaluate` reports, in order (without the A/B when the caller ran it)."""
    names = [name for key, name in STEPS.items() if not (ab_given and key == "ab")]
    return names + list(inputs.extra_cells)


def evaluate(
    change: Candidate,
    inputs: Inputs,
    ab: Mapping[str, Any] | None = None,
    steps: Steps | None = None,
) -> dict[str, dict[str, Any]]:
    """The measurements for an evidence bundle: every cell, measured or saying why not. `ab`: an
    A/B the caller already ran on these files (the optimizer's), used instead of running one.
    `steps`: where each cell is reported as it starts (the caller's run may have more steps)."""
    steps = steps or Steps(steps_of(inputs, ab is not None))
    steps.begin(STEPS["checks"])
    cells: dict[str, dict[str, Any]] = {"checks": checks_cell(change, inputs.library)}
    steps.begin(STEPS["routing_impact"])
    try:
        cells["routing_impact"] = impact_cell(change, inputs)
    except (IngotError, KeyError, UnicodeDecodeError) as exc:
        cells["routing_impact"] = not_measured(f"the candidate could not be routed: {exc}")
    cells["ab"] = dict(ab) if ab is not None else ab_cell(change, inputs, steps.begin(STEPS["ab"]))
    steps.begin(STEPS["sandbox_checks"])
    cells["sandbox_checks"] = sandbox_cell(change, cells["ab"], inputs.tasks_dir)
    for name, cell in inputs.extra_cells.items():
        cells[name] = cell(change, steps.begin(name))
    return cells
