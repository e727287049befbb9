"""The labelled edit benchmark: shipped data that holds together, and every edit decided as
labelled against the scripted models (the mechanics CI checks)."""

from __future__ import annotations

import json

from ingot.bench.regress import CLASSES, goldens_revisions, load
from optimize.measure.golden_store import GoldenStore
from scripts.bench_regress import run


def test_the_benchmark_has_thirty_labelled_edits_over_five_skills_with_goldens_and_cassettes():
    bench = load()
    assert len(bench.edits) >= 30 and len(bench.skills) >= 5
    assert {e.cls for e in bench.edits} == set(CLASSES)
    assert {e.kind for e in bench.edits if e.cls == "regressing"} >= {"drops-step", "changes-fact"}
    assert {e.kind for e in bench.edits if e.cls == "cosmetic"} == {"formatting", "rewording", "reordering"}
    store = GoldenStore(bench.folder / "goldens")
    revisions = goldens_revisions(bench)
    cassette = [
        json.loads(line) for line in (bench.folder / "cassettes" / "goldens.jsonl").read_text().splitlines()
    ]
    said = {entry["response"].get("text") for entry in cassette}
    for skill in bench.skills:
        (stored,), problems = store.active(skill)
        assert not problems and stored.golden.revision == revisions[skill]  # recorded with today's skill
        assert stored.review.status == "human-approved" and stored.review.criteria
        assert stored.golden.answer in said  # the cassette holds what the model said in that run
    harnesses = {s["harness"] for s in bench.skills.values()}
    assert "ingot-agent" in harnesses and len(harnesses - {"ingot-agent"}) >= 2  # proxy-captured ones too


def test_every_labelled_edit_is_decided_as_labelled_by_the_expected_tier(tmp_path):
    report = run(tmp_path)
    wrong = [
        (r["id"], r["verdict"], r["tier"], r["drift"], r["expected"])
        for r in report["rows"]
        if not r["as_expected"]
    ]
    assert wrong == []
    assert report["detection"] == 1.0
    assert report["false_blocks"] == {"improving": 0, "cosmetic": 0, "world-drift": 0}
    assert report["held_for_a_human"] == {"regressing": 0, "improving": 0, "cosmetic": 0, "world-drift": 2}
    assert report["drift_recognised"] == "4 of 4"
    assert set(report["tiers_by_class"]["cosmetic"]) <= {"L0", "L1"}
    assert set(report["tiers_by_class"]["regressing"]) <= {"L0", "L3"}  # a block: L0 evidence or L2+L3
    assert report["judging_usd"] < report["all_strongest_judging_usd"]
    assert report["cost_per_verdict_usd"] > 0 and report["noise_floor_pass_rate"] == 1.0
    assert report["ledger"]["usd"] == round(sum(r["usd"] for r in report["rows"]), 6)
