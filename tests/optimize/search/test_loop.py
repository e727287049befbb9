"""The background loop proposes only for unhealthy skills, and never promotes."""

from __future__ import annotations

from optimize.control.changes import ChangeControl
from optimize.measure.judge import Judge
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
        )
    actions = {e.skill: e.action for e in entries}
    assert actions == {"git-commit-messages": "healthy", "release-notes": "optimized"}
    assert [c.skill for c in control.pending()] == ["release-notes"]
    assert {p: p.read_bytes() for p in root.rglob("SKILL.md")} == before  # quarantined, never promoted
