"""`ingot bench latency`'s arithmetic (the benchmark itself is run by hand: `make bench-latency`)."""

from __future__ import annotations

from ingot.bench.latency import paired_overhead


def test_each_calls_overhead_subtracts_its_own_floors_before_the_median_is_taken():
    routes = [10.0, 12.0, 30.0]  # the third call ran while the machine was busy...
    gets = [3.0, 3.0, 20.0]  # ...and so did its get_skill, timed just before it
    embeds = [5.0, 6.0, 8.0]
    # overheads 2, 3, 2: p95 interpolates between the two largest (ingot/bench/percentiles.py)
    assert paired_overhead(routes, gets, embeds) == {"p50": 2.0, "p95": 2.9}


def test_a_cases_file_gives_each_seed_its_own_tasks(tmp_path):
    """No timed task repeats one that another measurement already embedded (a cache hit would
    time nothing), and too few tasks is one clear error."""
    import json

    import pytest

    from ingot.bench.workload import SEEDS, case_tasks
    from ingot.errors import ConfigError

    cases = tmp_path / "cases.jsonl"
    cases.write_text("".join(json.dumps({"task": f"task {i}", "expected": None}) + "\n" for i in range(100)))
    tasks, per_seed = case_tasks(cases, 200)
    assert per_seed == 100 // len(SEEDS)
    blocks = [tasks(per_seed, seed) for seed in SEEDS]
    assert all(len(b) == per_seed for b in blocks) and tasks(5, 0) == blocks[0][:5]
    assert len({t for b in blocks for t in b}) == per_seed * len(SEEDS)
    cases.write_text("".join(json.dumps({"task": f"task {i}", "expected": None}) + "\n" for i in range(20)))
    with pytest.raises(ConfigError, match="has 20 distinct tasks; the latency bench needs at least 45"):
        case_tasks(cases, 200)


def test_the_latency_bench_measures_a_real_library_with_its_own_tasks(tmp_path):
    """`ingot bench latency --skills DIR --cases FILE` end to end, small: a copy of the bundled
    library is served and timed with the cases' tasks; the library itself is not edited."""
    import json
    import shutil

    from tests.conftest import BUNDLED_SKILLS
    from tests.ingot.cli.test_main import ingot

    skills = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, skills)
    before = {p.name: (p / "SKILL.md").read_bytes() for p in skills.iterdir()}
    cases = tmp_path / "cases.jsonl"
    topics = ["release notes", "a slow Postgres query", "a Dockerfile", "a CSV export", "a postmortem"]
    cases.write_text(
        "".join(
            json.dumps({"task": f"Help with {topics[i % 5]} for project number {i}", "expected": None}) + "\n"
            for i in range(60)
        )
    )
    done = ingot(
        "bench",
        "latency",
        "--skills",
        str(skills),
        "--cases",
        str(cases),
        "--queries",
        "5",
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["queries_per_measurement"] == 5
    (result,) = report["results"]
    assert result["skills"] == len(before)
    assert result["floors"]["query_embedding_ms"]["p50"] > 0 and "overhead_ms" in result
    assert {p.name: (p / "SKILL.md").read_bytes() for p in skills.iterdir()} == before
