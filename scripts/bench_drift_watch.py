"""What the autopilot's drift watch costs per tick: a full status scan versus the disk-state token
it now checks first (ARCHITECTURE.md, "Where agents write"). Prints JSON; CPU time, medians of 5.

    .venv/bin/python scripts/bench_drift_watch.py 10000
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ingot.bench.workload import write_library  # noqa: E402
from mcp_server.registry import Limits, Registry  # noqa: E402
from optimize.control.changes import ChangeControl  # noqa: E402


def _cpu_ms(work) -> float:  # noqa: ANN001 - any callable
    start = time.process_time()
    work()
    return (time.process_time() - start) * 1000


def run(size: int) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="ingot-bench-drift-"))
    try:
        write_library(folder / "skills", size)
        control = ChangeControl(folder / "home", (folder / "skills",))
        registry = Registry((folder / "skills",), Limits())
        registry.reload()

        return {
            "skills": size,
            "status_scan_cpu_ms": round(statistics.median(_cpu_ms(control.status) for _ in range(5)), 1),
            "disk_state_cpu_ms": round(statistics.median(_cpu_ms(registry.state) for _ in range(5)), 2),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 10000)))
