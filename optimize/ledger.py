"""The usage ledger: tokens per role and per run, cost from a price table, and the run's cap.

A model missing from the price table has cost "unknown", never zero, and makes the run's total
unknown too (the known part is still reported). Once the estimated total passes `max_run_usd`,
the next call is refused with `BudgetExceeded` carrying the totals, so a run stops cleanly.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ingot.errors import ConfigError, IngotError


class BudgetExceeded(IngotError):
    """The run's estimated cost passed MAX_RUN_USD; nothing more is sent."""


@dataclass(frozen=True)
class Price:
    input_per_million: float
    output_per_million: float


def load_prices(path: Path | None) -> dict[str, Price]:
    if path is None:
        return {}
    try:
        raw = json.loads(path.read_text())
        return {model: Price(float(p["input"]), float(p["output"])) for model, p in raw.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"PRICES_FILE {path} is not a JSON table of "
            '{"model": {"input": usd_per_million, "output": usd_per_million}}: ' + str(exc)
        ) from exc


@dataclass
class Usage:
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    usd: float = 0.0
    unknown_cost_calls: int = 0

    def as_json(self) -> dict[str, object]:
        return {
            "calls": self.calls,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "usd": round(self.usd, 6) if self.unknown_cost_calls == 0 else None,
            "usd_known_part": round(self.usd, 6),
            "unknown_cost_calls": self.unknown_cost_calls,
        }


@dataclass
class UsageLedger:
    """Counts one run's usage; thread-safe."""

    run_id: str
    prices: Mapping[str, Price] = field(default_factory=dict)
    max_run_usd: float | None = None
    by_role: dict[str, Usage] = field(default_factory=dict)
    total: Usage = field(default_factory=Usage)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def check(self) -> None:
        """Refuse to start another call once the cap is passed."""
        if self.max_run_usd is not None and self.total.usd > self.max_run_usd:
            raise BudgetExceeded(
                f"run {self.run_id} stopped: estimated ${self.total.usd:.4f} passed "
                f"MAX_RUN_USD ${self.max_run_usd:.4f}; totals {self.totals()}"
            )

    def record(self, role: str, model: str, tokens_in: int, tokens_out: int) -> float | None:
        """Add one call; returns its cost, or None when the model's price is unknown."""
        price = self.prices.get(model)
        cost = (
            None
            if price is None
            else (tokens_in * price.input_per_million + tokens_out * price.output_per_million) / 1e6
        )
        with self._lock:
            for usage in (self.by_role.setdefault(role, Usage()), self.total):
                usage.calls += 1
                usage.tokens_in += tokens_in
                usage.tokens_out += tokens_out
                if cost is None:
                    usage.unknown_cost_calls += 1
                else:
                    usage.usd += cost
        return cost

    def totals(self) -> dict[str, object]:
        with self._lock:
            return {
                "run_id": self.run_id,
                "total": self.total.as_json(),
                "by_role": {role: u.as_json() for role, u in sorted(self.by_role.items())},
            }
