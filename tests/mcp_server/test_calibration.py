"""Self-calibration: each library's decision rule is derived from the library, with the real model.

Two shipped fixture libraries in different styles (descriptions only; descriptions with bodies)
must both route their own pseudo-queries and real-style requests, and refuse off-library tasks,
with the same procedure and no per-library constant."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ingot.bench.workload import write_library
from mcp_server.calibration import (
    BODY_MIN_TERMS,
    COMPONENTS,
    Procedure,
    Scoring,
    _sentences,
    background_tasks,
    leaders,
)
from mcp_server.index import Scores
from mcp_server.library import Library
from tests.conftest import write_skill

LIBRARIES = Path(__file__).resolve().parents[1] / "fixtures" / "libraries"
BODYLESS, BODYRICH = LIBRARIES / "bodyless", LIBRARIES / "bodyrich"

REQUESTS = {
    BODYLESS: {
        "Books do not balance: check supplier bills against POs and payments": "invoice-reconciliation",
        "Roll out v2 of the checkout service to the cluster and be ready to roll back": "kubernetes-rollout",
        "Here's the transcript of episode 12, write the notes with chapter times": "podcast-show-notes",
        "Is this ALTER TABLE adding a NOT NULL column safe on production Postgres?": "sql-migration-review",
        "Check our landing page for screen reader and colour contrast problems": "accessibility-audit",
        "Tailor my CV for this data engineer job posting": "resume-tailoring",
        "Security groups were edited by hand; compare Terraform state with live": "terraform-drift-check",
    },
    BODYRICH: {
        "This parser has no tests; add pytest tests for the edge cases": "unit-test-writer",
        "Our image is 1.4 GB, make it smaller with a multi-stage build": "dockerfile-slimming",
        "Find which commit broke the login page between v1.2 and v1.3": "git-bisect-helper",
        "Write a regex that pulls order ids like ORD-12345 out of these log lines": "regex-builder",
        "Add sign in with GitHub to our web app": "oauth-integration",
        "The export has duplicate rows and dates in three formats; clean the CSV": "csv-deduplication",
        "Draft the postmortem for yesterday's two-hour outage": "incident-postmortem-writer",
    },
}
OFF_LIBRARY = [  # none of these is in the shipped background tasks
    "What year did the Berlin Wall fall?",
    "Recommend a good sci-fi movie for tonight",
    "How do I get chewing gum out of my hair?",
    "Write a sonnet about the sea at night",
    "Is a tomato a fruit or a vegetable?",
    "What's a good stretch for a stiff neck?",
]


@pytest.fixture(scope="module")
def libraries(embedder):
    from mcp_server.library import Library

    made = {}
    for root in (BODYLESS, BODYRICH):
        library = Library((root,), embedder)
        library.reload()
        made[root] = library
    return made


@pytest.mark.parametrize("root", [BODYLESS, BODYRICH], ids=["bodyless", "bodyrich"])
def test_a_library_routes_its_own_pseudo_queries_to_their_skill(libraries, root):
    """Description sentences route home; one too vague to say anything ("Use before a release.")
    may be novel, but none is loaded as the wrong skill."""
    library = libraries[root]
    outcomes = []
    for name, skill in library.skills().items():
        for sentence in _sentences(skill.description):
            result = library.route(sentence)
            outcomes.append((name, result.skill.name if result.skill else None, sentence))
    assert not [o for o in outcomes if o[1] is not None and o[1] != o[0]]
    assert sum(o[1] == o[0] for o in outcomes) / len(outcomes) >= 0.9


@pytest.mark.parametrize("root", [BODYLESS, BODYRICH], ids=["bodyless", "bodyrich"])
def test_a_library_routes_real_requests_and_refuses_off_library_tasks(libraries, root):
    library = libraries[root]
    routed = {task: library.route(task) for task in REQUESTS[root]}
    assert {t: (r.skill.name if r.skill else None) for t, r in routed.items()} == REQUESTS[root]
    for task in OFF_LIBRARY:
        result = library.route(task)
        assert (result.match, result.related_match, result.skill) == (None, None, None), task


def test_each_library_gets_its_own_thresholds_from_the_same_procedure(libraries):
    bodyless, bodyrich = (libraries[r].calibration() for r in (BODYLESS, BODYRICH))
    assert bodyless.tau_related == bodyrich.tau_related == Procedure().tau_related
    assert bodyless.related_threshold != pytest.approx(bodyrich.related_threshold, abs=1e-3)
    assert bodyless.body_less_skills == 12 and bodyrich.body_less_skills == 0
    for derived in (bodyless, bodyrich):
        assert derived.background_tasks == len(background_tasks())
        assert derived.no_route_background >= 0.95 and derived.route_own >= 0.9
        assert derived.background_anchor < derived.related_threshold < derived.own_anchor


def test_calibration_is_deterministic_for_a_fixed_library(embedder):
    from mcp_server.library import Library

    summaries = []
    for _ in range(2):
        library = Library((BODYRICH,), embedder)
        library.reload()
        summaries.append(library.calibration().summary())
    assert summaries[0] == summaries[1]


def test_a_hundred_distractor_skills_do_not_turn_a_correct_route_novel(tmp_path, library_factory):
    root = tmp_path / "skills"
    shutil.copytree(BODYRICH, root)
    before = library_factory(root)
    routed = {t: before.route(t).skill.name for t in REQUESTS[BODYRICH]}
    write_library(tmp_path / "distractors", 100)
    for folder in (tmp_path / "distractors").iterdir():
        folder.rename(root / folder.name)
    after = library_factory(root)
    assert after.status().skills == 112
    assert {t: (after.route(t).skill or before.route(t).skill).name for t in routed} == routed
    assert all(after.route(t).skill is not None for t in routed)


EVERYDAY = {  # skills that the shipped background tasks' everyday areas would lead to
    "weather-forecast": "Gives the weather forecast for a city: temperature, rain and wind for days.",
    "recipe-finder": "Finds recipes for a dish or an ingredient, with cooking times and servings.",
    "flight-search": "Searches flights between two cities on a date and compares their prices.",
    "movie-picks": "Recommends movies and TV series to watch tonight by genre and mood.",
    "workout-planner": "Plans a weekly workout and stretching routine for a fitness goal.",
    "gift-ideas": "Suggests birthday and holiday gift ideas for a friend or relative on a budget.",
}


def test_skills_that_can_never_be_routed_do_not_move_the_anchors(tmp_path, library_factory):
    """Blocked and manual skills are never a route, so they must not raise the bar for the rest:
    the anchors with them match the anchors without them, while the same skills served do move it."""
    derived = {}
    for variant in ("absent", "held", "served"):
        root = tmp_path / variant
        shutil.copytree(BODYRICH, root)
        if variant != "absent":
            for i, (name, description) in enumerate(EVERYDAY.items()):
                hold = ("  trust: blocked\n", "  activation: manual\n")[i % 2] if variant == "held" else ""
                write_skill(root, name, description, extra=f"metadata:\n{hold}" if hold else "")
        derived[variant] = library_factory(root).calibration()
    absent, held, served = derived["absent"], derived["held"], derived["served"]
    assert served.background_anchor > absent.background_anchor + 0.015  # they would lead everyday tasks
    assert held.background_anchor == pytest.approx(absent.background_anchor, abs=0.005)
    assert held.own_anchor == pytest.approx(absent.own_anchor, abs=0.005)
    assert held.pseudo_queries == absent.pseudo_queries < served.pseudo_queries


def test_a_skill_without_a_body_is_scored_on_what_it_has(tmp_path, library_factory):
    """In a mixed library a body-less skill still wins its request (components renormalised)."""
    root = tmp_path / "skills"
    shutil.copytree(BODYRICH, root)
    shutil.copytree(BODYLESS / "sql-migration-review", root / "sql-migration-review")
    shutil.copytree(BODYLESS / "accessibility-audit", root / "accessibility-audit")
    library = library_factory(root)
    index = library._router._state.index
    assert index.body_terms("sql-migration-review") < BODY_MIN_TERMS <= index.body_terms("regex-builder")
    task = "Is this ALTER TABLE adding a NOT NULL column safe on production Postgres?"
    result = library.route(task)
    assert result.skill is not None and result.skill.name == "sql-migration-review"
    assert result.components["body_used"] == 0.0


def test_min_score_raises_or_lowers_the_bar_for_one_call(libraries):
    library = libraries[BODYRICH]
    task = "Add sign in with GitHub to our web app"
    normal = library.route(task)
    assert normal.skill is not None
    strict = library.route(task, min_score=normal.score + 0.01)
    assert strict.novel and strict.nearest[0].name == "oauth-integration" and strict.nearest[0].fit == "none"
    lenient = library.route(OFF_LIBRARY[0], min_score=-1.0)
    assert lenient.skill is not None and lenient.related_match == lenient.skill.name
    for bad in (float("nan"), 2.5, -1.5):  # NaN compares false with every threshold: it would load
        with pytest.raises(ValueError, match="min_score must be a number from -1.0 to 2.0"):
            library.route(task, min_score=bad)


def test_novel_decisions_still_name_the_three_nearest_skills(libraries):
    result = libraries[BODYLESS].route("What year did the Berlin Wall fall?")
    assert result.novel and result.alternatives == ()
    assert len(result.nearest) == 3 and all(c.fit == "none" for c in result.nearest)
    assert [c.name for c in result.nearest] == [c.name for c in result.ranked[:3]]


def test_the_background_tasks_are_many_distinct_and_short():
    tasks = background_tasks()
    assert len(tasks) >= 200 and len(set(tasks)) == len(tasks)
    assert all(0 < len(t) <= 200 for t in tasks)


def test_thresholds_given_in_settings_override_the_procedure(embedder):
    from mcp_server.library import Library

    library = Library((BODYRICH,), embedder, procedure=replace(Procedure(), tau_related=0.9, tau_match=0.95))
    library.reload()
    assert library.calibration().tau_related == 0.9
    assert library.route("Add sign in with GitHub to our web app").novel


def test_a_library_of_one_skill_calibrates_and_routes(tmp_path, library_factory):
    write_skill(tmp_path, "only-one", "Converts Markdown documents to PDF with a table of contents.")
    library = library_factory(tmp_path)
    assert library.route("Turn my Markdown notes into a PDF with a table of contents").skill is not None
    assert library.route("What year did the Berlin Wall fall?").novel


def test_an_edit_is_served_at_once_and_its_rule_is_re_derived_in_the_background(tmp_path, library_factory):
    from tests.conftest import wait_for

    root = tmp_path / "skills"
    shutil.copytree(BODYRICH, root)
    library = library_factory(root)
    before = library.calibration()
    assert not before.provisional
    library.start_watching()
    write_skill(root, "haiku-writer", "Writes haiku about nature. Counts the syllables of each line.")
    wait_for(lambda: "haiku-writer" in library.skills(), timeout=20)
    wait_for(lambda: not library.calibrating() and not library.calibration().provisional, timeout=60)
    after = library.calibration()
    assert after.pseudo_queries == before.pseudo_queries + 2
    fresh = Library((root,), library._router.embedder)
    fresh.reload()
    assert after.summary() == fresh.calibration().summary()
    assert (
        library.route("Write a haiku about the autumn forest, five seven five").skill.name == "haiku-writer"
    )


def test_ranking_only_weights_order_the_skills_but_never_enter_the_confidence():
    """Two stages: the leader is the best by ranking score; its confidence is built from the
    confidence's own weights only (here the body BM25 that made it the leader counts for nothing)."""
    weights = {f"{stage}_{c}": 0.0 for stage in ("w", "rank") for c in COMPONENTS}
    weights.update(w_dense_description=1.0, rank_bm25_body=1.0, w_coverage=0.0)
    procedure = replace(Procedure(), **weights)
    scoring = Scoring(procedure, np.ones((len(COMPONENTS), 2), dtype=bool), (1.0, 1.0))
    zeros = np.zeros((1, 2), dtype=np.float32)
    raw = Scores(np.array([[0.5, 0.4]], np.float32), zeros, zeros, zeros, np.array([[0.0, 9.0]], np.float32))
    fused, ranked = scoring.fuse(raw), scoring.rank(raw, scoring.fuse(raw))
    assert fused[0].tolist() == pytest.approx([0.5, 0.4])
    assert ranked[0, 1] > ranked[0, 0]
    confidence, leader = leaders(scoring, ranked, fused, lambda rows: np.zeros(len(rows)), np.zeros(1))
    assert leader.tolist() == [1] and confidence.tolist() == pytest.approx([0.4])
    without = replace(procedure, rank_bm25_body=0.0)
    plain = Scoring(without, scoring.present, (1.0, 1.0))
    assert plain.rank(raw, fused) is fused  # nothing ranking-only: one fusion serves both stages


VENDOR_PREAMBLE = "# Acme weather service\n\n" + " ".join(
    ["Every Acme weather call needs an API key in the ACME_KEY environment variable, answers in JSON,"
     " caches results for ten minutes, retries twice on a timeout and reports quota errors."] * 6
) + "\n\n## Parameters\n\n"  # fmt: skip


def test_a_vendors_look_alike_skills_are_told_apart_by_their_bodies(tmp_path, library_factory):
    """Same description, same long vendor preamble (past what the dense body vector reads): only
    the parameters deep in each body differ, and ranking reads them (ranking-only body BM25)."""
    root = tmp_path / "skills"
    shutil.copytree(BODYRICH, root)
    description = "Looks up the weather for a place and returns the temperature, wind and rain."
    write_skill(root, "weather-lookup", description, body=VENDOR_PREAMBLE + (
        "- `latitude` (number, required): degrees north of the equator.\n"
        "- `longitude` (number, required): degrees east of Greenwich.\n"
        "- `elevation` (number, optional): metres above sea level, for mountain stations.\n"
    ))  # fmt: skip
    write_skill(root, "weather-report", description, body=VENDOR_PREAMBLE + (
        "- `city` (string, required): the city name, e.g. Lyon.\n"
        "- `country` (string, optional): ISO country code.\n"
        "- `units` (string, optional): metric or imperial.\n"
    ))  # fmt: skip
    library = library_factory(root)
    tasks = {
        "Look up the temperature, wind and rain at latitude 45.9, longitude 6.87, elevation 1035 metres": (
            "weather-lookup"
        ),
        "Look up the temperature, wind and rain for the city of Lyon, country France, in imperial units": (
            "weather-report"
        ),
    }
    for task, expected in tasks.items():
        result = library.route(task)
        assert result.skill is not None and result.skill.name == expected, task
