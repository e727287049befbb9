"""The replay evidence cell: every active golden of a skill replayed with a candidate, judged.

`replay_cell` is the one entry point (`ingot optimize`, `ingot evaluate`, `ingot replay` call
it). Per golden: the candidate's replay (replay.py); controls, the unchanged champion replayed
the same way (REPLAY_CONTROLS per golden, cached by champion revision, golden, criteria,
serving model, tiers and world, like the A/B champion); drift cards for world facts that read
differently now (drift.py), and for every value of the answer a recorded tool call supplied
whose call answers differently now (provenance.py); the cascade's judgement of every replay
(cascade.py), against the golden with the moved values in the passages restating them; and the
golden's verdict (replay_verdict.py), where a difference the controls also show is never
blamed on the candidate. Then the change's coverage (coverage.py): each instruction it alters
is exercised by a blessed run or named as not exercised (a WARN, never a silent PASS). The
cell holds the PASS / WARN / BLOCK verdict with a paragraph of
rationale by the strongest tier used, the noise floor, per-tier tokens and cost (which add up
to the ledger's), the all-strongest counterfactual, and every input needed to recompute it.
This module runs the replays and judges them; replay_cache.py keeps the controls and
replay_report.py writes the findings, costs and counterfactual. It measures; whether a change
may be approved is the passport's call (control/passport.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.workspace import revision_of
from ingot.progress import Count, uncounted
from optimize.measure.cascade import Cascade, JudgeTiers
from optimize.measure.coverage import coverage
from optimize.measure.drift import ResearchCheck, World, WorldSource, drift_cards
from optimize.measure.golden_store import GoldenStore
from optimize.measure.goldens import GoldenError
from optimize.measure.level0 import SIDE_EFFECT_TOOLS, Expected
from optimize.measure.provenance import moved_calls, supplied, value_cards
from optimize.measure.replay import Replayer, ReplayLimits
from optimize.measure.replay_cache import cache_key, read_cache, write_cache
from optimize.measure.replay_report import (
    GoldenWork,
    costs,
    counterfactual,
    expected,
    golden_entry,
    noise_floor,
    not_measured,
)
from optimize.measure.replay_verdict import FINDING_OF, SAID, model_rulings, replay_cell_verdict
from optimize.measure.sandbox import Sandbox
from optimize.models.ledger import BudgetExceeded
from optimize.models.llm import LLMClient
from optimize.models.prompting import render

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
        count: Count = uncounted,
    ) -> dict[str, Any]:
        """The replay cell for one candidate; a fresh `World` per evaluation; `count` hears each
        replay run and each replay judged."""
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
            count=count,
        )


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
    count: Count = uncounted,
) -> dict[str, Any]:
    """The `measurements["replay"]` block for `candidate_files` of `skill`.

    `champion_files` None: no controls (e.g. `ingot replay`, where the candidate is the live
    revision itself); the noise floor is then not measured."""
    settings = settings or ReplaySettings()
    stored, problems = GoldenStore(goldens_dir).active(skill)
    if not stored:
        return not_measured(f"no blessed goldens for {skill}: bless a good run with `ingot bless TRACE_ID`")
    world = world or World()
    works = []
    for golden in stored:
        try:
            recorded = GoldenStore(goldens_dir).revision_files(skill, golden.golden.revision)
        except GoldenError as exc:
            problems.append(f"{golden.id}: {exc}")
            continue
        works.append(GoldenWork(golden, recorded))
    if not works:
        return not_measured(f"no usable golden for {skill}: {'; '.join(problems)}")
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
            count,
        )
    except BudgetExceeded as exc:
        return not_measured(f"MAX_RUN_USD reached during the replays: {exc}")


def _measure(
    skill: str,
    champion_files: Mapping[str, bytes] | None,
    candidate_files: Mapping[str, bytes],
    works: list[GoldenWork],
    problems: list[str],
    llm: LLMClient,
    tiers: JudgeTiers,
    sandbox: Sandbox | None,
    settings: ReplaySettings,
    world: World,
    cache_dir: Path | None,
    teacher_model: str | None,
    count: Count = uncounted,
) -> dict[str, Any]:
    replayer = Replayer(llm, world, sandbox, settings.limits)
    cascade = Cascade(llm, tiers, settings.side_effects)
    champion = revision_of(champion_files) if champion_files is not None else None
    for work in works:
        work.supplied = supplied(work.stored.golden, work.recorded)
        if champion_files is not None and settings.controls:
            work.cache_key = cache_key(
                work.stored,
                champion,
                replayer.serving_model,
                tiers,
                settings.controls,
                settings.side_effects,
                world,
            )
            cached = read_cache(cache_dir, work.cache_key)
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
        # replays run, then each fresh control judged, then each candidate replay judged
        total = len(jobs) + sum(1 for _, n, _ in jobs if n is not None) + len(works)
        done = 0

        def tick(units: int = 1) -> None:
            nonlocal done
            done += units
            count(done, total, "replays run and judged")

        count(0, total, "replays run and judged")
        for work, n, job in jobs:
            if n is None:
                work.candidate = job.result()
            else:
                work.controls.append(job.result())
            tick()
        for work in works:
            golden, review = work.stored.golden, work.stored.review
            live_run = work.candidate if champion_files is None else None  # the live revision alone
            work.moved_calls = moved_calls(golden, world, live_run)
            work.drift = drift_cards(golden, review, world)
            work.drift += value_cards(golden, work.supplied, review, world, live_run)
        fresh = [w for w in works if w.controls and not w.controls_cached]
        judged = pool.map(lambda w: [cascade.judge(expected(w), c) for c in w.controls], fresh)
        for work, judgements in zip(fresh, judged, strict=True):
            work.control_judgements = judgements
            write_cache(cache_dir, work.cache_key, work.controls, work.control_judgements)
            tick(len(judgements))
        candidates = []
        for judgement in pool.map(
            lambda w: cascade.judge(expected(w), w.candidate, [c.answer for c in w.controls if c.answer]),
            works,
        ):
            candidates.append(judgement)
            tick()
    for work, judgement in zip(works, candidates, strict=True):
        work.judgement = judgement
        work.serving_model = replayer.serving_model
    if champion_files is None:
        _replay_in_the_recorded_world(works, candidate_files, llm, cascade, sandbox, settings)
    entries = [golden_entry(w, alone=champion_files is None) for w in works]
    covered = _coverage(skill, champion_files, candidate_files, works, llm, tiers, settings)
    verdict, reasons, _ = replay_cell_verdict(
        {"goldens": entries, "coverage": covered, "champion_revision": champion}
    )
    rationale, by = _rationale(llm, skill, verdict, entries, works, covered)
    decided_by = model_rulings({"goldens": entries, "coverage": covered})
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
        "noise_floor": noise_floor(works, champion, settings.controls),
        "drift": [card.to_json() for w in works for card in w.drift],
        "coverage": covered,
        "decided_by": decided_by,  # every model ruling the verdict rests on (model, prompt digest)
        "cost": costs(works, by, covered.get("decision")),
        "counterfactual": counterfactual(llm, tiers, works, by),
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


def _replay_in_the_recorded_world(
    works: list[GoldenWork],
    files: Mapping[str, bytes],
    llm: LLMClient,
    cascade: Cascade,
    sandbox: Sandbox | None,
    settings: ReplaySettings,
) -> None:
    """The live revision replayed alone (no unchanged champion to blame against): for each golden
    whose world moved and whose replay regressed, replay it once more with every call answered
    from the recording (a `World` with no source) and judge that against the answer as recorded.
    Passing there, the move explains the difference (stale); regressing there too, the world is
    not the cause: a model or harness change. Model-free blame, one extra replay per such golden."""
    doubtful = [
        w
        for w in works
        if (w.moved_calls or w.drift) and w.judgement is not None and w.judgement.verdict != "pass"
    ]
    if not doubtful:
        return
    frozen = Replayer(llm, World(), sandbox, settings.limits)
    for work in doubtful:
        golden, review = work.stored.golden, work.stored.review
        work.frozen_run = frozen.run(golden, work.recorded, files)
        work.frozen = cascade.judge(Expected(golden, review, {}, work.supplied), work.frozen_run)


def _coverage(
    skill: str,
    champion_files: Mapping[str, bytes] | None,
    candidate_files: Mapping[str, bytes],
    works: list[GoldenWork],
    llm: LLMClient,
    tiers: JudgeTiers,
    settings: ReplaySettings,
) -> dict[str, Any]:
    """The change's coverage; not applicable when the live revision is replayed alone."""
    if champion_files is None:
        return {"status": "not_applicable", "why": "no change: the live revision is replayed alone"}
    strongest = next(((t, m) for t, m in reversed(tiers.models().items()) if m), None)
    runs = [(w.stored.golden, w.candidate) for w in works]
    controls = {w.stored.golden.id: w.controls for w in works}
    return coverage(
        skill, champion_files, candidate_files, runs, llm, strongest, settings.limits.sandbox_tools, controls
    )


def _rationale(
    llm: LLMClient,
    skill: str,
    verdict: str,
    entries: list[dict],
    works: list[GoldenWork],
    covered: Mapping[str, Any],
) -> tuple[str, dict[str, Any]]:
    """One paragraph by the strongest tier used; with no model used, written from the L0 findings."""
    used = [
        (d.tier, d.model)
        for w in works
        for d in (w.judgement.decisions if w.judgement else ())
        if d.model and d.verdict != "skipped"
    ]
    findings = "\n".join(
        f"- {e['id']} ({e['task'][:80]!r}): {FINDING_OF.get(e['verdict'], e['verdict'])} at {e['tier']}: "
        f"{e['why']}; controls "
        f"{sum(c['verdict'] != 'pass' for c in e['controls'])} of {len(e['controls'])} failed"
        + "".join(f"; world fact {d['label']} {d['old']} -> {d['new']} ({d['ruling']})" for d in e["drift"])
        for e in entries
    )
    unexercised = [i["label"] for i in covered.get("instructions") or () if i["status"] == "not exercised"]
    if unexercised:
        findings += "\n- not exercised by any blessed run: " + "; ".join(unexercised)
    if not used:
        text = (
            f"{SAID.get(verdict, verdict)}: {len(entries)} golden(s) replayed; "
            + (
                "decided without a model (L0). "
                if verdict != "WARN"
                else "not settled: no model decided them (L0 findings only). "
            )
            + " ".join(f"{e['id']}: {e['why']}." for e in entries)
        )
        if unexercised:
            text += " Not exercised by any blessed run: " + "; ".join(unexercised) + "."
        return text, {"tier": "L0", "model": None}
    tier, model = max(used, key=lambda u: TIER_RANK.get(u[0], 0))
    prompt = render("replay_rationale", skill=skill, verdict=SAID.get(verdict, verdict), findings=findings)
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
