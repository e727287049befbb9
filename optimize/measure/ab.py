"""Held-out A/B: champion vs challenger served through the reference agent's path, then judged.

Each distinct holdout task is served twice with AGENT_MODEL (no mutation tools): once with the
champion, once with the challenger, exactly as a live `match` would be: through the reference
agent's `serve`, with the arm's files readable and its scripts runnable in the sandbox. A new
skill's champion is *no skill at all* (the novel path), so its quality is measured too. Both
answers are graded on the rubric (per dimension, with rationales) and compared pairwise in both
orders (a flip is a tie). Before any model call, near-duplicate holdout items are merged
(samples.py) and near-copies of train items flagged as leakage; too few distinct items is
refused (`ABRefused`), with nothing paid.

The result is the `ab` cell of an evidence bundle: per-case scores, pass/fail, pairwise
verdicts, divergence, tokens and cost, the sampling report, the conditions, and the champion
cache entry's digest. Champion results are cached (cache.py) under everything that conditions
them: revision, holdout hash, serving model and endpoint, sandbox mode, prompt templates, judges.
A repeat run against an unchanged champion makes no champion-side model calls. Cost is not a
condition: cached answers keep their token counts (in and out), and their `usd` is recomputed
under today's prices on every read, never taken from when they were cached, without rewriting
the sealed entry approval re-checks. `cost_basis` in the cell says what the cost rests on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from agent.run import serve, skill_system_prompt
from agent.workspace import SkillSnapshot
from ingot.errors import IngotError
from ingot.progress import Count, uncounted
from ingot.seal import Seal
from optimize.measure.cache import CacheEntry, SealedCache
from optimize.measure.execcheck import Sandbox, run_check
from optimize.measure.judge import Judge
from optimize.measure.retention import retention
from optimize.measure.samples import SampleReport, distinct_items
from optimize.measure.taskset import Task, TaskSet
from optimize.models.ledger import Price
from optimize.models.llm import LLMClient
from optimize.models.prompting import render, templates_digest

NO_SKILL = "no-skill"  # the champion of a new skill: the agent with no skill at all
SERVING_PROMPTS = (
    "agent_match",
    "agent_novel",
    "agent_workspace",
    "agent_workspace_no_scripts",
    "agent_workspace_scripts",
)
JUDGE_PROMPTS = ("judge_grade", "judge_pairwise")


class ABRefused(IngotError):
    """The holdout cannot give a verdict (too few distinct items); no model was called."""


@dataclass(frozen=True)
class Arm:
    """One side: a revision of the skill, its body and (when known) its files; or no skill."""

    name: str  # the skill's name
    revision: str | None  # None: no skill (the baseline for a new skill)
    body: str | None
    files: Mapping[str, bytes] | None = field(default=None, repr=False)  # SKILL.md, references/, scripts/...

    @property
    def label(self) -> str:
        return self.revision or NO_SKILL


def first_divergence(a: str, b: str) -> dict[str, Any] | None:
    """The first line where two answers differ, or None if they are identical."""
    left, right = a.splitlines(), b.splitlines()
    for number, (x, y) in enumerate(zip(left, right, strict=False), start=1):
        if x != y:
            return {"line": number, "champion": x[:200], "challenger": y[:200]}
    if len(left) != len(right):
        number = min(len(left), len(right)) + 1
        return {
            "line": number,
            "champion": (left[number - 1] if len(left) >= number else "")[:200],
            "challenger": (right[number - 1] if len(right) >= number else "")[:200],
        }
    return None


class ABRunner:
    def __init__(
        self,
        llm: LLMClient,
        judge: Judge,
        cache_dir: Path,
        sandbox: Sandbox | None = None,
        *,
        embed: Callable[[list[str]], np.ndarray] | None = None,
        seal: Seal | None = None,
        min_samples: int = 3,
    ) -> None:
        self.llm, self.judge, self.sandbox = llm, judge, sandbox
        self.cache = SealedCache(cache_dir, seal)
        self.embed, self.min_samples = embed, min_samples

    def conditions(self, champion: Arm, tasks: Sequence[Task], holdout_hash: str) -> dict[str, Any]:
        """Everything that conditions the champion's answers and grades: the cache key."""
        agent = self.llm.config.endpoint("agent")
        judge = self.llm.config.endpoint("judge")
        return {
            "champion": champion.label,
            "holdout": holdout_hash,
            "tasks": [t.as_json() for t in tasks],
            "agent_model": agent.model,
            "agent_base_url": agent.base_url,
            "judges": list(self.judge.models),
            "judge_base_url": judge.base_url,
            "sandbox": getattr(self.sandbox, "name", None) or "none",
            "serving_prompts": templates_digest(*SERVING_PROMPTS),
            "judge_prompts": templates_digest(*JUDGE_PROMPTS),
        }

    def sampling(self, tasks: TaskSet) -> SampleReport:
        return distinct_items([t.prompt for t in tasks.holdout], [t.prompt for t in tasks.train], self.embed)

    def precheck(self, tasks: TaskSet) -> str | None:
        """Why this task set cannot give an A/B verdict (leakage, too few distinct items), found
        without calling any model; None when it can."""
        report = self.sampling(tasks)
        leaks = self._leaks(tasks, report)
        if leaks:
            return "the task set leaks: " + "; ".join(leaks)
        if report.distinct < self.min_samples:
            return (
                f"the holdout has {report.distinct} distinct item(s) ({len(tasks.holdout)} listed); at "
                f"least {self.min_samples} are needed for a verdict. Add distinct holdout tasks; no model "
                "was called"
            )
        return None

    @staticmethod
    def _leaks(tasks: TaskSet, report: SampleReport) -> list[str]:
        return list(tasks.leakage) + [
            f"holdout {tasks.holdout[h].prompt[:60]!r} near-copies train {tasks.train[tr].prompt[:60]!r}"
            for h, tr in report.leaks
        ]

    def _system(self, arm: Arm) -> str:
        if arm.revision is None:
            return render("agent_novel", create_hint="")
        return skill_system_prompt("match", arm.name, arm.revision, arm.body or "")

    def _run_arm(
        self, arm: Arm, tasks: Sequence[Task], tick: Callable[[], None] = lambda: None
    ) -> list[dict[str, Any]]:
        """Each task served with `arm` and graded; `tick` after each (one judgement done)."""
        system = self._system(arm)
        skill = SkillSnapshot.of(arm.name, arm.files) if arm.files and arm.revision else None
        results = []
        for task in tasks:
            served = serve(
                self.llm,
                "agent",
                system,
                task.prompt,
                skill_revision=arm.revision,
                skill=skill,
                runner=self.sandbox,
            )
            check = None
            if task.check is not None:
                check = run_check(
                    self.sandbox, served.answer, task.check.fixture, task.check.assertion, task.check.setup
                )
            grade = self.judge.grade(task.prompt, served.answer, rubric=task.rubric, check=check)
            results.append(
                {
                    "answer": served.answer,
                    "score": round(grade.score, 6),
                    "pass": grade.passed,
                    "tokens": served.tokens_in + served.tokens_out,
                    "tokens_in": served.tokens_in,
                    "tokens_out": served.tokens_out,
                    "usd": self._serving_cost(served.tokens_in, served.tokens_out),
                    "dimensions": dict(grade.dimensions),
                    "rationales": list(grade.rationales),
                    "check": None if check is None else {"status": check.status, "reason": check.reason},
                }
            )
            tick()
        return results

    def _serving_cost(self, tokens_in: int | None, tokens_out: int | None) -> float | None:
        """The serving model's cost for one answer (judging excluded) at today's prices; None
        without a price or without the token counts."""
        ledger = self.llm.ledger
        cost = ledger.cost(self.llm.config.endpoint("agent").model, tokens_in, tokens_out) if ledger else None
        return None if cost is None else round(cost, 8)

    def _price(self) -> Price | None:
        """Today's price of the serving model, from the ledger's PRICES_FILE table."""
        ledger = self.llm.ledger
        return ledger.prices.get(self.llm.config.endpoint("agent").model) if ledger else None

    def _champion(
        self,
        champion: Arm,
        tasks: Sequence[Task],
        conditions: dict[str, Any],
        cached: CacheEntry | None,
        tick: Callable[[], None] = lambda: None,
    ) -> CacheEntry:
        """The champion's results and their cache entry: `cached` (read, `_cached`) with its answers
        priced now from their token counts (the entry's bytes stay as sealed), or the champion
        run now (`tick` after each task) and written."""
        if cached is not None:
            return replace(cached, results=[self._repriced(r) for r in cached.results])
        return self.cache.put(conditions, self._run_arm(champion, tasks, tick))

    def _cached(self, conditions: dict[str, Any], tasks: int) -> CacheEntry | None:
        """The champion's cache entry when it can be used as it is (one result per task, priced)."""
        entry = self.cache.get(conditions)
        if (
            entry is not None
            and len(entry.results) == tasks
            and (self._price() is None or all(_counted(r) for r in entry.results))
        ):
            return entry
        return None

    def _repriced(self, result: Mapping[str, Any]) -> dict[str, Any]:
        """A cached answer with its `usd` at today's prices (unknown without its token counts)."""
        if not _counted(result):
            return {**result, "tokens_in": None, "tokens_out": None, "usd": None}
        return {**result, "usd": self._serving_cost(result["tokens_in"], result["tokens_out"])}

    def _cost_basis(self, entry: CacheEntry) -> dict[str, Any]:
        """What the cell's costs were computed from, so they can be recomputed from it alone."""
        price = self._price()
        if not entry.hit:
            champion = "measured now"
        elif all(_counted(r) for r in entry.results):
            champion = "recomputed from cached token counts"
        else:
            champion = "cached without its token counts: cost unknown"
        return {
            "serving_model": self.llm.config.endpoint("agent").model,
            "price": None
            if price is None
            else {
                "input_per_million": price.input_per_million,
                "output_per_million": price.output_per_million,
            },
            "champion": champion,
            "challenger": "measured now",
        }

    def run(self, champion: Arm, challenger: Arm, tasks: TaskSet, count: Count = uncounted) -> dict[str, Any]:
        """The `ab` cell for an evidence bundle; `ABRefused` (before any call) if it cannot be.
        `count` hears each judgement done: every answer graded (the champion's only when not
        cached) and every pairwise comparison."""
        report = self.sampling(tasks)
        sampling = report.as_json([t.prompt for t in tasks.holdout], [t.prompt for t in tasks.train])
        leaks = self._leaks(tasks, report)
        if leaks:
            return {
                "status": "measured",
                "leakage": True,
                "why": leaks,
                "cases": [],
                "samples": 0,
                "sampling": sampling,
                "holdout_hash": tasks.holdout_hash,
            }
        if report.distinct < self.min_samples:
            raise ABRefused(
                f"the holdout has {report.distinct} distinct item(s) ({len(tasks.holdout)} listed); at "
                f"least {self.min_samples} are needed for a verdict. Add distinct holdout tasks; no model "
                "was called"
            )
        distinct = [tasks.holdout[i] for i in report.kept]
        conditions = self.conditions(champion, distinct, tasks.holdout_hash)
        cached = self._cached(conditions, len(distinct))
        total, done = len(distinct) * (2 if cached is not None else 3), 0

        def tick() -> None:
            nonlocal done
            done += 1
            count(done, total, "judgements")

        count(0, total, "judgements")
        entry = self._champion(champion, distinct, conditions, cached, tick)
        old, new = entry.results, self._run_arm(challenger, distinct, tick)
        cases, tally = [], {"win": 0, "tie": 0, "loss": 0}
        for i, (task, a, b) in enumerate(zip(distinct, old, new, strict=True)):
            preference = self.judge.compare(task.prompt, a["answer"], b["answer"])
            tick()
            verdict = {"b": "win", "a": "loss", "tie": "tie"}[preference.winner]
            tally[verdict] += 1
            cases.append(
                {
                    "id": f"holdout-{report.kept[i] + 1}",
                    "task": task.prompt[:200],
                    "champion": a["score"],
                    "challenger": b["score"],
                    "champion_pass": a["pass"],
                    "challenger_pass": b["pass"],
                    "delta": round(b["score"] - a["score"], 6),
                    "champion_dimensions": a.get("dimensions"),
                    "challenger_dimensions": b.get("dimensions"),
                    "champion_rationales": a.get("rationales", []),
                    "challenger_rationales": b.get("rationales", []),
                    "pairwise": verdict,
                    "pairwise_consistent": preference.consistent,
                    "pairwise_rationales": list(preference.rationales),
                    "champion_tokens": a["tokens"],
                    "challenger_tokens": b["tokens"],
                    "champion_tokens_in": a.get("tokens_in"),
                    "champion_tokens_out": a.get("tokens_out"),
                    "challenger_tokens_in": b.get("tokens_in"),
                    "challenger_tokens_out": b.get("tokens_out"),
                    "champion_usd": a.get("usd"),
                    "challenger_usd": b.get("usd"),
                    "divergence": first_divergence(a["answer"], b["answer"]),
                    "champion_check": a.get("check"),
                    "challenger_check": b.get("check"),
                }
            )
        return {
            "status": "measured",
            "samples": len(cases),
            "sampling": sampling,
            "cases": cases,
            "pairwise": {
                "status": "measured",
                "wins": tally["win"],
                "ties": tally["tie"],
                "losses": tally["loss"],
                "judge": self.judge.models[0],
                "rule": "each case asked in both orders; a verdict that flips with the order is a tie",
            },
            "champion_mean": _mean([c["champion"] for c in cases]),
            "challenger_mean": _mean([c["challenger"] for c in cases]),
            "champion_usd": _total([c["champion_usd"] for c in cases]),
            "challenger_usd": _total([c["challenger_usd"] for c in cases]),
            "cost_basis": self._cost_basis(entry),
            "retention": round(retention(champion.body or "", challenger.body or ""), 4),
            "holdout_hash": tasks.holdout_hash,
            "serving_model": self.llm.config.endpoint("agent").model,
            "judges": list(self.judge.models),
            "conditions": self.conditions(champion, distinct, tasks.holdout_hash),
            "champion_cache": entry.as_json(),
            "champion_from_cache": entry.hit,
        }


def _counted(result: Mapping[str, Any]) -> bool:
    """Whether a cached answer recorded its input and output tokens apart (older entries did not)."""
    return all(isinstance(result.get(k), int) for k in ("tokens_in", "tokens_out"))


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _total(costs: Sequence[float | None]) -> float | None:
    """Serving cost of one arm over the holdout; unknown if any answer's cost is unknown."""
    return round(sum(costs), 8) if costs and all(c is not None for c in costs) else None  # type: ignore[arg-type]
