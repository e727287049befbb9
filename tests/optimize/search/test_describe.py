"""The description pass: the real router scores candidates; select and gate on different cases."""

from __future__ import annotations

import json

from optimize.measure.impact import case_key
from optimize.measure.taskset import RoutingCase
from optimize.search.describe import optimize_description, propose_description, router_with, split
from tests.scripted_llm import scripted_llm

SKILL = "incident-postmortem"
CASES = [
    RoutingCase("Document the timeline of yesterday's database outage for the wiki", SKILL),
    RoutingCase("Summarise what went wrong in the deploy for the team chat", SKILL),
    RoutingCase("Checkout was down for an hour; write up the impact and follow-ups", SKILL),
    RoutingCase("Our API returned 500s all morning; I need the incident report for leadership", SKILL),
    RoutingCase("Write up last night's pager incident with root cause and action items", SKILL),
    RoutingCase("Draft release notes for v3.1", "release-notes"),
    RoutingCase("Write a commit message for this fix", "git-commit-messages"),
    RoutingCase("Plan a three-day itinerary for Lisbon", None),
]
BETTER = (
    "Writes blameless incident postmortems and outage write-ups: what went wrong, a timeline, customer "
    "impact, root cause and follow-up action items. Use when the user asks to document or summarise an "
    "outage, incident, downtime, failed deploy or pager alert for the team, wiki or leadership."
)


def llm_with(reply: str):
    server_cm = scripted_llm()
    server = server_cm.__enter__()
    server.add(model="teacher-model", reply=json.dumps({"descriptions": [reply]}))
    return server_cm, server.client("teacher")


def write_routing_cases(folder, cases=CASES):
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    routing = [{"task": c.task, "expected": c.expected} for c in cases]
    (folder / f"{SKILL}.yaml").write_text(
        yaml.safe_dump({"train": ["t"], "holdout": ["h"], "routing": routing})
    )
    return folder


def evidence_of(control, change_id):
    from optimize.control import evidence

    change = control.queue.get(SKILL)
    assert change is not None and change.id == change_id
    return evidence.load(control.runs_dir / change.evidence_path).data


def test_the_split_keeps_selection_and_gating_cases_apart():
    select, gate = split(CASES)
    assert select and gate and not {c.task for c in select} & {c.task for c in gate}


def test_a_better_description_fixes_a_misrouted_symptom_and_is_ready_on_cases_the_teacher_never_saw(
    tmp_path, served_copy
):
    _, library, control, _ = served_copy
    symptom = "Document the timeline of yesterday's database outage for the wiki"
    assert library.route(symptom).skill is None  # misrouted today
    cm, llm = llm_with(BETTER)
    try:
        outcome = optimize_description(SKILL, library, llm, CASES)
    finally:
        cm.__exit__(None, None, None)
    assert outcome.chosen == BETTER
    assert router_with(library, SKILL, BETTER).route(symptom).skill.name == SKILL
    routing = outcome.measurements["routing"]
    assert routing["held_out_cases"] and routing["select_cases"]
    select, _ = split(CASES)
    others = [  # cases of the task set the teacher is never shown
        RoutingCase("Shrink and harden our Dockerfile for production", "dockerfile-hardening"),
        RoutingCase("Tune this slow PostgreSQL query on the orders table", "postgres-query-tuning"),
        RoutingCase("Write the post-incident review for Tuesday's login failures", SKILL),
        RoutingCase("Recommend three novels like Dune", None),
        RoutingCase("Write a haiku about autumn leaves", None),
        RoutingCase("Recommend a laptop under 1000 EUR", None),
    ]
    tasks = write_routing_cases(tmp_path / "tasks", CASES + others)
    cm, llm = llm_with(BETTER)
    try:
        change_id, _ = propose_description(SKILL, library, control, llm, CASES, 1, None, tasks)
    finally:
        cm.__exit__(None, None, None)
    data = evidence_of(control, change_id)
    impact = data["measurements"]["routing_impact"]
    assert impact["cases"]["total"] == len(CASES) + len(others)  # every case is routed (and shadow-checked)
    assert impact["leakage"]["excluded"] == impact["leakage"]["seen"] == len(select)  # the select half
    held_out = CASES + others
    held_out = [c for c in held_out if c.task not in {s.task for s in select}]
    expecting = sum(bool(c.expected) for c in held_out)
    not_mine = sum(c.expected != SKILL for c in held_out)
    assert (
        impact["metrics"]["n"]["top1"] == expecting
        and impact["metrics"]["n"]["no_route_precision"] == not_mine
    )
    assert impact["shadowed"] == []
    assert control.queue.get(SKILL).seen == tuple(sorted(case_key(c.task) for c in select))
    assert data["kind"] == "description" and data["passport"]["state"] == "ready", data["passport"]
    control.approve(SKILL, "reviewer", change_id)  # ready, and only the description changed
    library.reload()
    assert library.get(SKILL).description == BETTER


def test_a_description_that_would_shadow_another_skill_is_refused(served_copy):
    _, library, control, _ = served_copy
    cm, llm = llm_with(library.get("release-notes").description)
    try:
        outcome = optimize_description(SKILL, library, llm, CASES)
    finally:
        cm.__exit__(None, None, None)
    assert outcome.chosen is None and "near-copies release-notes" in outcome.reason  # a verbatim copy


def test_ingot_optimize_description_command_queues_the_change(served_copy, tmp_path):
    import os
    import subprocess
    import sys

    import yaml

    _, library, control, root = served_copy
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / f"{SKILL}.yaml").write_text(
        yaml.safe_dump(
            {
                "train": ["t"],
                "holdout": ["h"],
                "routing": [{"task": c.task, "expected": c.expected} for c in CASES],
            }
        )
    )
    with scripted_llm() as server:
        server.add(model="teacher-model", reply=json.dumps({"descriptions": [BETTER]}))
        env = {
            **os.environ,
            "BASE_URL": server.url,
            "TEACHER_MODEL": "teacher-model",
            "TASKS_DIR": str(tasks),
            "INGOT_HOME": str(control.runs_dir),
            "HF_HUB_OFFLINE": "1",
        }
        env.pop("API_KEY", None)
        done = subprocess.run(
            [sys.executable, "-m", "ingot.cli", "optimize", SKILL, "--description", "--skills", str(root)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=180,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    change = control.queue.get(SKILL)
    assert change.kind == "description"
    state = control.passport(change).summary
    # One verdict: the passport's, in the words the card uses; never the raw metric fields.
    assert f"queued {change.id} for review ({state}): description change" in done.stdout, done.stdout
    assert "top1" not in done.stdout and "no_route_precision" not in done.stdout
    assert "picked on the select half" in done.stdout and "top-1 " in done.stdout


def test_a_metric_with_no_cases_is_missing_not_perfect(tmp_path, library_factory):
    """The selection record keeps what the select and gate halves measured; with no case that
    expects a skill, top-1 and recall@3 are None, never 1.0."""
    import shutil

    from optimize.search.describe import _selection_score, metrics
    from tests.conftest import BUNDLED_SKILLS

    shutil.copytree(BUNDLED_SKILLS, tmp_path / "skills")
    router = router_with(library_factory(tmp_path / "skills"), SKILL, None)
    nulls = [RoutingCase("Plan a three-day itinerary for Lisbon", None)]
    values = metrics(router, SKILL, nulls)
    assert values["top1"] is None and values["recall_at_3"] is None
    assert values["no_route_precision"] == 1.0  # one measured case, not taken by the skill
    assert _selection_score(values) == 1.0
    assert metrics(router, SKILL, []) == {"top1": None, "recall_at_3": None, "no_route_precision": None}


def test_re_evaluating_a_description_change_still_leaves_out_what_the_teacher_saw(tmp_path, served_copy):
    from ingot.evaluation import evaluate_change
    from ingot.settings import load_settings

    _, library, control, root = served_copy
    tasks = write_routing_cases(tmp_path / "tasks")
    cm, llm = llm_with(BETTER)
    try:
        change_id, _ = propose_description(SKILL, library, control, llm, CASES, 1, None, tasks)
    finally:
        cm.__exit__(None, None, None)
    settings = load_settings(skills_dirs=(root,), ingot_home=control.runs_dir, tasks_dir=tasks)
    again = evaluate_change(settings, library, control, SKILL, change_id)
    leakage = again.evidence.data["measurements"]["routing_impact"]["leakage"]
    assert leakage["seen"] == len(split(CASES)[0])  # the record keeps what the author was shown


def test_a_case_pasted_into_the_candidate_is_leakage_not_evidence(tmp_path, served_copy):
    from optimize.measure.evaluate import Candidate, Inputs, impact_cell
    from optimize.search.describe import description_files

    _, library, _, _ = served_copy
    pasted = "Our API returned 500s all morning; I need the incident report for leadership"
    tasks = write_routing_cases(tmp_path / "tasks")
    description = f"{BETTER} For example: {pasted.upper()}!"  # case, punctuation and spacing differ
    files = description_files(library, SKILL, description)
    candidate = Candidate(SKILL, "description", "c", files, library.get(SKILL).revision, None)
    cell = impact_cell(candidate, Inputs(library, tasks))
    assert cell["leakage"]["in_candidate"] == 1 and cell["leakage"]["cases"][0]["task"] == pasted
    assert cell["metrics"]["n"]["top1"] == sum(bool(c.expected) for c in CASES) - 1
    assert cell["cases"]["total"] == len(CASES)  # still routed, and checked for shadowing


def test_a_select_case_the_teacher_pasted_into_its_description_is_never_counted_as_evidence(
    tmp_path, served_copy
):
    """The issue's own reproduction: a select-half case pasted verbatim into the optimizer's
    candidate. The routing impact the passport reads leaves out the whole select half (the author
    saw it) and the pasted case (it is in the candidate); each is listed as leakage."""
    _, library, control, _ = served_copy
    tasks = write_routing_cases(tmp_path / "tasks")
    select, gate = split(CASES)
    pasted = next(c for c in select if c.expected == SKILL)
    cm, llm = llm_with(f"{BETTER} For example: {pasted.task}")
    try:
        change_id, _ = propose_description(SKILL, library, control, llm, CASES, 1, None, tasks)
    finally:
        cm.__exit__(None, None, None)
    assert change_id, "the description change was not queued"
    data = evidence_of(control, change_id)
    impact = data["measurements"]["routing_impact"]
    leaked = {c["task"] for c in impact["leakage"]["cases"]}
    assert pasted.task in leaked and {c.task for c in select} <= leaked
    held_out = [c for c in gate if c.expected == SKILL]
    assert impact["metrics"]["n"]["top1"] == len(held_out)  # only cases the author never saw
    cell = control.passport(control.queue.get(SKILL)).cell("routing impact")
    assert "left out as leakage" in cell.why or cell.state == "missing", cell
