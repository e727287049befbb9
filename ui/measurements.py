"""An evidence bundle's measurement blocks, parsed once into the records the review card shows.

Every reader here takes untrusted JSON and returns a typed value or `None`: a value that was not
measured (absent, the wrong type, not finite) stays `None` and the page shows it as missing;
nothing here invents a zero or a default. A block counts only when its status is "measured".
Which blocks a card shows, and what change control says about them, is review_card.py's job.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optimize.control.gate import p_clause


@dataclass(frozen=True)
class Case:
    id: str
    task: str
    champion: float | None
    challenger: float | None
    champion_pass: bool | None
    challenger_pass: bool | None
    champion_tokens: int | None
    challenger_tokens: int | None
    divergence: int | None  # first line where the two answers differ
    divergence_champion: str = ""  # that line in each answer
    divergence_challenger: str = ""
    pairwise: str | None = None  # win / tie / loss for the challenger, asked in both orders

    @property
    def delta(self) -> float | None:
        if self.champion is None or self.challenger is None:
            return None
        return self.challenger - self.champion


@dataclass(frozen=True)
class Metric:
    name: str
    champion: float | None
    challenger: float | None
    n: int | None = None  # routing cases the metric was measured on


@dataclass(frozen=True)
class Moved:
    """Routing impact on one other skill: tasks it gains and loses with the change."""

    skill: str
    gained: tuple[str, ...]
    lost: tuple[str, ...]


@dataclass(frozen=True)
class Statistic:
    name: str
    n: int | None
    statistic: float | None
    p: str  # "p < 0.001", "p = 0.125", or "p undefined"
    note: str = ""  # why a test is undefined, or how it was computed


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool | None
    detail: str


@dataclass(frozen=True)
class Search:
    """How the optimizer found the candidate (train-set means; never holdout evidence)."""

    seed_mean: float | None
    winner_mean: float | None
    candidates: int | None
    research: str | None  # web research status: off / fetched / cached / failed
    asked_for: str | None = None  # the winning candidate's search angle: what it was asked to do


@dataclass(frozen=True)
class Leak:
    """A routing case left out of routing metrics: the candidate was written from it."""

    task: str
    how: str  # "seen" (its author was shown it) | "in the candidate" (its text is pasted in)


def as_float(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def recorded_mean(recorded: Any, scores: list[float | None]) -> float | None:
    """The recorded mean, else the mean of the per-case scores if every one was measured."""
    if as_float(recorded) is not None:
        return as_float(recorded)
    return sum(scores) / len(scores) if scores and all(s is not None for s in scores) else None  # type: ignore[misc]


def measured_block(blocks: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    block = blocks.get(name)
    return block if isinstance(block, Mapping) and block.get("status") == "measured" else {}


def side_value(block: Mapping[str, Any], side: str, metric: str) -> Any:
    values = block.get(side)
    return values.get(metric) if isinstance(values, Mapping) else None


def case_of(case: Mapping[str, Any]) -> Case:
    divergence = case.get("divergence")
    return Case(
        id=str(case.get("id", "?")),
        task=str(case.get("task", "")),
        champion=as_float(case.get("champion")),
        challenger=as_float(case.get("challenger")),
        champion_pass=as_bool(case.get("champion_pass")),
        challenger_pass=as_bool(case.get("challenger_pass")),
        champion_tokens=as_int(case.get("champion_tokens")),
        challenger_tokens=as_int(case.get("challenger_tokens")),
        divergence=as_int(divergence.get("line")) if isinstance(divergence, Mapping) else None,
        divergence_champion=str(divergence.get("champion", "")) if isinstance(divergence, Mapping) else "",
        divergence_challenger=str(divergence.get("challenger", ""))
        if isinstance(divergence, Mapping)
        else "",
        pairwise=case.get("pairwise") if case.get("pairwise") in ("win", "tie", "loss") else None,
    )


def checks_of(block: Mapping[str, Any]) -> tuple[Check, ...]:
    results = block.get("results")
    if not isinstance(results, Mapping):
        return ()
    return tuple(
        Check(str(name), as_bool(r.get("passed")), str(r.get("detail", "")))
        for name, r in results.items()
        if isinstance(r, Mapping)
    )


def search_of(block: Mapping[str, Any]) -> Search | None:
    if not block:
        return None
    research = block.get("research")
    status = research.get("status") if isinstance(research, Mapping) else None
    asked = block.get("asked_for")
    return Search(
        as_float(block.get("seed_train_mean")),
        as_float(block.get("winner_train_mean")),
        as_int(block.get("candidates")),
        status if isinstance(status, str) else None,
        asked.split(":")[0] if isinstance(asked, str) else None,
    )


def leaks_of(block: Any) -> tuple[Leak, ...]:
    if not isinstance(block, Mapping):
        return ()
    return tuple(
        Leak(str(c.get("task", "")), str(c.get("how", "")))
        for c in as_list(block.get("cases"))
        if isinstance(c, Mapping)
    )


def pairwise_of(block: Any) -> tuple[int, int, int] | None:
    if not isinstance(block, Mapping) or block.get("status") != "measured":
        return None
    counts = tuple(as_int(block.get(k)) for k in ("wins", "ties", "losses"))
    return counts if all(c is not None for c in counts) else None  # type: ignore[return-value]


def statistic_of(block: Any) -> Statistic:
    block = block if isinstance(block, Mapping) else {}
    return Statistic(
        str(block.get("test", "?")),
        as_int(block.get("n")),
        as_float(block.get("statistic")),
        p_clause(as_float(block.get("p"))),
        str(block.get("note") or ""),
    )


def provenance_of(block: Any) -> tuple[str, ...]:
    if not isinstance(block, Mapping):
        return ()
    lines = [
        f"{role}: {m.get('model')} at {m.get('endpoint')}"
        for role, m in (block.get("models") or {}).items()
        if isinstance(m, Mapping)
    ]
    task_set = block.get("task_set")
    if isinstance(task_set, Mapping) and task_set.get("origin"):
        lines.append(f"task set: {task_set.get('origin')}, sha256 {str(task_set.get('sha256'))[:12]}")
    return tuple(lines)


def sampling_of(block: Any) -> str | None:
    if not isinstance(block, Mapping) or as_int(block.get("holdout_items")) is None:
        return None
    return f"{block['holdout_items']} holdout items, {block.get('distinct')} distinct"
