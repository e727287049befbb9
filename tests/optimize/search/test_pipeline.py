"""`ingot optimize` body pass end to end through the scripted model server."""

from __future__ import annotations

import json
import re

import pytest

from ingot.errors import IngotError
from optimize.control.changes import ChangeControl
from optimize.measure.judge import Judge
from optimize.search.pipeline import optimize_body
from tests.conftest import write_skill
from tests.optimize.conftest import STALE, TASKS
from tests.regress_judges import exercised_by
from tests.scripted_llm import grade_json as grade
from tests.scripted_llm import scripted_llm


def test_a_stale_skill_gets_a_pending_rewrite_with_evidence_and_skills_untouched(optimizer_world):
    server, control, library, llm, judge, tasks, root = optimizer_world
    server.add(
        model="teacher-model",
        user_contains="Rewrite the skill",
        reply=json.dumps(
            {"body": "# Release notes\n\nNEW-MARK: group changes by theme, user-facing first.\n"}
        ),
    )
    before = (root / "release-notes" / "SKILL.md").read_bytes()
    outcome = optimize_body("release-notes", control, library, llm, judge, tasks, candidates=3)
    assert outcome.proposed and outcome.verdict == "needs-acknowledgement"  # no goldens, no prices
    # Its label is measured from its bytes; the strategy's intent only as "asked for".
    size = (
        r"\+\d+ / -\d+ lines, \d+% of the body's lines changed \(diff\), \d+% of the live body's lines kept"  # noqa: E501
    )
    assert re.search(rf"won the train race .*: {size}", outcome.reason)
    assert "(asked for: " in outcome.reason
    verdict = control.passport(control.queue.get("release-notes"))
    states = {c.name: c.state for c in verdict.cells}
    # Every cell a body change has is measured where it can be, as for any other change.
    assert states == {
        "held-out A/B": "pass",
        "replay": "missing",
        "routing impact": "missing",  # this world has no routing cases and no traffic
        "sandbox checks": "n/a",
        "safety": "pass",
        "cost": "missing",
    }
    assert "no routing cases" in verdict.cell("routing impact").why
    ab = outcome.ab
    assert ab["champion_mean"] == pytest.approx(0.2) and ab["challenger_mean"] == pytest.approx(0.9)
    assert all(c["delta"] > 0 for c in ab["cases"]) and ab["cases"][0]["champion_tokens"] > 0
    assert (root / "release-notes" / "SKILL.md").read_bytes() == before  # proposes, never activates
    change = control.queue.get("release-notes")
    assert change.source == "optimizer" and b"NEW-MARK" in change.files["SKILL.md"]
    assert change.files["SKILL.md"].startswith(before.split(b"---")[0] + b"---")  # frontmatter kept


def test_no_improvement_means_no_pending_record(optimizer_world):
    server, control, library, llm, judge, tasks, _ = optimizer_world
    server.add(
        model="teacher-model",
        user_contains="Rewrite the skill",
        reply=json.dumps({"body": "# Release notes\n\nMEH-MARK: list commits, maybe grouped.\n"}),
    )
    outcome = optimize_body("release-notes", control, library, llm, judge, tasks, candidates=2)
    assert outcome.proposed is None and outcome.reason.startswith("no improvement")
    assert control.pending() == []


def test_a_leaky_task_set_is_refused(optimizer_world):
    _, control, library, llm, judge, tasks, _ = optimizer_world
    (tasks / "release-notes.yaml").write_text("- Notes for 1.0\n- Notes for 2.0\n")
    with pytest.raises(IngotError, match="can never promote"):
        optimize_body("release-notes", control, library, llm, judge, tasks)


def test_ingot_optimize_command_queues_the_rewrite(optimizer_world, tmp_path):
    import os
    import subprocess
    import sys

    server, control, *_, tasks, root = optimizer_world
    server.add(
        model="teacher-model",
        user_contains="Rewrite the skill",
        reply=json.dumps({"body": "# Release notes\n\nNEW-MARK: group changes by theme.\n"}),
    )
    env = {
        **os.environ,
        "BASE_URL": server.url,
        "AGENT_MODEL": "agent-model",
        "TEACHER_MODEL": "teacher-model",
        "JUDGE_MODEL": "judge-model",
        "TASKS_DIR": str(tasks),
        "INGOT_HOME": str(control.runs_dir),
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("API_KEY", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ingot.cli",
            "optimize",
            "release-notes",
            "--candidates",
            "2",
            "--skills",
            str(root),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "queued chg-" in done.stdout and "(needs-acknowledgement)" in done.stdout
    assert "(asked for: " in done.stdout and "gate" not in done.stdout
    assert control.queue.get("release-notes") is not None


def test_a_challenger_that_regresses_a_holdout_task_is_queued_blocked_and_cannot_be_approved(
    tmp_path, library_factory
):
    from optimize.control.changes import ApprovalRefused

    root = tmp_path / "skills"
    write_skill(root, "release-notes", "Writes release notes from merged pull requests.", STALE)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "release-notes.yaml").write_text(TASKS)
    library = library_factory(root)
    control = ChangeControl(tmp_path / "runs", (root,), neighbours=library.current)
    with scripted_llm() as server:
        # Specific rules first: on one holdout task the champion is fine and the challenger breaks it.
        server.add(system_contains="SEED-MARK", user_contains="Notes for 2.1", reply="solid answer")
        server.add(system_contains="NEW-MARK", user_contains="Notes for 2.1", reply="broken answer")
        server.script_pairwise("solid answer")  # pairwise prompts hold both answers: they must match first
        server.add(model="judge-model", user_contains="solid answer", reply=grade(0.8, True))
        server.add(model="judge-model", user_contains="broken answer", reply=grade(0.1, False))
        server.script_optimizer("# Release notes\n\nNEW-MARK: group by theme.\n", strong=0.95)
        llm = server.client("agent", "teacher", "judge")
        outcome = optimize_body(
            "release-notes",
            control,
            library,
            llm,
            Judge(llm, ("judge-model",), "teacher-model"),
            tasks,
            candidates=2,
        )
    assert outcome.proposed and outcome.verdict == "blocked"  # kept, with its diagnosis, for a person
    with pytest.raises(ApprovalRefused, match="regresses held-out task"):
        control.approve("release-notes", "reviewer", outcome.proposed)


def test_a_skill_edited_before_or_during_a_run_is_never_proposed_on_stale_evidence(optimizer_world):
    from ingot.errors import SkillChanged

    server, control, library, llm, judge, tasks, root = optimizer_world
    server.add(
        model="teacher-model", user_contains="Rewrite the skill", reply=json.dumps({"body": "NEW-MARK\n"})
    )
    skill_md = root / "release-notes" / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\nEdited by hand.\n")  # the served snapshot is now stale
    with pytest.raises(SkillChanged):
        optimize_body("release-notes", control, library, llm, judge, tasks, candidates=1)
    measured = library.get("release-notes").revision  # what a run that started earlier measured
    with pytest.raises(SkillChanged, match="changed on disk during the run"):
        control.propose("release-notes", "optimizer", {"SKILL.md": b"x"}, {}, measured_against=measured)
    assert control.pending() == []


def test_the_body_pass_replays_the_skills_goldens_with_the_winner_and_records_the_cell(optimizer_world):
    from agent.run import skill_system_prompt
    from optimize.control.goldens_admin import GoldenAdmin
    from optimize.measure.cascade import JudgeTiers
    from optimize.measure.regress import ReplayContext
    from optimize.models.traces import TraceRecord

    server, control, library, llm, judge, tasks, _ = optimizer_world
    skill = library.get("release-notes")
    served = TraceRecord(
        task="Notes for 0.9",
        answer="weak answer",
        route="match",
        skill="release-notes",
        revision=skill.revision,
        model="agent-model",
        messages=(
            {
                "role": "system",
                "content": skill_system_prompt("match", skill.name, skill.revision, skill.body),
            },
            {"role": "user", "content": "Notes for 0.9"},
        ),
    )
    admin = GoldenAdmin(control)
    stored, _ = admin.bless(served, "ana")
    admin.approve(stored.id, "ana", ["answers the task"], [])
    adjudicate = json.dumps({"verdict": "pass", "failed": [], "rationale": "the new answer is stronger"})
    server.rules.insert(
        0, server.rules[0].__class__(model="judge-model", user_contains="You adjudicate", reply=adjudicate)
    )
    server.rules.insert(
        0,
        server.rules[0].__class__(
            model="judge-model",
            user_contains="ALTERED INSTRUCTIONS",
            compute=exercised_by(stored.id),  # its task calls for grouping changes
        ),
    )
    server.rules.insert(
        0,
        server.rules[0].__class__(
            model="judge-model", user_contains="Write the rationale", reply="All good."
        ),
    )
    server.add(
        model="teacher-model",
        user_contains="Rewrite the skill",
        reply=json.dumps({"body": "# Release notes\n\nNEW-MARK: group changes by theme.\n"}),
    )
    replay = ReplayContext(
        control.runs_dir / "goldens", control.runs_dir / "cache" / "replay", JudgeTiers(l3="judge-model")
    )
    outcome = optimize_body("release-notes", control, library, llm, judge, tasks, candidates=2, replay=replay)
    from optimize.control import evidence

    cell = evidence.load(control.runs_dir / control.queue.get("release-notes").evidence_path).data[
        "measurements"
    ]["replay"]
    assert outcome.proposed and cell["status"] == "measured" and cell["verdict"] == "PASS"
    (golden,) = cell["goldens"]
    assert golden["id"] == stored.id and golden["tier"] == "L3" and golden["answer"] == "strong answer"
    assert (
        cell["champion_revision"] == skill.revision
        and cell["candidate_revision"] == control.queue.get("release-notes").candidate_revision
    )


def test_without_a_replay_context_the_cell_says_it_was_not_measured(optimizer_world):
    server, control, library, llm, judge, tasks, _ = optimizer_world
    server.add(
        model="teacher-model",
        user_contains="Rewrite the skill",
        reply=json.dumps({"body": "# Release notes\n\nNEW-MARK: group changes by theme.\n"}),
    )
    optimize_body("release-notes", control, library, llm, judge, tasks, candidates=2)
    from optimize.control import evidence

    bundle = evidence.load(control.runs_dir / control.queue.get("release-notes").evidence_path)
    assert bundle.data["measurements"]["replay"] == {
        "status": "not_measured",
        "why": "regression replay was not configured for this run",
    }


def test_a_repeat_run_against_an_unchanged_champion_pays_only_for_the_challenger_side(optimizer_world):
    server, control, library, llm, judge, tasks, _ = optimizer_world
    server.add(
        model="teacher-model",
        user_contains="Rewrite the skill",
        reply=json.dumps({"body": "# Release notes\n\nNEW-MARK: group changes by theme.\n"}),
    )
    optimize_body("release-notes", control, library, llm, judge, tasks, candidates=2)
    first_total, first_seed = len(server.chat_requests()), server.champion_side_calls("SEED-MARK")
    assert first_seed > 0
    optimize_body("release-notes", control, library, llm, judge, tasks, candidates=2)
    second_total = len(server.chat_requests()) - first_total
    assert (
        server.champion_side_calls("SEED-MARK") == first_seed
    )  # the seed rollout and the champion's A/B side: cached
    assert second_total == first_total - first_seed  # everything else is paid again, nothing more
