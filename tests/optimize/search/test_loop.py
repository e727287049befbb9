"""The background loop proposes only for unhealthy skills, and never promotes."""

from __future__ import annotations

from optimize.control import evidence
from optimize.control.changes import ChangeControl
from optimize.measure.cascade import JudgeTiers
from optimize.measure.judge import Judge
from optimize.measure.regress import ReplayContext
from optimize.models.traces import LocalTraceStore, TraceRecord
from optimize.search.loop import run_loop
from tests.conftest import write_skill
from tests.scripted_llm import grade_json as grade
from tests.scripted_llm import scripted_llm


def test_only_the_unhealthy_skill_is_optimized_and_nothing_goes_live(tmp_path, library_factory):
    root, tasks = tmp_path / "skills", tmp_path / "tasks"
    write_skill(
        root,
        "release-notes",
        "Writes release notes from merged pull requests.",
        "# Notes\n\nSEED-MARK: list every commit.\n",
    )
    write_skill(
        root,
        "git-commit-messages",
        "Writes conventional commit messages for staged changes.",
        "# Commits\n\nUse type(scope): subject.\n",
    )
    tasks.mkdir()
    for name in ("release-notes", "git-commit-messages"):
        (tasks / f"{name}.yaml").write_text("train: [t1, t2, t3]\nholdout: [h1, h2, h3]\n")
    library = library_factory(root)
    control = ChangeControl(tmp_path / "runs", (root,), neighbours=library.current)
    store = LocalTraceStore(tmp_path / "runs" / "traces.jsonl")
    store.append(
        TraceRecord(
            task="Notes for 1.0",
            answer="bad notes",
            route="match",
            skill="release-notes",
            revision="r",
            model="m",
        )
    )
    store.append(
        TraceRecord(
            task="Commit message for the fix",
            answer="good commit",
            route="match",
            skill="git-commit-messages",
            revision="r",
            model="m",
        )
    )
    before = {p: p.read_bytes() for p in root.rglob("SKILL.md")}
    with scripted_llm() as server:
        server.add(model="judge-model", user_contains="bad notes", reply=grade(0.2))
        server.add(model="judge-model", user_contains="good commit", reply=grade(0.9))
        server.script_optimizer("# Notes\n\nNEW-MARK: group by theme.\n")
        llm = server.client("agent", "teacher", "judge")
        entries = run_loop(
            [],
            library,
            control,
            llm,
            Judge(llm, ("judge-model",), "teacher-model"),
            store,
            tasks,
            threshold=0.7,
            passes=("body",),
            candidates=2,
            replay=ReplayContext(tmp_path / "runs" / "goldens", None, JudgeTiers(None, None, None)),
        )
    actions = {e.skill: e.action for e in entries}
    assert actions == {"git-commit-messages": "healthy", "release-notes": "optimized"}
    assert [c.skill for c in control.pending()] == ["release-notes"]
    # The body pass replays the skill's goldens with the context it was given (none are blessed).
    replay = evidence.load(control.runs_dir / control.pending()[0].evidence_path).data["measurements"][
        "replay"
    ]
    assert "no blessed goldens for release-notes" in replay["why"], replay
    assert {p: p.read_bytes() for p in root.rglob("SKILL.md")} == before  # quarantined, never promoted


def test_the_description_pass_composes_with_the_body_pass_instead_of_burying_it(tmp_path, library_factory):
    """Both passes on one skill: one composed change (the new body and the new description),
    measured as one rewrite and approvable; the body-only change is archived as displaced."""
    import json

    import yaml

    from tests.conftest import BUNDLED_SKILLS

    root, tasks = tmp_path / "skills", tmp_path / "tasks"
    for name in ("git-commit-messages", "incident-postmortem", "dockerfile-hardening"):
        (root / name).mkdir(parents=True)
        for f in (BUNDLED_SKILLS / name).rglob("*"):
            if f.is_file():
                target = root / name / f.relative_to(BUNDLED_SKILLS / name)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(f.read_bytes())
    write_skill(root, "release-notes", "Writes release notes.", "# Notes\n\nSEED-MARK: list every commit.\n")
    routing = [
        {"task": "Draft release notes for v3.1 from the merged pull requests", "expected": "release-notes"},
        {"task": "Summarise what changed in this release for customers", "expected": "release-notes"},
        {"task": "Turn the merged PRs into a user-facing changelog entry", "expected": "release-notes"},
        {"task": "Write release notes for version 2.4", "expected": "release-notes"},
        {"task": "Write a conventional commit message for this fix", "expected": "git-commit-messages"},
        {"task": "Write a blameless postmortem for yesterday's outage", "expected": "incident-postmortem"},
        {"task": "Shrink and harden our Dockerfile for production", "expected": "dockerfile-hardening"},
        {"task": "Plan a three-day itinerary for Lisbon", "expected": None},
        {"task": "Recommend three novels like Dune", "expected": None},
    ]
    tasks.mkdir()
    (tasks / "release-notes.yaml").write_text(
        yaml.safe_dump(
            {
                "train": ["Notes for 1.0", "Notes for 1.1", "Notes for 1.2", "Notes for 1.3"],
                "holdout": [
                    "Notes for 2.0",
                    "Notes for 2.1",
                    "Notes for 2.2",
                    "Notes for 2.3",
                    "Notes for 2.4",
                ],
                "routing": routing,
            }
        )
    )
    better = (
        "Drafts user-facing release notes and changelog entries from merged pull requests. Use when "
        "the user asks for release notes, a changelog or a summary of what changed in a version."
    )
    library = library_factory(root)
    control = ChangeControl(tmp_path / "runs", (root,), neighbours=library.current)
    store = LocalTraceStore(tmp_path / "runs" / "traces.jsonl")
    store.append(TraceRecord("Notes for 1.0", "bad notes", "match", "release-notes", "r", "m"))
    with scripted_llm() as server:
        server.add(model="judge-model", user_contains="bad notes", reply=grade(0.2))
        server.add(
            model="teacher-model",
            user_contains="A router picks agent skills",
            reply=json.dumps({"descriptions": [better]}),
        )
        server.script_optimizer("# Notes\n\nNEW-MARK: group by theme.\n")
        llm = server.client("agent", "teacher", "judge")
        entries = run_loop(
            [],
            library,
            control,
            llm,
            Judge(llm, ("judge-model",), "teacher-model"),
            store,
            tasks,
            threshold=0.7,
            passes=("body", "description"),
            candidates=1,
        )
    assert entries[0].action == "optimized" and "composed with" in entries[0].detail, entries[0].detail
    (composed,) = control.pending()
    assert (
        b"NEW-MARK" in composed.files["SKILL.md"] and better.split()[0].encode() in composed.files["SKILL.md"]
    )
    verdict = control.passport(composed)
    assert composed.kind == "both" and verdict.state != "blocked", verdict.summary
    assert verdict.cell("held-out A/B").state == "pass" and verdict.cell("routing impact").state != "n/a"
    archived = control.queue.archived("release-notes")
    assert [r["archived_status"] for r in archived] == ["displaced"]  # the body-only change, kept visible
    control.approve("release-notes", "reviewer", composed.id, accept_missing="no goldens blessed yet")
