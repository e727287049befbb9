"""What adding skills from another library does to a library's correct routes. Prints JSON lines.

    python scripts/bench_distractors.py --skills ../shared/corpus/skills \\
        --cases ../shared/corpus/dev_cases.jsonl --distractors ../shared/corpus-tools/skills --add 100

The library is routed alone, then with `--add` skills copied in from `--distractors` (a different
random sample per seed; real folders, since Ingot does not serve linked ones). For every seed it
reports top-1 and strict no-route on the cases alone and with the distractors, how many correct
routes became `novel` and how many went to a wrong skill, and both calibrations' anchors and BM25
scale: adding skills moves the anchors (docs/routing-measurements.md, "Distractors").
A null case routed to a distractor counts as routed: the distractor may well serve it.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingot.bench.routing import Case, load_cases, route_in_process  # noqa: E402
from mcp_server.embedding import load_embedder  # noqa: E402
from mcp_server.library import Library  # noqa: E402


def _route(roots: list[Path], cases: list[Case], embedder) -> tuple[list[str | None], dict]:
    library = Library(tuple(roots), embedder)
    library.reload()
    loaded = [decision.loaded for decision in route_in_process(library, cases)]
    derived = library.calibration()
    assert derived is not None
    anchors = {
        "skills": library.status().skills,
        "background_anchor": round(derived.background_anchor, 4),
        "own_anchor": round(derived.own_anchor, 4),
        "bm25_scale_description": round(derived.bm25_scale_description, 3),
    }
    return loaded, anchors


def measure(skills: Path, cases: list[Case], distractors: Path, add: int, seeds: list[int], embedder):
    alone, alone_anchors = _route([skills], cases, embedder)
    positives = [i for i, c in enumerate(cases) if c.expected]
    nulls = [i for i, c in enumerate(cases) if not c.expected]
    right = [alone[i] in cases[i].right for i in range(len(cases))]
    pool = sorted(p.name for p in distractors.iterdir() if (p / "SKILL.md").is_file())
    own = {p.name for p in skills.iterdir()}
    pool = [name for name in pool if name not in own]
    for seed in seeds:
        with tempfile.TemporaryDirectory(prefix="ingot-distractors-") as tmp:
            extra = Path(tmp) / "skills"
            extra.mkdir()
            for name in random.Random(seed).sample(pool, min(add, len(pool))):
                shutil.copytree(distractors / name, extra / name)
            mixed, mixed_anchors = _route([skills, extra], cases, embedder)
        yield {
            "seed": seed,
            "added": min(add, len(pool)),
            "top1_alone": round(sum(right[i] for i in positives) / len(positives), 4),
            "top1_with": round(sum(mixed[i] in cases[i].right for i in positives) / len(positives), 4),
            "right_to_novel": sum(1 for i in positives if right[i] and mixed[i] is None),
            "right_to_wrong": sum(
                1 for i in positives if right[i] and mixed[i] is not None and mixed[i] not in cases[i].right
            ),
            "novel_to_right": sum(1 for i in positives if alone[i] is None and mixed[i] in cases[i].right),
            "no_route_alone": round(sum(alone[i] is None for i in nulls) / len(nulls), 4) if nulls else None,
            "no_route_with": round(sum(mixed[i] is None for i in nulls) / len(nulls), 4) if nulls else None,
            "alone": alone_anchors,
            "with": mixed_anchors,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skills", type=Path, required=True)
    parser.add_argument("--cases", type=Path, required=True)
    parser.add_argument("--distractors", type=Path, required=True, help="a skills folder to sample from")
    parser.add_argument("--add", type=int, default=100)
    parser.add_argument("--seeds", default="1,2,3")
    args = parser.parse_args()
    cache = Path(tempfile.gettempdir()) / "ingot-bench" / "cache" / "vectors.sqlite"  # the benches' cache
    embedder = load_embedder(None, None, cache, threads=2)
    cases = load_cases(args.cases)
    seeds = [int(s) for s in args.seeds.split(",")]
    for row in measure(args.skills, cases, args.distractors, args.add, seeds, embedder):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
