"""The judge: rubric-based, multi-dimensional grades and position-controlled pairwise verdicts.

Every grade is validated JSON (with the client's one repair round). The judge model must differ
from the teacher that wrote the candidates (refused otherwise: a model grading its own work
inflates scores). With several judge models (JUDGE_MODELS) the grade is the ensemble mean and
`pass` the majority. Pairwise comparisons are asked in both orders; a verdict that flips with the
order is position bias and counts as a tie. An execution check's verdict, when there is one, is
given to the judge as ground truth, and a failed check fails the answer whatever the judge says.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from ingot.errors import ConfigError
from optimize.measure.execcheck import ExecResult
from optimize.models.llm import Completion, LLMClient
from optimize.models.prompting import render

DIMENSIONS = ("correctness", "completeness", "instruction_following", "efficiency")


class _Scores(BaseModel):
    correctness: float = Field(ge=0, le=1)
    completeness: float = Field(ge=0, le=1)
    instruction_following: float = Field(ge=0, le=1)
    efficiency: float = Field(ge=0, le=1)


class _GradeReply(BaseModel):
    scores: _Scores
    passed: bool = Field(alias="pass")
    rationale: str = ""


class _PairReply(BaseModel):
    winner: Literal["first", "second", "tie"]
    rationale: str = ""


@dataclass(frozen=True)
class Grade:
    score: float  # mean over dimensions and judges, 0..1
    dimensions: Mapping[str, float]
    passed: bool
    rationales: tuple[str, ...]
    judges: tuple[str, ...]
    calls: tuple[Completion, ...]


@dataclass(frozen=True)
class Preference:
    winner: Literal["a", "b", "tie"]
    consistent: bool  # False: the verdict flipped with the order (position bias), so a tie
    calls: tuple[Completion, ...]
    rationales: tuple[str, ...] = ()  # the judge's one sentence per order asked


class Judge:
    def __init__(self, llm: LLMClient, judge_models: Sequence[str], teacher_model: str | None) -> None:
        if not judge_models:
            raise ConfigError("no judge model: set JUDGE_MODEL or JUDGE_MODELS")
        if teacher_model is not None and teacher_model in judge_models:
            raise ConfigError(
                f"the judge ({teacher_model}) must differ from the teacher that writes the "
                "candidates; set JUDGE_MODEL to another model"
            )
        self.llm, self.models = llm, tuple(judge_models)

    def grade(
        self, task: str, answer: str, rubric: str | None = None, check: ExecResult | None = None
    ) -> Grade:
        ground = ""
        if check is not None and check.status != "inconclusive":
            ground = (
                f"Ground truth from running the answer's code in a sandbox: {check.status.upper()} "
                f"({check.reason}). Treat this as fact."
            )
        prompt = render(
            "judge_grade",
            task=task,
            answer=answer,
            ground_truth=ground,
            extra_rubric=f"Task-specific rubric: {rubric}" if rubric else "",
        )
        replies, calls = [], []
        for model in self.models:
            reply, made = self.llm.complete_json(
                "judge", [{"role": "user", "content": prompt}], _GradeReply, model=model, temperature=0
            )
            replies.append(reply)
            calls += made
        dimensions = {d: statistics.fmean(getattr(r.scores, d) for r in replies) for d in DIMENSIONS}
        passed = sum(r.passed for r in replies) * 2 > len(replies)
        if check is not None and check.status == "failed":
            passed = False
        return Grade(
            statistics.fmean(dimensions.values()),
            dimensions,
            passed,
            tuple(r.rationale for r in replies),
            self.models,
            tuple(calls),
        )

    def compare(self, task: str, answer_a: str, answer_b: str) -> Preference:
        """Which answer is better, asked in both orders with the first judge model."""
        calls: list[Completion] = []
        rationales: list[str] = []

        def ask(first: str, second: str) -> str:
            prompt = render("judge_pairwise", task=task, first=first, second=second)
            reply, made = self.llm.complete_json(
                "judge",
                [{"role": "user", "content": prompt}],
                _PairReply,
                model=self.models[0],
                temperature=0,
            )
            calls.extend(made)
            rationales.append(reply.rationale)
            return reply.winner

        forward = {"first": "a", "second": "b", "tie": "tie"}[ask(answer_a, answer_b)]
        backward = {"first": "b", "second": "a", "tie": "tie"}[ask(answer_b, answer_a)]
        if forward == backward:
            return Preference(forward, True, tuple(calls), tuple(rationales))
        return Preference("tie", False, tuple(calls), tuple(rationales))
