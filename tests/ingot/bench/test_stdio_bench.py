"""`ingot bench stdio` end to end, small: it launches `ingot mcp` the way a host does and reports
cold start against its floor and route_and_load over both lanes, without touching the library.
(The numbers themselves are read from a full run by hand, never asserted: this machine is noisy.)"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import BUNDLED_SKILLS
from tests.ingot.cli.test_main import ingot


def test_the_stdio_bench_reports_cold_start_over_its_floor_and_both_lanes_on_a_copy(tmp_path):
    skills = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, skills)
    before = sorted((p.relative_to(skills), p.read_bytes()) for p in skills.rglob("*") if p.is_file())
    done = ingot(
        "bench",
        "stdio",
        "--skills",
        str(skills),
        "--sizes",
        "",
        "--launches",
        "1",
        "--calls",
        "5",
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["floor_cold_start_s"]["launches"] == 1 and report["floor_cold_start_s"]["median"] > 0
    (result,) = report["results"]
    assert result["skills"] == len([p for p in skills.iterdir() if (p / "SKILL.md").is_file()])
    assert result["cold_start_s"]["launches"] == 1
    ratio = result["cold_start_s"]["median"] / report["floor_cold_start_s"]["median"]
    assert result["cold_start_over_floor"] == pytest.approx(ratio, abs=0.15)  # of the unrounded medians
    lanes = result["route_and_load_ms"]
    assert lanes["calls_per_lane"] == 5
    for lane in ("stdio", "http"):
        assert 0 < lanes[lane]["p50"] <= lanes[lane]["p95"]
        assert lanes["floors"][f"{lane}_get_skill"]["p50"] > 0
    assert lanes["stdio_over_http_p50"] > 0
    after = sorted((p.relative_to(skills), p.read_bytes()) for p in skills.rglob("*") if p.is_file())
    assert after == before and not (tmp_path / "skills" / ".ingot").exists()


def test_the_stdio_bench_refuses_too_few_calls_with_one_line(tmp_path):
    done = ingot("bench", "stdio", "--skills", str(BUNDLED_SKILLS), "--calls", "2", cwd=tmp_path, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["Error: --launches must be at least 1 and --calls at least 5"]
