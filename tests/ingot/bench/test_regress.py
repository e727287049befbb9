"""The labelled edit benchmark, built blind: shipped data that holds together, criteria nobody
but the teacher wrote, every class decided as the targets ask against the scripted models (the
mechanics CI checks), and models that know only the text they are served."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ingot.bench.regress import goldens_revisions, load, load_skills
from ingot.bench.regress import run as run_bench
from ingot.bench.regress_report import CLASSES, bootstrap, wilson
from optimize.measure.cascade import JudgeTiers
from optimize.measure.golden_criteria import draft_review
from optimize.measure.golden_store import GoldenStore
from optimize.models.ledger import UsageLedger
from scripts.bench_regress import PRICES, run
from tests.regress_sim import TIERS, install
from tests.scripted_llm import scripted_llm

REGRESSION_KINDS = {
    "drops-step",
    "drops-side-effect",
    "changes-fact",
    "changes-number",
    "changes-threshold",
    "changes-unit",
    "changes-timezone",
    "flips-decision",
    "drops-format",
    "removes-safety-rule",
}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    return run(tmp_path_factory.mktemp("bench"))


def scripted(work, bench) -> tuple[dict, list]:
    """The benchmark on a fresh scripted server: its report and every request the models got."""
    with scripted_llm() as server:
        install(server)
        llm = server.client("agent", "judge", ledger=UsageLedger("swap", PRICES))
        found = run_bench(llm, JudgeTiers(TIERS["L1"], TIERS["L2"], TIERS["L3"]), work, bench=bench)
        return found, server.chat_requests()


def test_the_benchmark_has_every_class_over_five_skills_with_goldens_and_cassettes():
    bench = load()
    assert len(bench.edits) >= 60 and len(bench.skills) >= 5
    assert {e.cls for e in bench.edits} == set(CLASSES)
    assert {e.kind for e in bench.edits if e.cls == "regressing"} >= REGRESSION_KINDS
    assert {e.kind for e in bench.edits if e.cls == "cosmetic"} >= {
        "formatting",
        "rewording",
        "reordering",
        "rewords-quoted-phrase",
    }
    assert sum(e.cls == "unexercised" for e in bench.edits) >= 10
    store = GoldenStore(bench.folder / "goldens")
    revisions = goldens_revisions(bench)
    cassette = [
        json.loads(line) for line in (bench.folder / "cassettes" / "goldens.jsonl").read_text().splitlines()
    ]
    said = {entry["response"].get("text") for entry in cassette}
    for skill in bench.skills:
        (stored,), problems = store.active(skill)
        assert not problems and stored.golden.revision == revisions[skill]  # recorded with today's skill
        assert stored.golden.answer in said  # the cassette holds what the model said in that run
    harnesses = {s["harness"] for s in bench.skills.values()}
    assert "ingot-agent" in harnesses and len(harnesses - {"ingot-agent"}) >= 2  # proxy-captured ones too


def test_no_criterion_is_written_by_the_benchs_author_the_teacher_drafts_them_from_the_golden_alone():
    bench = load_skills()
    assert not {"criteria", "facts"} & {k for spec in bench.skills.values() for k in spec}
    assert bench.edits == ()  # what the goldens are made from holds no edit
    store = GoldenStore(bench.folder / "goldens")
    with scripted_llm() as server:
        install(server)
        teacher = server.client("teacher")
        for skill in bench.skills:
            (stored,), _ = store.active(skill)
            review = stored.review
            assert review.status == "teacher-drafted" and review.drafted_by == "teacher-model"
            assert review.approved_by is None
            again, _ = draft_review(teacher, stored.golden)  # from the golden (and its served skill) alone
            assert (again.criteria, again.facts) == (review.criteria, review.facts)
        prompts = [r.body["messages"][-1]["content"] for r in server.chat_requests()]
    edits = load().edits
    assert not any(
        step["replace"] in p for e in edits for step in e.change if len(step["replace"]) > 12 for p in prompts
    )


def test_the_rebuilt_bench_meets_its_targets_on_the_scripted_models(report):
    classes = report["per_class"]
    regressing, unexercised = classes["regressing"], classes["unexercised"]
    assert regressing["BLOCK"]["rate"] >= 0.95 and regressing["not_measured"] == 0
    assert report["missed"] == ["rn-minor"]  # "major" -> "minor": the scripted judges cannot tell a synonym
    assert unexercised["WARN"]["rate"] == 1.0 and unexercised["PASS"]["count"] == 0
    assert all(r["unexercised"] for r in report["rows"] if r["class"] == "unexercised")
    assert {c: classes[c]["BLOCK"]["count"] for c in ("cosmetic", "world-drift", "improving")} == {
        "cosmetic": 0,
        "world-drift": 0,
        "improving": 0,
    }
    rewords = [r for r in report["rows"] if r["class"] == "cosmetic"]
    assert all(r["verdict"] == "PASS" for r in rewords if r["kind"] != "rewords-unexercised-instruction")
    assert report["drift_recognised"] == "13 of 13"
    # World moves no fact lists (provenance alone) and moves of a value a rule line states: every
    # one recognised, none an incident when the live revision is replayed alone (`ingot replay`).
    incidents = report["headline"]["false incidents from `ingot replay` on world moves"]
    assert incidents["count"] == 0 and incidents["n"] == 13 and incidents["not_measured"] == 0
    assert report["headline"]["world moves outside the listed facts as labelled"] == "5 of 5"
    assert {r["id"]: r["verdict"] for r in report["rows"] if r["class"] == "world-rule-line"} == {
        "wr-amber-moved": "PASS",
        # Labelled cosmetic, but the stand-in agent does not read "**Answer** as a table" as the
        # format instruction and stops answering as a table: the BLOCK catches a real change.
        "wr-amber-unlisted": "BLOCK",
        "wr-amber-flaps": "WARN",
        "wr-amber-flip-rule": "BLOCK",  # the rule rewritten to the moved value: never kept by it
    }
    assert classes["world-unlisted"]["BLOCK"]["count"] == 2  # the two regressions in a moved world
    # Issue 36's classes, labelled before they were run. A changed action or recipient in a step
    # no blessed run exercises WARNs whatever the coverage model rules; a flipped comparative or a
    # dropped quantifier BLOCKs where a blessed run exercises it and WARNs where none does.
    assert (
        classes["action-recipient"]["WARN"]["rate"] == 1.0
        and classes["action-recipient"]["PASS"]["count"] == 0
    )
    missed = [
        r["id"] for r in report["rows"] if r["class"] == "comparative-quantifier" and not r["as_expected"]
    ]
    assert missed == ["cq-both-at-least-one"]  # "both" -> "at least one": "both" is no quantifier to L0
    # Rewording a step no run exercises: the model-free check knows no "carries the label" for "labelled"
    # (a WARN a person reads), and the scripted coverage model calls "never" -> "do not" a change.
    unread = {r["id"]: r["verdict"] for r in rewords if r["kind"] == "rewords-unexercised-instruction"}
    assert [i for i, v in unread.items() if v != "PASS"] == ["cw-security-label", "cw-friday-do-not"]
    # A regression keeping every quotable phrase is blocked on what the golden committed to.
    kept_phrases = [
        r for r in report["rows"] if r["kind"] in ("changes-unit", "changes-timezone", "flips-decision")
    ]
    assert kept_phrases and all(r["verdict"] == "BLOCK" and r["tier"] == "L3" for r in kept_phrases)
    headline = report["headline"]["exercised regressions BLOCKed"]
    assert headline == regressing["BLOCK"] and headline["n"] == len(
        [r for r in report["rows"] if r["class"] == "regressing"]
    )
    low, high = headline["ci95_bootstrap"]
    assert low < headline["rate"] <= high <= 1.0 and headline["ci95_wilson"][0] < low
    assert report["cost_per_verdict_usd"] > 0 and report["noise_floor_pass_rate"] == 1.0
    spent = sum(r["usd"] + (r.get("live_usd") or 0) for r in report["rows"])  # + `ingot replay` runs
    assert report["ledger"]["usd"] == pytest.approx(spent, abs=1e-5)
    assert report["measures"].startswith("scripted models: mechanics")


def test_swapping_every_label_changes_no_verdict_the_models_know_only_the_text_they_are_served(
    report, tmp_path
):
    bench = load()
    shifted = bench.edits[1:] + bench.edits[:1]  # each edit takes the next one's id, class, kind, label
    swapped = tuple(
        replace(edit, id=other.id, cls=other.cls, kind=other.kind, expect=other.expect)
        for edit, other in zip(bench.edits, shifted, strict=True)
    )
    assert all(a.id != b.id for a, b in zip(bench.edits, swapped, strict=True))
    found, requests = scripted(tmp_path, replace(bench, edits=swapped))

    def verdicts(edits, rows) -> dict[str, str]:
        return {
            json.dumps([e.skill, e.change, e.world]): r["verdict"] for e, r in zip(edits, rows, strict=True)
        }

    assert verdicts(swapped, found["rows"]) == verdicts(bench.edits, report["rows"])
    assert [r["class"] for r in found["rows"]] != [r["class"] for r in report["rows"]]
    sent = "\n".join(json.dumps(r.body) for r in requests)
    labels = {e.id for e in bench.edits} | {"regressing", "unexercised", "world-drift"}
    assert not [label for label in labels if label in sent]


def test_intervals_are_a_bootstrap_over_edits_and_a_wilson_interval_that_does_not_collapse():
    assert bootstrap([True] * 10) == [1.0, 1.0] and wilson(10, 10)[0] < 0.75
    low, high = bootstrap([True] * 9 + [False])
    assert low < 0.9 < high == 1.0 and bootstrap([]) is None and wilson(0, 0) is None
    few = [True, False, True, False, True]
    assert len({tuple(bootstrap(few, draws=40)) for _ in range(20)}) == 1  # seeded: reproducible
