"""Candidate search: diagnose the seed, author N rewrites from different angles, race them.

1. The seed body is rolled out on every train task through the agent's serving path and judged
   (cached and sealed like the A/B champion, cache.py: a repeat run pays only for new candidates).
2. The teacher diagnoses which sections caused which failures (missing / insufficient / incorrect).
3. N candidates (OPTIMIZE_CANDIDATES) are authored in parallel, each from a different angle; the
   first is always a minimal additive edit.
4. A successive-halving race over the train tasks keeps the better half each round.
5. The winner's mean minus a length penalty must beat the seed's mean, or the search ends with
   "no improvement" and nothing is proposed. Holdout tasks are never seen here (ab.py uses them).
"""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pydantic import BaseModel

from agent.run import serve, skill_system_prompt
from ingot.progress import Count, Steps, uncounted
from optimize.measure.cache import SealedCache
from optimize.measure.judge import Judge
from optimize.measure.size import change_size
from optimize.measure.taskset import Task
from optimize.models.llm import LLMClient
from optimize.models.prompting import render, templates_digest
from optimize.search.research import OFF, Brief

ANGLES = (
    "a minimal additive edit: add only what the diagnosis says is missing, change nothing else",
    "restructure the procedure into clear numbered steps with a final checklist",
    "add concrete examples and the pitfalls behind the failures",
    "tighten: remove noise and ambiguity, make every instruction testable",
    "cover the failure modes explicitly, with what to do instead",
)
LENGTH_PENALTY = 0.05  # score lost per 100% growth in body length over the seed
STEPS = ("seed rollout", "diagnosis", "authoring candidates", "train race")  # what `search` reports


class _Diagnosis(BaseModel):
    issues: list[dict[str, str]] = []


class _Authored(BaseModel):
    body: str


@dataclass
class Candidate:
    id: str
    angle: str
    body: str
    scores: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else 0.0


@dataclass(frozen=True)
class SearchResult:
    seed_mean: float
    winner: Candidate | None
    candidates: tuple[Candidate, ...]
    diagnosis: tuple[dict[str, str], ...]
    reason: str


class CandidateSearch:
    def __init__(
        self, llm: LLMClient, judge: Judge, n: int = 5, brief: Brief = OFF, cache: SealedCache | None = None
    ) -> None:
        self.llm, self.judge, self.n = llm, judge, max(1, min(n, len(ANGLES)))
        self.brief = brief  # web research for the authors only; the judge never sees it
        self.cache = cache  # the seed's train rollout, keyed by everything that conditions it

    def _score(self, name: str, revision: str, body: str, task: Task) -> tuple[float, str, str]:
        served = serve(self.llm, "agent", skill_system_prompt("match", name, revision, body), task.prompt)
        grade = self.judge.grade(task.prompt, served.answer, rubric=task.rubric)
        return grade.score, served.answer, "; ".join(grade.rationales)

    def search(
        self, name: str, revision: str, seed: str, train: tuple[Task, ...], steps: Steps | None = None
    ) -> SearchResult:
        """The best candidate, or why none beats the seed; each of STEPS reported to `steps`."""
        steps = steps or Steps(STEPS)
        rollout = self._seed_rollout(name, revision, seed, train, steps.begin(STEPS[0]))
        seed_mean = sum(s for s, _, _ in rollout) / len(rollout)
        failures = "\n\n".join(
            f"TASK: {t.prompt}\nSCORE: {s:.2f}\nJUDGE: {why}"
            for t, (s, _, why) in zip(train, rollout, strict=True)
            if s < 0.999
        )
        steps.begin(STEPS[1])
        diagnosis, _ = self.llm.complete_json(
            "teacher",
            [
                {
                    "role": "user",
                    "content": render("optimize_diagnose", body=seed, failures=failures or "(none)"),
                }
            ],
            _Diagnosis,
        )
        count = steps.begin(STEPS[2])
        count(0, self.n, "candidates written")
        with ThreadPoolExecutor(self.n) as pool:
            authored = []
            for body in pool.map(lambda angle: self._author(seed, diagnosis, angle), ANGLES[: self.n]):
                authored.append(body)
                count(len(authored), self.n, "candidates written")
        candidates = [
            Candidate(f"cand-{i + 1}", angle, body)
            for i, (angle, body) in enumerate(zip(ANGLES[: self.n], authored, strict=True))
            if body.strip()
        ]
        survivors = self._race(name, candidates, train, steps.begin(STEPS[3]))
        best = max(survivors, key=lambda c: (c.mean, -len(c.body)), default=None)
        if best is None:
            return SearchResult(seed_mean, None, tuple(candidates), tuple(diagnosis.issues), "no candidates")
        growth = max(0.0, (len(best.body) - len(seed)) / max(len(seed), 1))
        penalized = best.mean - LENGTH_PENALTY * growth
        seed_on_same = [s for s, _, _ in rollout[: len(best.scores)]]
        baseline = sum(seed_on_same) / len(seed_on_same)
        if penalized <= baseline:
            return SearchResult(
                seed_mean,
                None,
                tuple(candidates),
                tuple(diagnosis.issues),
                f"no improvement: best candidate {best.mean:.3f} (length-penalised "
                f"{penalized:.3f}) does not beat the seed's {baseline:.3f}",
            )
        return SearchResult(
            seed_mean,
            best,
            tuple(candidates),
            tuple(diagnosis.issues),
            f"{best.id} won the train race {best.mean:.3f} vs seed {baseline:.3f}: "
            f"{change_size(name, {'SKILL.md': seed.encode()}, {'SKILL.md': best.body.encode()}).label} "
            f"(asked for: {best.angle.split(':')[0]})",
        )

    def _seed_rollout(
        self, name: str, revision: str, seed: str, train: tuple[Task, ...], count: Count = uncounted
    ) -> list[tuple[float, str, str]]:
        def run() -> list[tuple[float, str, str]]:
            scored = []
            count(0, len(train), "tasks")
            for task in train:
                scored.append(self._score(name, revision, seed, task))
                count(len(scored), len(train), "tasks")
            return scored

        if self.cache is None:
            return run()
        agent, judge = self.llm.config.endpoint("agent"), self.llm.config.endpoint("judge")
        conditions = {
            "seed": revision,
            "train": [t.as_json() for t in train],
            "agent_model": agent.model,
            "agent_base_url": agent.base_url,
            "judges": list(self.judge.models),
            "judge_base_url": judge.base_url,
            "prompts": templates_digest("agent_match", "judge_grade"),
        }
        entry = self.cache.get(conditions)
        if entry is None or len(entry.results) != len(train):
            entry = self.cache.put(conditions, [list(r) for r in run()])
        return [(float(s), str(a), str(w)) for s, a, w in entry.results]

    def _author(self, seed: str, diagnosis: _Diagnosis, angle: str) -> str:
        prompt = render("optimize_author", angle=angle, body=seed, diagnosis=json.dumps(diagnosis.issues))
        prompt += self.brief.prompt_section()
        authored, _ = self.llm.complete_json("teacher", [{"role": "user", "content": prompt}], _Authored)
        return authored.body

    def _race(
        self, name: str, candidates: list[Candidate], train: tuple[Task, ...], count: Count = uncounted
    ) -> list[Candidate]:
        """Successive halving: each round scores the survivors on the next slice of train tasks.
        `count` hears each candidate scored on a task, out of what the race can still need."""
        survivors, start = list(candidates), 0
        rounds = max(1, math.ceil(math.log2(max(len(candidates), 1))) + 1)
        per_round = max(1, math.ceil(len(train) / rounds))
        done, total = 0, _race_size(len(candidates), len(train), per_round)
        count(done, total, "tasks scored")
        while survivors and start < len(train):
            batch = train[start : start + per_round]
            for candidate in survivors:
                for task in batch:
                    candidate.scores.append(self._score(name, candidate.id, candidate.body, task)[0])
                    done += 1
                    count(done, total, "tasks scored")
            start += per_round
            if len(survivors) > 1 and start < len(train):
                survivors = sorted(survivors, key=lambda c: -c.mean)[: max(1, len(survivors) // 2)]
        return survivors


def _race_size(candidates: int, tasks: int, per_round: int) -> int:
    """How many (candidate, task) scorings the race makes: the halving is fixed by the counts."""
    survivors, start, size = candidates, 0, 0
    while survivors and start < tasks:
        size += survivors * len(range(start, min(start + per_round, tasks)))
        start += per_round
        if survivors > 1 and start < tasks:
            survivors = max(1, survivors // 2)
    return size
