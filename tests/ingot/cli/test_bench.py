"""The benchmarks run end to end and print what they claim to measure."""

from __future__ import annotations

import json

import frontmatter

from ingot.bench.routing import _bodies_stripped
from tests.ingot.cli.test_main import FIXTURES, bundled, ingot
from tests.optimize.conftest import require_bwrap


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


def test_bench_routing_leaves_the_library_untouched_so_it_runs_again(tmp_path):
    """The served child's state home claims links in its own folder, never the benchmarked root: a
    claim left beside it would name a deleted home and refuse the next run."""
    root = bundled(tmp_path)
    before = _tree(tmp_path)
    for extra in ((), ("--strip-bodies",)):
        done = ingot(
            "bench", "routing", "--skills", str(root), "--cases", str(FIXTURES / "bundled_cases.jsonl"),
            *extra, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["skills"] == 7 and report["top1"] is not None
    assert report["bodies"] == "stripped to a title"
    assert _tree(tmp_path) == before


def test_stripped_copies_keep_the_frontmatter_and_cut_each_body_to_a_title(tmp_path):
    root = bundled(tmp_path)
    with _bodies_stripped((root,)) as (copy,):
        names = sorted(p.name for p in copy.iterdir())
        assert names == sorted(p.name for p in root.iterdir() if (p / "SKILL.md").is_file())
        for name in names:
            original = frontmatter.loads((root / name / "SKILL.md").read_text())
            stripped = frontmatter.loads((copy / name / "SKILL.md").read_text())
            assert stripped.metadata == original.metadata and original.content.strip()
            assert stripped.content == f"# {name}"
            assert sorted(p.name for p in (copy / name).iterdir()) == ["SKILL.md"]
    assert not copy.exists()


def test_bench_sandbox_prints_medians_against_a_floor(tmp_path):
    require_bwrap()
    done = ingot("bench", "sandbox", "--rounds", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["rounds"] == 3 and report["sandboxed_true_median_ms"] > 0
    assert report["ratio_to_floor"] > 0 and report["path"]


def test_bench_agent_shows_fewer_prompt_tokens_with_only_the_tools_a_skill_needs(tmp_path):
    require_bwrap()
    done = ingot("bench", "agent", cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rows = {row["skill"].split(" (")[0]: row for row in report["per_call"]}
    assert len(rows["bare SKILL.md"]["stock_deepagents"]["tools"]) == 8
    assert rows["bare SKILL.md"]["ingot"]["tools"] == []
    assert rows["with a file"]["ingot"]["tools"] == ["read_file"]
    assert rows["with a script"]["ingot"]["tools"] == ["execute", "read_file", "write_file"]
    for row in rows.values():
        assert row["ingot"]["prompt_tokens"] < row["stock_deepagents"]["prompt_tokens"]
    assert report["trivial_routed_task"]["model_requests_median"] == 1


def test_bench_regress_on_an_endpoint_rerecords_and_redrafts_the_goldens_and_replays_from_its_cassettes(
    tmp_path,
):
    from tests.regress_sim import TIERS, install
    from tests.scripted_llm import scripted_llm

    env = {
        "AGENT_MODEL": "agent-model",
        "JUDGE_L1_MODEL": TIERS["L1"],
        "JUDGE_L2_MODEL": TIERS["L2"],
        "JUDGE_L3_MODEL": TIERS["L3"],
        "TEACHER_MODEL": "teacher-model",
        "EXEC_SANDBOX": "none",
    }
    out = tmp_path / "run"

    def measured(report: dict) -> tuple:
        headline = report["headline"]
        return (
            headline["exercised regressions BLOCKed"]["rate"],
            headline["unexercised changes WARNed"]["rate"],
            headline["false blocks"],
        )

    with scripted_llm() as server:  # stands in for a real endpoint: the CLI only sees a base URL
        install(server)
        done = ingot(
            "bench", "regress", "--endpoint", server.url, "--out", str(out), cwd=tmp_path, timeout=300, **env
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["models"] == {"serving": "agent-model", **TIERS, "teacher": "teacher-model"}
        assert report["measures"].startswith("real models: detection by agent-model")
        assert report["notes"] == [] and report["edits"] >= 60
        assert measured(report)[0] >= 0.95 and measured(report)[1] == 1.0
        blocked = measured(report)[2]  # wr-amber-unlisted's BLOCK: see tests/ingot/bench/test_regress.py
        assert blocked == {**dict.fromkeys(blocked, 0), "world-rule-line": blocked["world-rule-line"]}
        assert blocked["world-rule-line"] <= 1 and len(blocked) == 5
        assert measured(json.loads((out / "report.json").read_text())) == measured(report)
        sent = len(server.chat_requests())
        again = ingot(
            "bench", "regress", "--endpoint", server.url, "--out", str(out), cwd=tmp_path, timeout=300, **env
        )
        assert again.returncode == 0, again.stderr
        assert len(server.chat_requests()) == sent  # every call came from the run's cassette
        assert measured(json.loads(again.stdout)) == measured(report)


def test_routing_scores_count_an_acceptable_skill_as_right_for_top1_and_recall_alike():
    """An `acceptable` name is a right answer wherever it appears: loaded (top-1) or listed among
    the first three names (recall@3). Counting only `expected` for recall let a case be right at
    top-1 and missed in the hint list."""
    from ingot.bench.routing import Case, Decision, score

    cases = [
        Case("a", "task a", "alpha", "positive", frozenset({"alpha-2"})),
        Case("b", "task b", "beta", "positive", frozenset({"beta-2"})),
        Case("c", "task c", "gamma", "positive", frozenset()),
        Case("n", "task n", None, "negative", frozenset()),
    ]
    decisions = [
        Decision("alpha-2", ("alpha-2", "x", "y"), 0.9, True),  # acceptable, loaded
        Decision(None, ("x", "y", "beta-2", "beta"), 0.1),  # acceptable third; expected fourth
        Decision(None, ("x", "y", "z", "gamma"), 0.1),  # right only fourth: a miss
        Decision(None, ("x",), 0.1),
    ]
    report = score(cases, decisions)
    assert report["top1"] == round(1 / 3, 4)
    assert report["recall_at_3"] == round(2 / 3, 4)
    assert report["no_route_rate"] == 1.0
