"""`ingot bench sandbox`: what starting the execution sandbox costs, as the user running it.

Times a sandboxed `/usr/bin/true` (files laid out, limits applied, namespaces created, torn down)
against the same command started directly in the same run (the floor), and reports medians and
their ratio. Run it as root and as a normal user to compare the two bubblewrap paths (root drops
to uid 65534 with setpriv first; a normal user relies on bubblewrap's user namespace).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time

from optimize.measure.sandbox import BubblewrapSandbox, Limits


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def run(rounds: int = 30) -> dict:
    sandbox = BubblewrapSandbox(limits=Limits(wall_s=10))
    ready, why = sandbox.ready()
    if not ready:
        return {"uid": os.geteuid(), "ready": False, "why": why}
    files = {"main.py": b"print('hi')\n"}
    floor, sandboxed = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run(["/usr/bin/true"], check=True)
        floor.append(time.perf_counter() - start)
        start = time.perf_counter()
        result = sandbox.run(files, ["/usr/bin/true"])
        sandboxed.append(time.perf_counter() - start)
        if result.status != "passed":
            return {"uid": os.geteuid(), "ready": False, "why": result.reason}
    return {
        "uid": os.geteuid(),
        "path": "setpriv to 65534, then bwrap" if os.geteuid() == 0 else "bwrap --unshare-user",
        "rounds": rounds,
        "sandboxed_true_median_ms": _median_ms(sandboxed),
        "sandboxed_true_p95_ms": round(sorted(sandboxed)[int(0.95 * (rounds - 1))] * 1000, 2),
        "floor_direct_true_median_ms": _median_ms(floor),
        "ratio_to_floor": round(statistics.median(sandboxed) / statistics.median(floor), 1),
    }
