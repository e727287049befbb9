"""The regression-replay benchmark's report: one row per edit, and per class the share of edits
BLOCKed, WARNed and PASSed with 95% intervals, how many were decided as labelled, the headline
rates, how many edits L0 alone flagged as losing a commitment of the golden (`l0_flagged`), and
cost per verdict. `comparative-quantifier` edits carry their expected verdict each (BLOCK where a
blessed run exercises the instruction, WARN where none does); `action-recipient` ones are WARN.
World edits (`world-drift`; `world-unlisted`: the moved value is in no listed world fact, found
by provenance alone; `world-rule-line`: the moved value stands in a rule line of the golden's
answer) carry their expected verdict and drift ruling, and are also replayed on the live revision
alone, as `ingot replay` does: `false_incidents` counts those that BLOCK (an incident for a skill
nobody changed; the goal is 0).

Pure: rows in, JSON out. Each rate counts distinct edits (n is the class's edit count); an edit
whose replay could not be measured is counted apart, never as a pass. Intervals, both scipy's:
a percentile bootstrap over the class's edits (`scipy.stats.bootstrap`, BOOTSTRAP_DRAWS
resamples, fixed seed) as asked, which collapses to a point when the edits all agree; beside it
the Wilson score interval (`binomtest(...).proportion_ci(method="wilson")`), which does not.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.stats import binomtest
from scipy.stats import bootstrap as scipy_bootstrap

CLASSES = (
    "regressing",
    "unexercised",
    "cosmetic",
    "improving",
    "world-drift",
    "world-unlisted",
    "world-rule-line",
    "action-recipient",
    "comparative-quantifier",
)
VERDICTS = ("BLOCK", "WARN", "PASS")
TIERS = ("L0", "L1", "L2", "L3")
BOOTSTRAP_DRAWS = 10_000
SEED = 20261201


def expected_verdict(cls: str, expect: Mapping[str, Any]) -> str:
    """What a working replay decides for an edit of class `cls` (drift edits say it themselves)."""
    if "verdict" in expect:
        return str(expect["verdict"])
    return {"regressing": "BLOCK", "unexercised": "WARN", "action-recipient": "WARN"}.get(cls, "PASS")


def row(edit: Any, cell: Mapping[str, Any], live: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One edit's line of the report, from its replay cell (and, for a world edit, the live
    revision's own replay cell in the same world)."""
    expected = expected_verdict(edit.cls, edit.expect)
    base = {
        "id": edit.id,
        "skill": edit.skill,
        "class": edit.cls,
        "kind": edit.kind,
        "expected": expected,
        "expected_drift": edit.expect.get("drift"),
    }
    if live is not None:  # its cost is in the ledger too, apart from the change's verdict cost
        measured = live.get("status") == "measured"
        base["live_verdict"] = live.get("verdict") if measured else None
        base["live_usd"] = (live.get("cost") or {}).get("usd") if measured else None
    if cell.get("status") != "measured":
        return {**base, "verdict": None, "why": cell.get("why")}
    drift = [d["ruling"] for d in cell.get("drift") or ()]
    covered = cell.get("coverage") or {}
    instructions = covered.get("instructions") or ()
    cost, counter = cell["cost"], cell["counterfactual"]
    tiers = [g["tier"] for g in cell.get("goldens") or () if g.get("tier") in TIERS]
    return {
        **base,
        "verdict": cell["verdict"],
        "as_expected": cell["verdict"] == expected
        and (not edit.expect.get("drift") or _drift_as_labelled(drift, edit.expect["drift"])),
        "tier": max(tiers, key=TIERS.index) if tiers else None,
        "l0_lost_commitments": any(
            d.get("tier") == "L0" and d.get("verdict") == "fail"
            for g in cell.get("goldens") or ()
            for d in g.get("decisions") or ()
        ),
        "drift": drift,
        "unexercised": [i["label"] for i in instructions if i["status"] == "not exercised"],
        "coverage": dict(Counter(i["status"] for i in instructions)),
        "coverage_by_model": sum(1 for i in instructions if i.get("model")),
        "usd": cost.get("usd"),
        "judging_usd": counter.get("judging_usd"),
        "all_strongest_usd": counter.get("all_strongest_usd"),
        "calls": cost.get("calls"),
        "noise_floor": (cell.get("noise_floor") or {}).get("pass_rate"),
        "reasons": cell.get("reasons"),
    }


def bootstrap(hits: Sequence[bool], draws: int = BOOTSTRAP_DRAWS, seed: int = SEED) -> list[float] | None:
    """95% percentile bootstrap interval of the share of `hits` (resampling the items); None for
    no items. Items all alike resample to that one share every time, so the interval is that point
    (scipy refuses such a degenerate sample; the Wilson interval beside it does not collapse)."""
    if not hits:
        return None
    if len(set(hits)) == 1:
        share = float(bool(hits[0]))
        return [share, share]
    result = scipy_bootstrap(
        (np.asarray(hits, dtype=float),),
        np.mean,
        n_resamples=draws,
        confidence_level=0.95,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    interval = result.confidence_interval
    return [round(float(interval.low), 4), round(float(interval.high), 4)]


def wilson(hits: int, n: int) -> list[float] | None:
    """95% Wilson score interval of hits / n; None for no trials."""
    if not n:
        return None
    interval = binomtest(hits, n).proportion_ci(confidence_level=0.95, method="wilson")
    return [round(max(0.0, float(interval.low)), 4), round(min(1.0, float(interval.high)), 4)]


def share(rows: Sequence[Mapping[str, Any]], verdict: str) -> dict[str, Any]:
    hits = [r.get("verdict") == verdict for r in rows]
    n = len(rows)
    return {
        "count": sum(hits),
        "n": n,
        "rate": round(sum(hits) / n, 4) if n else None,
        "ci95_bootstrap": bootstrap(hits),
        "ci95_wilson": wilson(sum(hits), n),
    }


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per class and headline rates (see the module docstring), tiers, drift, cost per verdict."""
    by_class: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_class[r["class"]].append(r)
    per_class = {}
    for cls in CLASSES:
        mine = by_class[cls]
        usd = [r["usd"] for r in mine if r.get("usd") is not None]
        per_class[cls] = {
            "n": len(mine),
            **{verdict: share(mine, verdict) for verdict in VERDICTS},
            "not_measured": sum(r.get("verdict") is None for r in mine),
            "as_expected": sum(bool(r.get("as_expected")) for r in mine),
            "l0_flagged": sum(bool(r.get("l0_lost_commitments")) for r in mine),
            "tiers": dict(Counter(r.get("tier") for r in mine)),
            "cost_per_verdict_usd": round(statistics.fmean(usd), 6)
            if usd and len(usd) == len(mine)
            else None,
        }
    drifted = [r for c in CLASSES if c.startswith("world-") for r in by_class[c]]
    live = [r for r in drifted if "live_verdict" in r]
    usd = [r["usd"] for r in rows if r.get("usd") is not None]
    judging = [r["judging_usd"] for r in rows if r.get("judging_usd") is not None]
    strongest = [r["all_strongest_usd"] for r in rows if r.get("all_strongest_usd") is not None]
    complete = len(judging) == len(strongest) == len(rows)
    return {
        "headline": {
            "exercised regressions BLOCKed": per_class["regressing"]["BLOCK"],
            "unexercised changes WARNed": per_class["unexercised"]["WARN"],
            "unexercised changes PASSed": per_class["unexercised"]["PASS"]["count"],
            "unexercised action / recipient changes WARNed": per_class["action-recipient"]["WARN"],
            "comparatives and quantifiers as labelled": _as_labelled(per_class["comparative-quantifier"]),
            "false blocks": {  # BLOCKed where the label expected no BLOCK
                c: sum(r.get("verdict") == "BLOCK" and r["expected"] != "BLOCK" for r in by_class[c])
                for c in ("cosmetic", "world-drift", "world-unlisted", "world-rule-line", "improving")
            },
            "false incidents from `ingot replay` on world moves": {
                "count": sum(r.get("live_verdict") == "BLOCK" for r in live),
                "n": len(live),
                "not_measured": sum(r.get("live_verdict") is None for r in live),
                "live_verdicts": dict(Counter(str(r.get("live_verdict")) for r in live)),
            },
            "world moves outside the listed facts as labelled": _as_labelled(per_class["world-unlisted"]),
            "rule lines mentioning a moved value as labelled": _as_labelled(per_class["world-rule-line"]),
        },
        "per_class": per_class,
        "missed": [r["id"] for r in by_class["regressing"] if r.get("verdict") != "BLOCK"],
        "drift_recognised": f"{sum(_recognised(r) for r in drifted)} of {len(drifted)}",
        "as_expected": f"{sum(bool(r.get('as_expected')) for r in rows)} of {len(rows)}",
        "cost_per_verdict_usd": round(statistics.fmean(usd), 6) if usd and len(usd) == len(rows) else None,
        "judging_usd": round(sum(judging), 6) if complete else None,
        "all_strongest_judging_usd": round(sum(strongest), 6) if complete else None,
        "noise_floor_pass_rate": _noise(rows),
    }


def _as_labelled(cls: Mapping[str, Any]) -> str:
    return f"{cls['as_expected']} of {cls['n']}"


def _recognised(row: Mapping[str, Any]) -> bool:
    return _drift_as_labelled(row.get("drift"), row.get("expected_drift"))


def _drift_as_labelled(drift: Sequence[str] | None, expected: str | None) -> bool:
    """The edit's drift cards (at least one) all carry the ruling its label expects."""
    return bool(drift) and all(ruling == expected for ruling in drift or ())


def _noise(rows: Sequence[Mapping[str, Any]]) -> float | None:
    rates = [r["noise_floor"] for r in rows if r.get("noise_floor") is not None]
    return round(statistics.fmean(rates), 4) if rates else None
