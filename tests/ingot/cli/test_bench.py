"""The agent and sandbox benchmarks run end to end and print what they claim to measure."""

from __future__ import annotations

import json

from tests.ingot.cli.test_main import ingot
from tests.optimize.conftest import require_bwrap


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
