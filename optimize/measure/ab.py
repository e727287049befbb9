"""Held-out A/B: champion vs challenger served through the reference agent's path, then judged.

Each holdout task is served twice with AGENT_MODEL (no mutation tools): once with the champion,
once with the challenger, exactly as a live `match` would be: through the reference agent's
`serve`, with the arm's files readable and its scripts runnable in the sandbox when the arm
carries its files. Both answers are graded
by the judge. The result is the `ab` measurement of an evidence bundle: per-case scores and
pass/fail, deltas, the first line where the two answers diverge, tokens per task, and the
holdout hash it was measured on. Champion results are cached by (champion revision, holdout
hash, serving model, judge models) under `runs/cache/ab/`: a repeat run against an unchanged
champion makes no champion-side model calls.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rfc8785
from tqdm import tqdm

from agent.run import serve, skill_system_prompt
from agent.workspace import SkillSnapshot
from optimize.measure.execcheck import Sandbox, run_check
from optimize.measure.judge import Judge
from optimize.measure.taskset import TaskSet
from optimize.models.llm import LLMClient


@dataclass(frozen=True)
class Arm:
    """One side of the comparison: a revision of the skill, its body and (when known) its files."""

    name: str  # the skill's name
    revision: str
    body: str
    files: Mapping[str, bytes] | None = field(default=None, repr=False)  # SKILL.md, references/, scripts/...


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
    def __init__(self, llm: LLMClient, judge: Judge, cache_dir: Path, sandbox: Sandbox | None = None) -> None:
        self.llm, self.judge, self.cache_dir, self.sandbox = llm, judge, cache_dir, sandbox

    def _cache_path(self, champion: Arm, tasks: TaskSet) -> Path:
        key = {
            "champion": champion.revision,
            "holdout": tasks.holdout_hash,
            "model": self.llm.config.endpoint("agent").model,
            "judges": list(self.judge.models),
        }
        return self.cache_dir / f"{hashlib.sha256(rfc8785.dumps(key)).hexdigest()}.json"

    def _run_arm(self, arm: Arm, tasks: TaskSet) -> list[dict[str, Any]]:
        system = skill_system_prompt("match", arm.name, arm.revision, arm.body)
        skill = SkillSnapshot.of(arm.name, arm.files) if arm.files else None
        results = []
        for task in tqdm(
            tasks.holdout, desc=f"A/B {arm.revision[:12]}", unit="task", leave=False, disable=None
        ):
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
                    "usd": self._serving_cost(served.tokens_in, served.tokens_out),
                    "dimensions": dict(grade.dimensions),
                    "check": None if check is None else {"status": check.status, "reason": check.reason},
                }
            )
        return results

    def _serving_cost(self, tokens_in: int, tokens_out: int) -> float | None:
        """The serving model's cost for one answer (judging excluded); None without a price."""
        ledger = self.llm.ledger
        cost = ledger.cost(self.llm.config.endpoint("agent").model, tokens_in, tokens_out) if ledger else None
        return None if cost is None else round(cost, 8)

    def champion_results(self, champion: Arm, tasks: TaskSet) -> tuple[list[dict[str, Any]], bool]:
        """(results, from_cache)."""
        path = self._cache_path(champion, tasks)
        if path.exists():
            return json.loads(path.read_text()), True
        results = self._run_arm(champion, tasks)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results))
        return results, False

    def run(self, champion: Arm, challenger: Arm, tasks: TaskSet) -> dict[str, Any]:
        """The `ab` measurement for an evidence bundle."""
        if tasks.leakage:
            return {
                "status": "measured",
                "leakage": True,
                "why": list(tasks.leakage),
                "cases": [],
                "samples": 0,
                "holdout_hash": tasks.holdout_hash,
            }
        old, cached = self.champion_results(champion, tasks)
        new = self._run_arm(challenger, tasks)
        cases = []
        for i, (task, a, b) in enumerate(zip(tasks.holdout, old, new, strict=True)):
            cases.append(
                {
                    "id": f"holdout-{i + 1}",
                    "task": task.prompt[:200],
                    "champion": a["score"],
                    "challenger": b["score"],
                    "champion_pass": a["pass"],
                    "challenger_pass": b["pass"],
                    "delta": round(b["score"] - a["score"], 6),
                    "champion_tokens": a["tokens"],
                    "challenger_tokens": b["tokens"],
                    "champion_usd": a.get("usd"),  # absent from caches written before it existed
                    "challenger_usd": b.get("usd"),
                    "divergence": first_divergence(a["answer"], b["answer"]),
                    "champion_check": a.get("check"),
                    "challenger_check": b.get("check"),
                }
            )
        return {
            "status": "measured",
            "samples": len(cases),
            "cases": cases,
            "champion_mean": _mean([c["champion"] for c in cases]),
            "challenger_mean": _mean([c["challenger"] for c in cases]),
            "champion_usd": _total([c["champion_usd"] for c in cases]),
            "challenger_usd": _total([c["challenger_usd"] for c in cases]),
            "retention": round(_retention(champion.body, challenger.body), 4),
            "holdout_hash": tasks.holdout_hash,
            "serving_model": self.llm.config.endpoint("agent").model,
            "judges": list(self.judge.models),
            "champion_from_cache": cached,
        }


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _total(costs: Sequence[float | None]) -> float | None:
    """Serving cost of one arm over the holdout; unknown if any answer's cost is unknown."""
    return round(sum(costs), 8) if costs and all(c is not None for c in costs) else None  # type: ignore[arg-type]


def _retention(champion: str, challenger: str) -> float:
    """Share of the champion's lines that the challenger keeps (a rewrite that drops most is risky)."""
    old = [line for line in champion.splitlines() if line.strip()]
    kept = set(challenger.splitlines())
    return sum(line in kept for line in old) / len(old) if old else 1.0
