"""The shipped procedure at every threshold τ on a fine grid: the tuner's J per library, and
top-1 / strict no-route in each variant; prints JSON.

    python scripts/tau_profile.py \\
        --library corpus=../shared/corpus/skills:../shared/corpus/dev_cases.jsonl \\
        --library tools=../shared/corpus-tools/skills:../shared/corpus-tools/cases.jsonl

`scripts/tune_procedure.py` picks τ on a 0.025 grid. This shows how flat J is between its steps
(docs/routing-measurements.md, "Limits on the dev libraries"), so a finer τ is not read as a gain when it
only moves a handful of one library's cases. Same libraries, anchors and decisions as the tuner.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.calibration import Procedure  # noqa: E402
from mcp_server.embedding import load_embedder  # noqa: E402
from scripts import tune_procedure as tuner  # noqa: E402


def profile(libraries: list[tuner.Library], procedure: Procedure, taus: tuple[float, ...]) -> list[dict]:
    """One row per τ: J per library (and their mean), and [top-1, no-route] per library and variant."""
    table = {
        lib.name: {v: tuner.evaluate(lib, procedure, v, taus) for v in tuner.VARIANTS} for lib in libraries
    }
    rows = []
    for tau in taus:
        j = {n: float(np.mean([tuner.objective(table[n][v][tau]) for v in tuner.VARIANTS])) for n in table}
        mean = round(float(np.mean(list(j.values()))), 4)
        rows.append(
            {
                "tau": tau,
                "J": {**{n: round(x, 4) for n, x in j.items()}, "mean": mean},
                "top1_no_route": {
                    n: {v: [round(table[n][v][tau]["top1"], 4), round(table[n][v][tau]["no_route"], 4)]
                        for v in tuner.VARIANTS}
                    for n in table
                },
            }
        )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", action="append", required=True, help="NAME=SKILLS_DIR:CASES_FILE")
    parser.add_argument("--low", type=float, default=0.30)
    parser.add_argument("--high", type=float, default=0.40)
    parser.add_argument("--step", type=float, default=0.005)
    args = parser.parse_args()
    taus = tuple(round(float(t), 4) for t in np.arange(args.low, args.high + args.step / 2, args.step))
    cache = Path(tempfile.gettempdir()) / "ingot-bench" / "cache" / "vectors.sqlite"  # the benches' cache
    embedder = load_embedder(None, None, cache, threads=2)
    procedure = Procedure()
    libraries = [
        tuner.load_library(name, [skills], [cases], embedder, procedure)
        for name, skills, cases in map(tuner._parse, args.library)
    ]
    print(
        json.dumps({"procedure_tau": procedure.tau_related, "profile": profile(libraries, procedure, taus)})
    )


if __name__ == "__main__":
    main()
