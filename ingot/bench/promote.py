"""`ingot bench promote`: how long approval takes, and how long until the new revision is served.

For a typical skill (a ~5 KB SKILL.md plus two small files) in a temporary root, it repeatedly
queues a rewrite with passing evidence (which pre-embeds the candidate, as `ingot serve` and the
CLI do), then times `approve` (re-verification, snapshot,
staging, audit intent, atomic exchange, cleanup, audit outcome, every step fsynced) and the
time from the approve call until a running library, kept fresh by its file watcher, serves the
new revision. Prints JSON with medians and p95s.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from ingot.bench.latency import percentiles
from ingot.progress import OnStep, Steps
from ingot.settings import Settings
from mcp_server.embedding import load_embedder
from mcp_server.library import Library
from optimize.control.changes import ChangeControl

BODY = "\n".join(f"{n}. Check step {n} of the release checklist and record the result." for n in range(80))


def _files(round_: int) -> dict[str, bytes]:
    md = (
        "---\nname: bench-skill\ndescription: Runs the release checklist.\n---\n"
        f"# Bench, round {round_}\n\n{BODY}\n"  # a body change: the description stays
    )
    return {
        "SKILL.md": md.encode(),
        "templates/checklist.md": b"- [ ] item\n" * 50,
        "scripts/check.sh": b"#!/bin/sh\necho ok\n",
    }


def passing_ab(samples: int = 6) -> dict:
    """A held-out A/B that passes today's A/B rules: distinct gains on every case, won pairwise, so
    the exact sign-flip test gives p = 1/2^n (n = 6: 0.016)."""
    cases = [
        {
            "id": f"h{i}",
            "champion": 0.2,
            "challenger": 0.9 - i / 100,
            "champion_pass": False,
            "challenger_pass": True,
        }
        for i in range(samples)
    ]
    pairwise = {"status": "measured", "wins": samples, "ties": 0, "losses": 0}
    return {"ab": {"status": "measured", "samples": samples, "cases": cases, "pairwise": pairwise}}


def run(settings: Settings, rounds: int, on_step: OnStep | None = None) -> dict:
    """Approval latency and approve-to-served time over `rounds` promotions (each counted to
    `on_step`)."""
    count = Steps(["approve to served"], on_step).begin("approve to served")
    work = Path(tempfile.mkdtemp(prefix="ingot-bench-promote-"))
    library: Library | None = None
    try:
        root = work / "skills"
        root.mkdir()
        embedder = load_embedder(
            settings.embed_model_dir,
            settings.embed_model_sha256,
            work / "vectors.sqlite",  # its own cache: the benchmark leaves no state behind
            threads=settings.embed_threads,
            backend=settings.embed_backend,
            model=settings.embed_model,
        )
        library = Library((root,), embedder)
        control = ChangeControl(work / "runs", (root,), prepare=library.prewarm, neighbours=library.current)
        checks = {
            "checks": {
                "status": "measured",
                "results": {
                    k: {"passed": True, "detail": "bench"} for k in ("validation", "injection", "collision")
                },
            }
        }
        # The bench times the promotion, not the evidence: its changes are approved accepting what
        # the synthetic bundles do not measure (replay, routing impact, ...), as a person may.
        accept = "benchmark: synthetic evidence"
        control.propose("bench-skill", "operator", _files(0), checks, new=True)
        control.approve("bench-skill", "bench", control.queue.get("bench-skill").id, accept_missing=accept)
        library.reload()
        library.start_watching()
        ab = passing_ab()
        approve_ms, served_ms = [], []
        for round_ in range(1, rounds + 1):
            change, _ = control.propose(
                "bench-skill", "optimizer", _files(round_), {**checks, **ab}, new=False
            )
            start = time.perf_counter()
            control.approve("bench-skill", "bench", change.id, accept_missing=accept)  # refused: no number
            approve_ms.append((time.perf_counter() - start) * 1000)
            while library.get("bench-skill").revision != change.candidate_revision:
                if time.perf_counter() - start > 30:
                    raise RuntimeError("promoted revision not served within 30 s")
                time.sleep(0.001)
            served_ms.append((time.perf_counter() - start) * 1000)
            count(round_, rounds, "promotions timed")
        return {
            "rounds": rounds,
            "approve_ms": percentiles(approve_ms),
            "approve_to_served_ms": percentiles(served_ms),
            "audit_lines": control.audit.verify().lines,
        }
    finally:
        if library is not None:
            library.stop_watching()
        shutil.rmtree(work, ignore_errors=True)
