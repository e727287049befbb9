"""Do dense body *chunks* pay for their indexing cost? Prints JSON.

    python scripts/bench_body_chunks.py --skills ../shared/corpus/skills \
        --cases ../shared/corpus/dev_cases.jsonl

Splits every skill body into ~1000-character paragraph chunks, embeds them (timed, no cache),
and compares ranking quality (top-1, recall@3 of the unthresholded ranking) of: the router's
fused score as shipped, chunks alone (max over a skill's chunks), and the fused score plus a
chunk component at several weights. The router indexes no chunks because this did not pay.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.calibration import Procedure, background_tasks, calibrate  # noqa: E402
from mcp_server.embedding import load_embedder  # noqa: E402
from mcp_server.index import Index, humanise, terms  # noqa: E402
from mcp_server.registry import Registry  # noqa: E402

CHUNK_CHARS = 1000


def chunks(body: str) -> list[str]:
    out, current = [], ""
    for paragraph in (p.strip() for p in re.split(r"\n\s*\n", body) if p.strip()):
        if current and len(current) + len(paragraph) > CHUNK_CHARS:
            out.append(current)
            current = ""
        current += paragraph + "\n\n"
    return [*out, current] if current else out


def metrics(scores: np.ndarray, names: list[str], cases: list[dict]) -> dict[str, float]:
    positives = [i for i, c in enumerate(cases) if c["expected"]]
    order = np.argsort(-scores, axis=1, kind="stable")
    top1 = np.mean(
        [names[order[i, 0]] in {cases[i]["expected"], *(cases[i].get("acceptable") or [])} for i in positives]
    )
    recall3 = np.mean([cases[i]["expected"] in {names[j] for j in order[i, :3]} for i in positives])
    return {"top1": round(float(top1), 4), "recall_at_3": round(float(recall3), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skills", type=Path, action="append", required=True)
    parser.add_argument("--cases", type=Path, required=True)
    args = parser.parse_args()
    registry = Registry(tuple(args.skills))
    registry.reload()
    embedder = load_embedder(None, None, None, threads=2)
    index = Index(registry.skills(), embedder)
    names = list(index.names)
    cases = [json.loads(line) for line in args.cases.read_text().splitlines() if line.strip()]
    queries = embedder.embed([c["task"] for c in cases])

    texts, owners = [], []
    for i, name in enumerate(names):
        for chunk in chunks(index.skills[name].body):
            texts.append(f"{humanise(name)}: {chunk}")
            owners.append(i)
    start = time.perf_counter()
    chunk_vectors = embedder.embed(texts)
    embed_seconds = time.perf_counter() - start

    scoring, _ = calibrate(index, embedder.embed(list(background_tasks())), embedder.embed, Procedure())
    fused, chunk_scores = [], []
    for case, q in zip(cases, queries, strict=True):
        fused.append(scoring.fuse(index.score(q, terms(case["task"]))))
        per_chunk = chunk_vectors @ q
        best = np.full(len(names), -1.0)
        np.maximum.at(best, np.asarray(owners), per_chunk)
        chunk_scores.append(best)
    fused_m, chunk_m = np.asarray(fused), np.asarray(chunk_scores)
    report = {
        "skills": len(names),
        "chunks": len(texts),
        "chunk_embed_seconds": round(embed_seconds, 1),
        "shipped_fusion": metrics(fused_m, names, cases),
        "chunks_alone": metrics(chunk_m, names, cases),
        "fusion_plus_chunks": {
            str(w): metrics(fused_m + w * chunk_m, names, cases) for w in (0.05, 0.1, 0.2, 0.3)
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
