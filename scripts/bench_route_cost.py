"""Where one in-process route's time goes on a synthetic library, and what the embedding floor
hides. Prints JSON; the numbers docs/routing-measurements.md ("Serving latency") cites.

    python scripts/bench_route_cost.py --size 10000

On `ingot bench latency`'s synthetic library (vectors cached under <tmp>/ingot-bench, as there):
- route_warm_ms: `Library.route` p50 with the task's vector already cached (scoring only);
- route_minus_embedding_ms: p50 of a fresh task's route minus its own embedding (`embed_ms`);
- sentences: how many multi-sentence skills compare their sentences per task (bounded best
  sentence, mcp_server/ranking.py) against how many there are, and the full comparison's time;
- embedding_ms: one fresh task's embedding back to back, with other work between, and after a
  2 ms pause (a server's cores idle between requests).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingot.bench.workload import queries, write_library  # noqa: E402
from ingot.runtime import one_blas_thread  # noqa: E402
from mcp_server.calibration import Procedure, background_tasks, calibrate  # noqa: E402
from mcp_server.embedding import load_embedder  # noqa: E402
from mcp_server.index import Index, terms  # noqa: E402
from mcp_server.library import Library  # noqa: E402
from mcp_server.ranking import Ranker  # noqa: E402
from mcp_server.registry import Registry  # noqa: E402


def p50(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10000)
    args = parser.parse_args()
    cache = Path(tempfile.gettempdir()) / "ingot-bench" / "cache" / "vectors.sqlite"
    embedder = load_embedder(None, None, cache)
    root = Path(tempfile.mkdtemp(prefix="ingot-route-cost-")) / "skills"
    write_library(root, args.size)
    library = Library((root,), embedder)
    library.reload()
    registry = Registry((root,))
    registry.reload()
    index = Index(registry.skills(), embedder)
    scoring, _ = calibrate(index, embedder.embed(list(background_tasks())), embedder.embed, Procedure())
    ranker = Ranker.build(index, scoring)
    multi = len(index.sentence_vectors()[0])
    warm_tasks = queries(200, 1)
    for task in warm_tasks:
        embedder.embed_query(task)
    with one_blas_thread():
        warm = [timed(lambda t=t: library.route(t)) for t in warm_tasks]
        fresh = []
        for task in queries(200, 8):
            start = time.perf_counter()
            result = library.route(task)
            fresh.append((time.perf_counter() - start) * 1000 - float(result.components["embed_ms"]))
        checked, full = [], []
        for task in warm_tasks:
            vector = embedder.embed_query(task)
            _, computed = ranker.rank(vector, terms(task), np.ones(len(index), dtype=bool), 5)
            checked.append(len(computed.sentences[0]))
            full.append(timed(lambda v=vector, t=task: ranker.rank(v, terms(t))))
    pauses: dict[str, list[float]] = {"back_to_back": [], "work_between": [], "pause_2ms": []}
    blob = {f"k{i}": ["x" * 50, i, {"a": [1, 2, 3] * 10}] for i in range(300)}
    for seed, mode in enumerate(pauses, start=20):
        for task in queries(120, seed):
            if mode == "work_between":
                json.loads(json.dumps(blob))
            elif mode == "pause_2ms":
                time.sleep(0.002)
            pauses[mode].append(timed(lambda t=task: embedder.embed_query(t)))
    print(
        json.dumps(
            {
                "skills": args.size,
                "route_warm_ms": p50(warm),
                "route_minus_embedding_ms": p50(fresh),
                "sentences": {
                    "multi_sentence_skills": multi,
                    "checked_per_task_p50": statistics.median(checked),
                    "checked_per_task_p95": sorted(checked)[int(0.95 * (len(checked) - 1))],
                    "full_ranking_with_every_sentence_ms": p50(full),
                },
                "embedding_ms": {mode: p50(values) for mode, values in pauses.items()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
