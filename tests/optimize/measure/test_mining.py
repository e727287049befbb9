"""Mining real traffic: attribution by tag and by routing, clustering, cached verdicts."""

from __future__ import annotations

import pytest

from optimize.measure.judge import Judge
from optimize.measure.mining import mine
from optimize.models.traces import LocalTraceStore, TraceRecord
from tests.conftest import BUNDLED_SKILLS
from tests.scripted_llm import grade_json as grade
from tests.scripted_llm import scripted_llm


def test_mining_attributes_clusters_judges_once_and_reports_weak_tasks(tmp_path, library_factory):
    library = library_factory(BUNDLED_SKILLS)
    store = LocalTraceStore(tmp_path / "traces.jsonl")
    rev = library.get("release-notes").revision
    for task, answer in [
        ("Write release notes for v1.2 from the merged PRs", "notes A"),
        ("Write release notes for v1.2 from the merged PRs", "notes A again"),
        ("Draft the changelog entry for version 3.0.0", "notes B"),
    ]:
        store.append(
            TraceRecord(
                task=task, answer=answer, route="match", skill="release-notes", revision=rev, model="m"
            )
        )
    # Misrouted traffic: tagged to another skill, but release-notes is in the router's top 5.
    store.append(
        TraceRecord(
            task="Turn our merged pull requests into user-facing release notes",
            answer="notes C",
            route="match",
            skill="git-commit-messages",
            revision="x",
            model="m",
        )
    )
    store.append(
        TraceRecord(
            task="Bake sourdough bread", answer="no", route="novel", skill=None, revision=None, model="m"
        )
    )
    with scripted_llm() as server:
        server.add(user_contains="notes A", reply=grade(0.9))
        server.add(user_contains="notes B", reply=grade(0.7, weak="completeness"))
        server.add(user_contains="notes C", reply=grade(0.8, weak="completeness"))
        llm = server.client("judge")
        judge = Judge(llm, ("judge-model",), "teacher-model")
        cache = tmp_path / "verdicts.jsonl"
        report = mine("release-notes", store, library, judge, cache)
        assert (report.traces, report.by_tag, report.by_routing, report.clusters) == (4, 3, 1, 3)
        assert report.judged == 3 and report.mean_score == pytest.approx((0.9 + 0.55 + 0.625) / 3, abs=1e-3)
        assert report.failing_dimensions == {"completeness": 2}
        assert report.weakest[0][1] == "Draft the changelog entry for version 3.0.0"
        again = mine("release-notes", store, library, judge, cache)
        assert again.judged == 0 and len(server.chat_requests()) == 3  # verdicts cached


def test_addresses_in_older_unredacted_traces_reach_neither_the_judge_nor_the_report(
    tmp_path, library_factory
):
    library = library_factory(BUNDLED_SKILLS)
    rev = library.get("release-notes").revision
    store = LocalTraceStore(tmp_path / "traces.jsonl", redaction=False)  # as an older Ingot wrote them
    store.append(
        TraceRecord(
            task="Write release notes for v1.2 and send them to ops-lead@corp.example",
            answer="notes for ops-lead@corp.example",
            route="match",
            skill="release-notes",
            revision=rev,
            model="m",
        )
    )
    with scripted_llm() as server:
        server.add(reply=grade(0.4, weak="completeness"))
        judge = Judge(server.client("judge"), ("judge-model",), "teacher-model")
        report = mine("release-notes", store, library, judge, tmp_path / "verdicts.jsonl")
        assert "ops-lead@corp.example" not in str(report.weakest)
        assert all("ops-lead@corp.example" not in r.body for r in server.chat_requests())
