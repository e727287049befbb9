"""Router: the three outcomes, filters before ranking, conflicts, priority, determinism."""

from __future__ import annotations

import logging

import pytest

from mcp_server.policy import CallerContext
from tests.conftest import BUNDLED_SKILLS, write_skill


@pytest.fixture
def bundled(library_factory):
    return library_factory(BUNDLED_SKILLS)


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        (
            "EXPLAIN ANALYZE shows a sequential scan on orders; which index should I add?",
            "postgres-query-tuning",
        ),
        (
            "Write the changelog entry and release notes for version 2.4.0 from the merged PRs",
            "release-notes",
        ),
        ("My Docker image is 1.2 GB and runs as root; make it smaller and safer", "dockerfile-hardening"),
        (
            "Split my staged changes into atomic commits with conventional commit messages",
            "git-commit-messages",
        ),
        ("Publish my library to PyPI with a pyproject.toml and trusted publishing", "python-packaging"),
        ("Write the blameless postmortem for last night's SEV1 outage", "incident-postmortem"),
        (
            "This CSV export has mixed date formats, duplicate rows and a weird encoding; clean it",
            "csv-data-cleaning",
        ),
    ],
)
def test_clear_requests_match_their_skill_and_load_its_body(bundled, task, expected):
    result = bundled.route(task)
    assert result.match == expected and result.related_match is None and not result.novel
    assert result.skill is not None and result.skill.body.strip()
    assert result.components["calibrated"] == pytest.approx(result.score, abs=1e-4)


@pytest.mark.parametrize(
    "task",
    ["What's the capital of Australia?", "Write a haiku about autumn rain.", "Thanks, that's all I needed."],
)
def test_unrelated_requests_are_novel_and_load_nothing(bundled, task):
    result = bundled.route(task)
    assert (result.match, result.related_match, result.skill) == (None, None, None)
    assert result.novel and result.alternatives == ()
    assert bundled.suggest(task) == []


def test_candidates_are_ranked_best_first_and_k_is_respected(bundled):
    result = bundled.route("write release notes and a conventional commit message", k=5)
    scores = [c.score for c in result.ranked]
    assert len(result.ranked) == 5 and scores == sorted(scores, reverse=True)
    assert result.skill is not None and result.skill.name == result.ranked[0].name


def test_routing_is_deterministic_for_a_fixed_library(bundled):
    task = "speed up a slow SQL query"
    first = bundled.route(task)
    for _ in range(5):
        again = bundled.route(task)
        assert (again.match, again.score, [c.name for c in again.ranked]) == (
            first.match,
            first.score,
            [c.name for c in first.ranked],
        )


def test_platform_filter_uses_the_callers_platform_before_ranking(bundled):
    task = "EXPLAIN ANALYZE shows a sequential scan on orders; which index should I add?"
    on_windows = bundled.route(task, CallerContext(platform="windows"))
    assert on_windows.match != "postgres-query-tuning"
    assert on_windows.components["filtered_out"] == {"platform": 1}
    assert bundled.route(task, CallerContext(platform="darwin")).match == "postgres-query-tuning"


def test_manual_and_blocked_skills_are_never_routed_but_manual_ones_load_by_name(tmp_path, library_factory):
    body = "# Postgres\n\nUse EXPLAIN ANALYZE to read the plan and add the right index.\n"
    write_skill(
        tmp_path,
        "pg-manual",
        "Tune slow PostgreSQL queries with EXPLAIN and indexes.",
        body,
        extra="metadata:\n  activation: manual\n",
    )
    write_skill(
        tmp_path,
        "pg-blocked",
        "Tune slow PostgreSQL queries with EXPLAIN and indexes.",
        body,
        extra="metadata:\n  trust: blocked\n",
    )
    library = library_factory(tmp_path)
    result = library.route("My PostgreSQL query is slow; read the EXPLAIN plan and pick an index")
    assert result.novel
    assert result.components["filtered_out"] == {"activation: manual": 1, "trust: blocked": 1}
    # Nothing was left to score, and the decision still says what a score would have needed.
    assert result.components["candidates_considered"] == 0
    assert {"background_anchor", "own_anchor", "related_at", "match_at"} <= set(result.components)
    assert library.get("pg-manual").name == "pg-manual"
    with pytest.raises(Exception, match="trust: blocked"):
        library.get("pg-blocked")


def test_malformed_routing_metadata_disables_only_that_skill(tmp_path, library_factory, caplog):
    write_skill(
        tmp_path, "broken-meta", "Tune slow PostgreSQL queries.", extra="metadata:\n  priority: high\n"
    )
    write_skill(tmp_path, "fine", "Tune slow PostgreSQL queries with EXPLAIN.")
    with caplog.at_level(logging.WARNING):
        library = library_factory(tmp_path)
    assert "priority must be an integer" in library.status().disabled["broken-meta"]
    assert "broken-meta" in caplog.text
    assert library.route("tune a slow PostgreSQL query with EXPLAIN").skill.name == "fine"


def test_a_declared_conflict_keeps_the_higher_priority_skill(tmp_path, library_factory):
    desc = "Tune slow PostgreSQL queries by reading EXPLAIN ANALYZE plans and adding indexes."
    write_skill(tmp_path, "pg-old", desc, extra="metadata:\n  priority: '1'\n  conflicts: pg-new\n")
    write_skill(tmp_path, "pg-new", desc + " Covers PostgreSQL 17.", extra="metadata:\n  priority: '9'\n")
    library = library_factory(tmp_path)
    result = library.route("Tune this slow PostgreSQL query; here is the EXPLAIN ANALYZE plan", k=5)
    assert result.skill.name == "pg-new"
    assert "pg-old" not in [c.name for c in result.ranked]


def test_an_empty_library_or_task_is_novel(tmp_path, library_factory, bundled):
    assert library_factory(tmp_path).route("anything").novel
    assert bundled.route("   ").novel


def test_dropping_conflicts_refills_the_top_k(tmp_path, library_factory):
    desc = "Tune slow PostgreSQL queries by reading EXPLAIN ANALYZE plans and adding indexes."
    others = ",".join(f"pg-{i}" for i in range(5))
    write_skill(tmp_path, "pg-main", desc, extra=f"metadata:\n  priority: '9'\n  conflicts: '{others}'\n")
    for i in range(5):
        write_skill(tmp_path, f"pg-{i}", f"{desc} Variant {i}.")
    for name in ("csv-tidy", "git-notes", "release-notes"):
        write_skill(tmp_path, name, f"Handles {name.replace('-', ' ')} work.")
    library = library_factory(tmp_path)
    result = library.route("Tune this slow PostgreSQL query with EXPLAIN ANALYZE", k=4)
    names = [c.name for c in result.ranked]
    assert names[0] == "pg-main" and len(names) == 4
    assert not any(n.startswith("pg-") and n != "pg-main" for n in names)
