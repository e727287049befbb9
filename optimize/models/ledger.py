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
    _in_flight: int = field(default=0, repr=False)
    _max_call_usd: float = field(default=0.0, repr=False)

    def reserve(self, model: str) -> None:
        """Admit one more call, or refuse it: over the cap, or a cap that cannot be enforced.

        Calls in flight count at the most expensive call seen so far, so concurrent callers
        cannot all slip under the cap at once (before the first call has cost anything, at most
        the concurrency limit can be in flight)."""
        with self._lock:
            if self.max_run_usd is not None:
                if model not in self.prices:
                    raise BudgetExceeded(
                        f"MAX_RUN_USD is set but {model!r} has no price in PRICES_FILE: a "
                        "cap cannot be enforced on an unknown cost. Add its price"
                    )
                if self.total.unknown_cost_calls:
                    raise BudgetExceeded(
                        f"run {self.run_id}: a call's usage was not reported, so the cap "
                        f"can no longer be enforced; totals {self._totals()}"
                    )
                projected = self.total.usd + (self._in_flight + 1) * self._max_call_usd
                if self.total.usd > self.max_run_usd or projected > self.max_run_usd:
                    raise BudgetExceeded(
                        f"run {self.run_id} stopped: estimated ${self.total.usd:.4f} "
                        f"(+{self._in_flight} in flight) would pass MAX_RUN_USD "
                        f"${self.max_run_usd:.4f}; totals {self._totals()}"
                    )
            self._in_flight += 1

    def release(self) -> None:
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)

    def cost(self, model: str, tokens_in: int | None, tokens_out: int | None) -> float | None:
        """What a call with this usage costs, or None when the price or the usage is unknown."""
        price = self.prices.get(model)
        if price is None or tokens_in is None or tokens_out is None:
            return None
        return (tokens_in * price.input_per_million + tokens_out * price.output_per_million) / 1e6

    def record(self, role: str, model: str, tokens_in: int | None, tokens_out: int | None) -> float | None:
        """Add one call; returns its cost, or None when the price or the usage is unknown."""
        cost = self.cost(model, tokens_in, tokens_out)
        tokens_in, tokens_out = tokens_in or 0, tokens_out or 0
        with self._lock:
            for usage in (self.by_role.setdefault(role, Usage()), self.total):
                usage.calls += 1
                usage.tokens_in += tokens_in
                usage.tokens_out += tokens_out
                if cost is None:
                    usage.unknown_cost_calls += 1
                else:
                    usage.usd += cost
            self._max_call_usd = max(self._max_call_usd, cost or 0.0)
        return cost

    def totals(self) -> dict[str, object]:
        with self._lock:
            return self._totals()

    def save(self, folder: Path) -> Path:
        """Write the totals to `<folder>/<run_id>.json` (atomically; also for a failed run, so
        what it paid for is on record). Returns the path."""
        from ingot.fsutil import write_atomic

        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.run_id}.json"
        write_atomic(path, json.dumps(self.totals(), indent=1, sort_keys=True).encode())
        return path

    def _totals(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "total": self.total.as_json(),
            "by_role": {role: u.as_json() for role, u in sorted(self.by_role.items())},
        }
