"""The replay evidence cell: every active golden of a skill replayed with a candidate, judged.

`replay_cell` is the one entry point (`ingot optimize`, `ingot evaluate`, `ingot replay` call
it). Per golden: the candidate's replay (replay.py); controls, the unchanged champion replayed
the same way (REPLAY_CONTROLS per golden, cached by champion revision, golden, criteria,
serving model, tiers and world, like the A/B champion); drift cards for world facts that read
differently now (drift.py); the cascade's judgement of every replay (cascade.py); and the
golden's verdict (replay_verdict.py), where a difference the controls also show is never
blamed on the candidate. The cell holds the PASS / WARN / BLOCK verdict with a paragraph of
rationale by the strongest tier used, the noise floor, per-tier tokens and cost (which add up
to the ledger's), the all-strongest counterfactual, and every input needed to recompute it.
It measures; whether a change may be approved is gate.py's call.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rfc8785

from agent.workspace import revision_of
from optimize.measure.cascade import (
    SIDE_EFFECT_TOOLS,
    Cascade,
    Expected,
    Judgement,
    JudgeTiers,
    prompt_values,
    sequence_diff,
)
from optimize.measure.drift import ResearchCheck, World, WorldSource, drift_cards
from optimize.measure.golden_store import GoldenStore
from optimize.measure.goldens import GoldenError, Stored
from optimize.measure.replay import Replayer, ReplayLimits, ReplayRun
from optimize.measure.replay_verdict import cell_verdict, golden_verdict
from optimize.measure.sandbox import Sandbox
from optimize.models.ledger import BudgetExceeded
from optimize.models.llm import LLMClient
from optimize.models.prompting import render

CACHE_VERSION = 1
TIER_RANK = {"L1": 1, "L2": 2, "L3": 3}


@dataclass(frozen=True)
class ReplaySettings:
    """REPLAY_CONTROLS, REPLAY_CONCURRENCY, the per-replay bounds and the side-effecting tools."""

    controls: int = 2
    concurrency: int = 4
    limits: ReplayLimits = field(default_factory=ReplayLimits)
    side_effects: frozenset[str] = SIDE_EFFECT_TOOLS


@dataclass(frozen=True)
class ReplayContext:
    """Everything a caller needs to measure the replay cell, built once from settings
    (ingot/runtime.py `replay_context`): `context.cell(skill, champion, candidate, llm, sandbox)`."""

    goldens_dir: Path
    cache_dir: Path | None
    tiers: JudgeTiers
    settings: ReplaySettings = field(default_factory=ReplaySettings)
    world_sources: tuple[WorldSource, ...] = ()
    research: ResearchCheck | None = None
    teacher_model: str | None = None

    def cell(
        self,
        skill: str,
        champion_files: Mapping[str, bytes] | None,
        candidate_files: Mapping[str, bytes],
        llm: LLMClient,
        sandbox: Sandbox | None = None,
    ) -> dict[str, Any]:
        """The replay cell for one candidate; a fresh `World` per evaluation."""
        return replay_cell(
            skill,
            champion_files,
            candidate_files,
            self.goldens_dir,
            llm,
            self.tiers,
            sandbox,
            settings=self.settings,
            world=World(self.world_sources, self.research),
            cache_dir=self.cache_dir,
            teacher_model=self.teacher_model,
        )


def _not_measured(why: str) -> dict[str, Any]:
    return {"status": "not_measured", "why": why}


@dataclass
class _Work:
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


def replay_cell(
    skill: str,
    champion_files: Mapping[str, bytes] | None,
    candidate_files: Mapping[str, bytes],
    goldens_dir: Path,
    llm: LLMClient,
    tiers: JudgeTiers,
    sandbox: Sandbox | None = None,
    *,
    settings: ReplaySettings | None = None,
    world: World | None = None,
    cache_dir: Path | None = None,
    teacher_model: str | None = None,
) -> dict[str, Any]:
    """The `measurements["replay"]` block for `candidate_files` of `skill`.

    `champion_files` None: no controls (e.g. `ingot replay`, where the candidate is the live
    revision itself); the noise floor is then not measured."""
    settings = settings or ReplaySettings()
    stored, problems = GoldenStore(goldens_dir).active(skill)
    if not stored:
        return _not_measured(f"no blessed goldens for {skill}: bless a good run with `ingot bless TRACE_ID`")
    world = world or World()
    works = []
    for golden in stored:
        try:
            recorded = GoldenStore(goldens_dir).revision_files(skill, golden.golden.revision)
        except GoldenError as exc:
            problems.append(f"{golden.id}: {exc}")
            continue
        works.append(_Work(golden, recorded))
    if not works:
        return _not_measured(f"no usable golden for {skill}: {'; '.join(problems)}")
    try:
        return _measure(
            skill,
            champion_files,
            candidate_files,
            works,
            problems,
            llm,
            tiers,
            sandbox,
            settings,
            world,
            cache_dir,
            teacher_model,
        )
    except BudgetExceeded as exc:
        return _not_measured(f"MAX_RUN_USD reached during the replays: {exc}")


def _measure(
    skill: str,
    champion_files: Mapping[str, bytes] | None,
    candidate_files: Mapping[str, bytes],
    works: list[_Work],
    problems: list[str],
    llm: LLMClient,
    tiers: JudgeTiers,
    sandbox: Sandbox | None,
    settings: ReplaySettings,
    world: World,
    cache_dir: Path | None,
    teacher_model: str | None,
) -> dict[str, Any]:
    replayer = Replayer(llm, world, sandbox, settings.limits)
    cascade = Cascade(llm, tiers, settings.side_effects)
    champion = revision_of(champion_files) if champion_files is not None else None
    for work in works:
        if champion_files is not None and settings.controls:
            work.cache_key = _cache_key(work, champion, replayer.serving_model, tiers, settings, world)
            cached = _read_cache(cache_dir, work.cache_key)
            if cached is not None:
                work.controls, work.control_judgements = cached
                work.controls_cached = True
    with ThreadPoolExecutor(max_workers=settings.concurrency) as pool:
        jobs = []
        for work in works:
            jobs.append(
                (work, None, pool.submit(replayer.run, work.stored.golden, work.recorded, candidate_files))
            )
            if champion_files is not None and not work.controls_cached:
                for n in range(settings.controls):
                    jobs.append(
                        (
                            work,
                            n,
                            pool.submit(replayer.run, work.stored.golden, work.recorded, champion_files),
                        )
                    )
        for work, n, job in jobs:
            if n is None:
                work.candidate = job.result()
            else:
                work.controls.append(job.result())
        for work in works:
            work.drift = drift_cards(work.stored.golden, work.stored.review, world)
        fresh = [w for w in works if w.controls and not w.controls_cached]
        judged = list(pool.map(lambda w: [cascade.judge(_expected(w), c) for c in w.controls], fresh))
        for work, judgements in zip(fresh, judged, strict=True):
            work.control_judgements = judgements
            _write_cache(cache_dir, work)
        candidates = list(
            pool.map(
                lambda w: cascade.judge(
                    _expected(w), w.candidate, [c.answer for c in w.controls if c.answer]
                ),
                works,
            )
        )
    for work, judgement in zip(works, candidates, strict=True):
        work.judgement = judgement
    entries = [_entry(w) for w in works]
    verdict, reasons = cell_verdict(entries)
    rationale, by = _rationale(llm, skill, verdict, entries, works)
    return {
        "status": "measured",
        "verdict": verdict,
        "reasons": reasons,
        "rationale": rationale,
        "rationale_by": by,
        "skill": skill,
        "champion_revision": champion,
        "candidate_revision": revision_of(candidate_files),
        "serving_model": replayer.serving_model,
        "tiers": tiers.models(),
        "goldens": entries,
        "samples": len(entries),
        "noise_floor": _noise_floor(works, champion, settings),
        "drift": [card.to_json() for w in works for card in w.drift],
        "cost": _costs(works, by),
        "counterfactual": _counterfactual(llm, tiers, works, by),
        "warnings": _warnings(tiers, teacher_model)
        + [
            f"{w.stored.id}: criteria {w.stored.review.status}, not approved by a person; "
            "its verdict rests on them"
            for w in works
            if w.stored.review.status != "human-approved"
        ],
        "skipped_goldens": problems,
        "inputs": {
            "golden_digests": [w.stored.golden.digest for w in works],
            "review_digests": [w.stored.review.digest for w in works],
            "cache_digests": [w.cache_key for w in works],
            "controls_per_golden": settings.controls if champion_files is not None else 0,
            "limits": {k: v for k, v in settings.limits.__dict__.items() if k != "sandbox_tools"}
            | {"sandbox_tools": sorted(settings.limits.sandbox_tools)},
            "side_effect_tools": sorted(settings.side_effects),
            "world_sources": [s.name for s in world.sources],
            "research": world.research is not None,
        },
    }


def _expected(work: _Work) -> Expected:
    now = {card.fact: card.new for card in work.drift if card.new is not None}
    return Expected(work.stored.golden, work.stored.review, now)


def _cache_key(
    work: _Work, champion: str | None, model: str, tiers: JudgeTiers, settings: ReplaySettings, world: World
) -> str:
    golden = work.stored.golden
    calls = [(s.name, s.arguments) for s in golden.steps if world.covers(s.name)]
    key = {
        "version": CACHE_VERSION,
        "champion": champion,
        "golden": golden.digest,
        "review": work.stored.review.digest,
        "model": model,
        "tiers": tiers.models(),
        "controls": settings.controls,
        "world": world.digest(calls),
        "side_effects": sorted(settings.side_effects),
    }
    return hashlib.sha256(rfc8785.dumps(key)).hexdigest()


def _read_cache(cache_dir: Path | None, key: str | None) -> tuple[list[ReplayRun], list[Judgement]] | None:
    if cache_dir is None or key is None:
        return None
    try:
        data = json.loads((cache_dir / f"{key}.json").read_text())
        return (
            [ReplayRun.from_json(c["replay"]) for c in data["controls"]],
            [Judgement.from_json(c["judgement"]) for c in data["controls"]],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cache(cache_dir: Path | None, work: _Work) -> None:
    if cache_dir is None or work.cache_key is None:
        return
    from ingot.fsutil import write_atomic

    cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = {
        "controls": [
            {"replay": r.to_json(), "judgement": j.to_json()}
            for r, j in zip(work.controls, work.control_judgements, strict=True)
        ]
    }
    write_atomic(cache_dir / f"{work.cache_key}.json", json.dumps(data).encode(), mode=0o600, durable=False)


def _entry(work: _Work) -> dict[str, Any]:
    """One golden's findings, with what replay_verdict.py needs to recompute its verdict."""
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
        "controls": [
            {
                "verdict": j.verdict,
                "tier": j.tier,
                "signature": sorted(j.signature),
                "answer_same": r.answer == run.answer,
            }
            for r, j in zip(work.controls, work.control_judgements, strict=True)
        ],
        "controls_from_cache": work.controls_cached,
    }
    entry["verdict"], entry["why"] = golden_verdict(entry)
    moved = any(card.ruling == "world moved" for card in work.drift)
    entry["ruling"] = {"BLOCK": "regressed", "WARN": "held"}.get(
        entry["verdict"], "world moved" if moved else "passes"
    )
    judging = [d.cost_usd for d in judgement.decisions if d.model and not d.from_cassette]
    entry["usd"] = _sum([run.cost_usd, *judging])
    return entry


def _sum(values: Sequence[float | None]) -> float | None:
    return None if any(v is None for v in values) else round(sum(values), 8)  # type: ignore[arg-type]


def _noise_floor(works: list[_Work], champion: str | None, settings: ReplaySettings) -> dict[str, Any]:
    if champion is None:
        return _not_measured("no unchanged champion to control against (the live revision is replayed alone)")
    if not settings.controls:
        return _not_measured("REPLAY_CONTROLS is 0")
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


def _costs(works: list[_Work], rationale: Mapping[str, Any]) -> dict[str, Any]:
    """Tokens and cost of what this measurement sent (cached controls and cassette replays sent
    nothing). A bucket with a call of unknown cost has `usd` None, never a partial sum."""
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


def _counterfactual(
    llm: LLMClient, tiers: JudgeTiers, works: list[_Work], rationale: Mapping[str, Any]
) -> dict[str, Any]:
    """What judging every replay run here with the strongest tier alone would have cost.

    Each replay costs one strongest-tier call: its prompt's size times the tokens per character
    measured on this cell's judge calls, and the mean output of its strongest-tier calls."""
    strongest = tiers.l3 or tiers.l2 or tiers.l1
    if strongest is None:
        return _not_measured("no judge tier is configured")
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
        text = render("judge_replay_adjudicate", **prompt_values(_expected(work), run))
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


def _rationale(
    llm: LLMClient, skill: str, verdict: str, entries: list[dict], works: list[_Work]
) -> tuple[str, dict[str, Any]]:
    """One paragraph by the strongest tier used; with no model used, written from the L0 findings."""
    used = [
        (d.tier, d.model)
        for w in works
        for d in (w.judgement.decisions if w.judgement else ())
        if d.model and d.verdict != "skipped"
    ]
    findings = "\n".join(
        f"- {e['id']} ({e['task'][:80]!r}): {e['verdict']} at {e['tier']}: {e['why']}; controls "
        f"{sum(c['verdict'] != 'pass' for c in e['controls'])} of {len(e['controls'])} failed"
        + "".join(f"; world fact {d['label']} {d['old']} -> {d['new']} ({d['ruling']})" for d in e["drift"])
        for e in entries
    )
    if not used:
        text = f"{verdict}: {len(entries)} golden(s) replayed; decided without a model (L0). " + " ".join(
            f"{e['id']}: {e['why']}." for e in entries
        )
        return text, {"tier": "L0", "model": None}
    tier, model = max(used, key=lambda u: TIER_RANK.get(u[0], 0))
    prompt = render("replay_rationale", skill=skill, verdict=verdict, findings=findings)
    completion = llm.complete("judge", [{"role": "user", "content": prompt}], model=model, temperature=0)
    return (completion.text or "").strip(), {
        "tier": tier,
        "model": model,
        "tokens_in": completion.tokens_in,
        "tokens_out": completion.tokens_out,
        "cost_usd": None if completion.from_cassette else completion.cost_usd,
        "from_cassette": completion.from_cassette,
    }


def _warnings(tiers: JudgeTiers, teacher_model: str | None) -> list[str]:
    warnings = [
        f"{tier} is skipped: no model (JUDGE_{tier}_MODEL)"
        for tier, model in tiers.models().items()
        if model is None
    ]
    if teacher_model:
        warnings += [
            f"{tier} ({model}) is also the teacher that may have written this candidate"
            for tier, model in tiers.models().items()
            if model == teacher_model
        ]
    return warnings
