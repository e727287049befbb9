"""`ingot bench promote` runs end to end on today's change control (it once broke unnoticed):
every round's rewrite passes the gate, is promoted and served, and the chain records it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def test_bench_promote_prints_medians_for_every_round(tmp_path):
    here, home = tmp_path / "cwd", tmp_path / "home"
    here.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "ingot.cli", "bench", "promote", "--rounds", "3"],
        cwd=here,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["rounds"] == 3 and report["approve_ms"]["p50"] > 0
    assert report["approve_to_served_ms"]["p50"] >= report["approve_ms"]["p50"] * 0.5
    assert report["audit_lines"] == 3 * 3 + 3  # create: propose, intent, done; each round the same
    assert list(here.iterdir()) == []  # nothing left behind in the folder it ran from
