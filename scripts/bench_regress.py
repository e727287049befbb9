"""`ingot bench regress` against the scripted models: the labelled edit benchmark's mechanics.

Starts the scripted OpenAI-compatible server from tests/ with the regression-replay stand-ins
(tests/regress_sim.py: an agent that follows the skill in its prompt, three judge tiers and a
coverage judge that read only their prompts) and prices them like a cheap serving model and a
cheap / mid / strong judge, then runs ingot/bench/regress.py over every labelled edit.
Deterministic: every number here is a function of the code, not of a model. What it measures is
the mechanics (scripted models: mechanics), not a model's detection. Prints JSON.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ingot.bench.regress import run as run_bench  # noqa: E402
from optimize.measure.cascade import JudgeTiers  # noqa: E402
from optimize.models.ledger import Price, UsageLedger  # noqa: E402
from tests.regress_sim import TIERS, install  # noqa: E402
from tests.scripted_llm import scripted_llm  # noqa: E402

# USD per million tokens (input, output): a cheap serving model and a cheap / mid / strong judge.
PRICES = {
    "agent-model": Price(0.15, 0.60),
    TIERS["L1"]: Price(0.10, 0.40),
    TIERS["L2"]: Price(1.00, 4.00),
    TIERS["L3"]: Price(3.00, 15.00),
}


def run(work: Path | None = None) -> dict:
    work = work or Path(tempfile.mkdtemp(prefix="ingot-bench-regress-"))
    with scripted_llm() as server:
        install(server)
        ledger = UsageLedger("bench-regress", PRICES)
        llm = server.client("agent", "judge", ledger=ledger)
        report = run_bench(llm, JudgeTiers(TIERS["L1"], TIERS["L2"], TIERS["L3"]), work)
    return {
        "measures": "scripted models: mechanics (tests/regress_sim.py), not a model's detection",
        "prices_usd_per_million": {m: [p.input_per_million, p.output_per_million] for m, p in PRICES.items()},
        **report,
        "ledger": ledger.totals()["total"],
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
