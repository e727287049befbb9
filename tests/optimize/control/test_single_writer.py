"""The promotion module (optimize/control/promote/) is the only code that writes a skills root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_only_promote_writes_a_skills_root_across_every_front_door(tmp_path):
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("writer_probe.py")), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["offenders"] == []
    assert seen["allowed"] > 10  # the hook saw promote's own writes, so it was watching
    assert (
        tmp_path / "skills" / "gamma-reports" / "SKILL.md"
    ).exists()  # create_skill -> approve went through
