"""What the replay cell records from finished replays: each golden's entry, the noise floor,
per-tier tokens and cost, and the all-strongest counterfactual, as the bundle's JSON.

Reads the per-golden work regress.py measured (`GoldenWork`) and makes no model call. A cost
of a call whose price is unknown makes its bucket's `usd` None, never a partial sum; each
entry carries what replay_verdict.py needs to recompute the golden's verdict from the bundle.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.run import HARNESS
from optimize.measure.cascade import JudgeTiers, prompt_values
from optimize.measure.goldens import Golden, Stored
from optimize.measure.level0 import Expected, Judgement, sequence_diff
from optimize.measure.provenance import Supplied
from optimize.measure.replay import ReplayRun
from optimize.measure.replay_verdict import golden_verdict, is_stale, world_moved
from optimize.models.llm import LLMClient
from optimize.models.prompting import render


def not_measured(why: str) -> dict[str, Any]:
    return {"status": "not_measured", "why": why}


@dataclass
class GoldenWork:
    """One golden's replays and findings while the cell is measured."""

    stored: Stored
    recorded: Mapping[str, bytes]
    candidate: ReplayRun | None = None
    controls: list[ReplayRun] = field(default_factory=list)
    control_judgements: list[Judgement] = field(default_factory=list)
    controls_cached: bool = False
    cache_key: str | None = None
    judgement: Judgement | None = None
    drift: list = field(default_factory=list)
    supplied: tuple[Supplied, ...] = ()  # the answer's values tool calls supplied (provenance.py)
    moved_calls: list = field(default_factory=list)  # recorded calls the replays got another answer for
    serving_model: str | None = None
    # The live revision alone, its world moved and its replay regressed: replayed once more with
    # every call answered as recorded, and that replay's judgement (regress.py).
    frozen_run: ReplayRun | None = None
    frozen: Judgement | None = None


def expected(work: GoldenWork) -> Expected:
    now = {card.fact: card.new for card in work.drift if card.new is not None}
    return Expected(work.stored.golden, work.stored.review, now, work.supplied)


def rebless(golden: Golden) -> str:
    """How to re-bless a golden the world moved under: record the task again in today's world,
    bless that run, retire this one."""
    again = (
        f"`ingot agent {shlex.quote(golden.task)}`"
        if golden.harness == HARNESS
        else f"run {golden.task!r} again through {golden.harness or 'its harness'} (the proxy records it)"
    )
    return (
        f"{again}, then `ingot bless TRACE_ID` (the new run's id, from `ingot traces {golden.skill}`) and "
        f"`ingot goldens retire {golden.id} --reason 'the world moved; re-blessed'`"
    )


def golden_entry(work: GoldenWork, alone: bool = False) -> dict[str, Any]:
    """One golden's findings, with what replay_verdict.py needs to recompute its verdict.
    `alone`: the live revision replayed with no unchanged champion beside it (`ingot replay`)."""
    golden, review, run, judgement = work.stored.golden, work.stored.review, work.candidate, work.judgement
    assert run is not None and judgement is not None
    entry: dict[str, Any] = {
        "id": golden.id,
        "digest": golden.digest,
        "review_digest": review.digest,
        "criteria_status": review.status,
        "criteria": [c.__dict__ for c in review.criteria],
        "recorded_revision": golden.revision,
        "recorded_model": golden.model,
        "harness": golden.harness,
        "task": golden.task[:300],
        "verdict_found": judgement.verdict,
        "tier": judgement.tier,
        "evidence": judgement.evidence,
        "signature": sorted(judgement.signature),
        "cited": judgement.cited,
        "note": judgement.note,
        "decisions": [d.to_json() for d in judgement.decisions],
        "partial": run.partial,
        "stopped": run.stopped,
        "placements": list(run.placements),
        "answer": (run.answer or "")[:2000],
        "steps": [
            {"index": s.index, "name": s.name, "source": s.source, "matched": s.matched} for s in run.steps
        ],
        "tool_calls": sequence_diff(golden, run),
        "serving": {"calls": len(run.calls), "tokens": run.tokens, "usd": run.cost_usd},
        "drift": [card.to_json() for card in work.drift],
        "moved_calls": list(work.moved_calls),
        "controls": [
            {
                "verdict": j.verdict,
                "tier": j.tier,
                "signature": sorted(j.signature),
                "answer_same": r.answer == run.answer,
                "decisions": [d.to_json() for d in j.decisions if d.model],
            }
            for r, j in zip(work.controls, work.control_judgements, strict=True)
        ],
        "controls_from_cache": work.controls_cached,
        "serving_model": work.serving_model,
    }
    if work.frozen is not None and work.frozen_run is not None:
        frozen, frozen_run = work.frozen, work.frozen_run
        entry["recorded_world"] = {  # replayed with every call answered as recorded
            "verdict_found": frozen.verdict,
            "evidence": frozen.evidence,
            "tier": frozen.tier,
            "note": frozen.note,
            "partial": frozen_run.partial,
            "answer": (frozen_run.answer or "")[:2000],
            "usd": _sum(
                [
                    frozen_run.cost_usd,
                    *(d.cost_usd for d in frozen.decisions if d.model and not d.from_cassette),
                ]
            ),
        }
    entry["verdict"], entry["why"] = golden_verdict(entry, alone)
    if world_moved(entry):
        entry["rebless"] = rebless(golden)
    moved = any(card.ruling == "world moved" for card in work.drift)
    entry["ruling"] = (
        "stale"
        if is_stale(entry, alone)
        else {"BLOCK": "regressed", "WARN": "held"}.get(
            entry["verdict"], "world moved" if moved else "passes"
        )
    )
    judging = [d.cost_usd for d in judgement.decisions if d.model and not d.from_cassette]
    entry["usd"] = _sum(
        [run.cost_usd, *judging, *([entry["recorded_world"]["usd"]] if "recorded_world" in entry else [])]
    )
    return entry


def _sum(values: Sequence[float | None]) -> float | None:
    return None if any(v is None for v in values) else round(sum(values), 8)  # type: ignore[arg-type]


def noise_floor(works: list[GoldenWork], champion: str | None, controls: int) -> dict[str, Any]:
    if champion is None:
        return not_measured("no unchanged champion to control against (the live revision is replayed alone)")
    if not controls:
        return not_measured("REPLAY_CONTROLS is 0")
    judgements = [j for w in works for j in w.control_judgements]
    failed = sum(j.verdict != "pass" for j in judgements)
    return {
        "status": "measured",
        "champion_revision": champion,
        "controls": len(judgements),
        "failed": failed,
        "pass_rate": round((len(judgements) - failed) / len(judgements), 4) if judgements else None,
        "per_golden": {w.stored.id: [j.verdict for j in w.control_judgements] for w in works},
        "from_cache": [w.stored.id for w in works if w.controls_cached],
    }


def _bucket() -> dict[str, Any]:
    return {"calls": 0, "tokens_in": 0, "tokens_out": 0, "usd": 0.0, "unknown_cost_calls": 0}


def _add(bucket: dict[str, Any], tokens_in: int, tokens_out: int, cost: float | None) -> None:
    bucket["calls"] += 1
    bucket["tokens_in"] += tokens_in
    bucket["tokens_out"] += tokens_out
    if cost is None:
        bucket["unknown_cost_calls"] += 1
    else:
        bucket["usd"] += cost


def costs(
    works: list[GoldenWork], rationale: Mapping[str, Any], coverage: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Tokens and cost of what this measurement sent (cached controls and cassette replays sent
    nothing), the coverage ruling included. A bucket with a call of unknown cost has `usd` None,
    never a partial sum."""
    by_tier: dict[str, dict[str, Any]] = {}
    serving, controls = _bucket(), _bucket()
    fresh = [(w.candidate, w.judgement, serving) for w in works]
    fresh += [
        (r, j, controls)
        for w in works
        if not w.controls_cached
        for r, j in zip(w.controls, w.control_judgements, strict=True)
    ]
    for run, judgement, bucket in fresh:
        for call in run.calls if run else ():
            if not call.get("from_cassette"):
                _add(bucket, call["tokens_in"], call["tokens_out"], call.get("cost_usd"))
        for d in judgement.decisions if judgement else ():
            if d.model is not None and not d.from_cassette and d.verdict != "skipped":
                _add(by_tier.setdefault(d.tier, _bucket()), d.tokens_in, d.tokens_out, d.cost_usd)
    if rationale.get("model") and not rationale.get("from_cassette"):
        bucket = by_tier.setdefault("rationale", _bucket())
        _add(bucket, rationale["tokens_in"], rationale["tokens_out"], rationale.get("cost_usd"))
    if coverage and coverage.get("model") and "tokens_in" in coverage and not coverage.get("from_cassette"):
        bucket = by_tier.setdefault("coverage", _bucket())
        _add(bucket, coverage["tokens_in"], coverage["tokens_out"], coverage.get("cost_usd"))
    buckets = [serving, controls, *by_tier.values()]
    known = round(sum(b["usd"] for b in buckets), 8)
    unknown = any(b["unknown_cost_calls"] for b in buckets)
    for bucket in buckets:
        bucket["usd"] = None if bucket["unknown_cost_calls"] else round(bucket["usd"], 8)
    return {
        "serving": serving,
        "controls_serving": controls,
        "judging": by_tier,
        "calls": sum(b["calls"] for b in buckets),
        "tokens_in": sum(b["tokens_in"] for b in buckets),
        "tokens_out": sum(b["tokens_out"] for b in buckets),
        "usd": None if unknown else known,
        "usd_known_part": known,
    }


def counterfactual(
    llm: LLMClient, tiers: JudgeTiers, works: list[GoldenWork], rationale: Mapping[str, Any]
) -> dict[str, Any]:
    """What judging every replay run here with the strongest tier alone would have cost.

    Each replay costs one strongest-tier call: its prompt's size times the tokens per character
    measured on this cell's judge calls, and the mean output of its strongest-tier calls."""
    strongest = tiers.l3 or tiers.l2 or tiers.l1
    if strongest is None:
        return not_measured("no judge tier is configured")
    judged = [(w, w.candidate, w.judgement) for w in works]
    judged += [
        (w, r, j)
        for w in works
        if not w.controls_cached
        for r, j in zip(w.controls, w.control_judgements, strict=True)
    ]
    decisions = [d for _, _, j in judged for d in (j.decisions if j else ()) if d.model and d.prompt_chars]
    chars = sum(d.prompt_chars for d in decisions)
    per_char = sum(d.tokens_in for d in decisions) / chars if chars else 0.25
    top = [d for d in decisions if d.model == strongest] or decisions
    out = sum(d.tokens_out for d in top) / len(top) if top else 120.0
    tokens_in = 0
    for work, run, _ in judged:
        if run is None or run.answer is None:
            continue
        text = render("judge_replay_adjudicate", **prompt_values(expected(work), run))
        tokens_in += round(len(text) * per_char)
    replays = sum(1 for _, run, _ in judged if run is not None and run.answer is not None)
    ledger = llm.ledger
    cost = ledger.cost(strongest, tokens_in, round(out * replays)) if ledger else None
    if cost is not None and rationale.get("model"):
        cost += rationale.get("cost_usd") or 0.0
    actual = [d.cost_usd for d in decisions] + ([rationale.get("cost_usd")] if rationale.get("model") else [])
    judging = _sum(actual)
    return {
        "status": "measured" if cost is not None else "not_measured",
        "why": None if cost is not None else f"no price for {strongest} in PRICES_FILE",
        "strongest_model": strongest,
        "replays_judged": replays,
        "estimated_tokens_in": tokens_in,
        "estimated_tokens_out": round(out * replays),
        "tokens_per_char": round(per_char, 6),
        "all_strongest_usd": None if cost is None else round(cost, 8),
        "judging_usd": judging,
        "saving": round(1 - judging / cost, 4) if cost and judging is not None else None,
    }
