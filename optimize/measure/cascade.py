"""The judge cascade: a replay judged against its golden, cheapest tier first.

L0, no model: the final answer compared with the golden's after normalising (identical, or
identical to what the unchanged champion answers now: pass), the tool-call sequence, and the
side effects (calls of side-effecting tools, e.g. write_file, added or missing: that is L0
evidence of a regression); then the golden answer's commitments (commitments.py: passages,
numbers, units, times, decisions, negations, facts, format) looked for in the replay. A lost
commitment is not evidence on its own: it skips L1 (a cheap screen may not pass it) and goes to
L2 and L3 with the passage it came from. L1, a cheap model, screens the answer against the
golden's commitments, criteria and world facts. L2, a mid model, re-checks what L1 or L0
contested and must cite the divergent step (a citation that does not quote the run is not one).
L3, the strongest, adjudicates what is left. Every prompt separates commitments (must survive,
named or not) from wording (free). A regression is established only by L0 side-effect evidence
or by L2 and L3 agreeing; anything else that is not a pass is "contested" (a WARN upstream). A
tier without a model is skipped, and the decision says so. Every model decision records tier,
model, tokens, cost and the sha256 of the prompt it read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from ingot.errors import IngotError
from optimize.measure.commitments import Comparison
from optimize.measure.level0 import (
    SIDE_EFFECT_TOOLS,
    Decision,
    Expected,
    Judgement,
    args_text,
    level0,
    lost_commitments,
)
from optimize.measure.replay import ReplayRun
from optimize.models.ledger import BudgetExceeded
from optimize.models.llm import Completion, LLMClient
from optimize.models.prompting import render

SHOWN = 600  # characters of each tool result a judge sees


@dataclass(frozen=True)
class JudgeTiers:
    """Models of the three tiers (JUDGE_L1_MODEL, JUDGE_L2_MODEL, JUDGE_L3_MODEL) on the judge
    endpoint; None: the tier is skipped. Any two may be the same model."""

    l1: str | None = None
    l2: str | None = None
    l3: str | None = None

    def models(self) -> dict[str, str | None]:
        return {"L1": self.l1, "L2": self.l2, "L3": self.l3}


# -- L1 to L3 ------------------------------------------------------------------------------------


class _Screen(BaseModel):
    verdict: Literal["pass", "fail", "unsure"]
    failed: list[str] = Field(default_factory=list)
    rationale: str = ""


class _Citation(BaseModel):
    run: Literal["golden", "replay"]
    step: int | Literal["answer"]
    quote: str = ""


class _Recheck(BaseModel):
    verdict: Literal["pass", "regressed"]
    failed: list[str] = Field(default_factory=list)
    cited_step: _Citation | None = None
    rationale: str = ""


class _Adjudicate(BaseModel):
    verdict: Literal["pass", "regressed"]
    failed: list[str] = Field(default_factory=list)
    rationale: str = ""


def _steps_text(steps: Sequence[Any]) -> str:
    return (
        "\n".join(
            f"Step {s.index}: {s.name}({args_text(s.arguments)}) -> {str(s.result)[:SHOWN]}" for s in steps
        )
        or "(no tool calls)"
    )


def citation_holds(cited: Mapping[str, Any] | None, expected: Expected, replay: ReplayRun) -> bool:
    """A citation quotes text that is really in the step it names (case and spacing aside)."""
    if not cited or len(str(cited.get("quote", "")).strip()) < 3:
        return False
    run_steps = expected.golden.steps if cited.get("run") == "golden" else replay.steps
    answer = expected.answer if cited.get("run") == "golden" else replay.answer or ""
    if cited.get("step") == "answer":
        text = answer
    else:
        step = next((s for s in run_steps if s.index == cited.get("step")), None)
        if step is None:
            return False
        text = f"{step.name}({args_text(step.arguments)}) {step.result}"
    norm = lambda t: " ".join(str(t).casefold().split())  # noqa: E731
    return norm(cited["quote"]) in norm(text)


def prompt_values(
    expected: Expected, replay: ReplayRun, comparison: Comparison | None = None
) -> dict[str, str]:
    """What every tier reads about one replay."""
    comparison = comparison or lost_commitments(expected, replay)
    return {
        "task": expected.golden.task,
        "criteria": expected.criteria_text(),
        "facts": expected.facts_text(),
        "commitments": comparison.text(),
        "golden_answer": expected.answer,
        "replay_answer": replay.answer or "",
        "golden_steps": _steps_text(expected.golden.steps),
        "replay_steps": _steps_text(replay.steps),
        "partial": "yes: some tools were unavailable during the replay" if replay.partial else "no",
        "l0": "",
        "l1": "",
        "l2": "",
    }


@dataclass
class Cascade:
    llm: LLMClient
    tiers: JudgeTiers
    side_effects: frozenset[str] = SIDE_EFFECT_TOOLS

    def judge(self, expected: Expected, replay: ReplayRun, controls: Sequence[str] = ()) -> Judgement:
        decided = level0(expected, replay, self.side_effects, controls)
        if decided is not None:
            return decided
        comparison = lost_commitments(expected, replay)
        values = prompt_values(expected, replay, comparison)
        decisions: list[Decision] = []
        l1 = None
        if comparison.lost:
            decisions.append(_lost(comparison))
            values["l0"] = _finding(decisions[-1])
            values["l1"] = (
                "(skipped: commitments of the golden are missing, so a cheap screen may not pass it)"
            )
        else:
            l1 = self._ask("L1", self.tiers.l1, "judge_replay_screen", values, _Screen, decisions)
            if l1 is not None and l1.verdict == "pass":
                return Judgement("pass", "L1", tuple(decisions), note=l1.rationale)
            values["l1"] = _finding(decisions[-1]) if l1 is not None else "(no L1 tier)"
        l2 = self._ask("L2", self.tiers.l2, "judge_replay_recheck", values, _Recheck, decisions)
        cited = None
        if l2 is not None:
            cited = l2.cited_step.model_dump() if l2.cited_step else None
            if l2.verdict == "pass":
                return Judgement("pass", "L2", tuple(decisions), note=l2.rationale)
            if not citation_holds(cited, expected, replay):
                uncited = decisions[-1]
                note = f"{uncited.rationale} [its citation {json.dumps(cited)} does not quote the run]"
                decisions[-1] = Decision(**{**uncited.__dict__, "verdict": "unsure", "rationale": note})
                cited = None
        values["l2"] = _finding(decisions[-1]) if l2 is not None else "(no L2 tier)"
        l3 = self._ask("L3", self.tiers.l3, "judge_replay_adjudicate", values, _Adjudicate, decisions)
        failed = frozenset(f for d in decisions for f in d.failed)
        l2_cited = l2 is not None and l2.verdict == "regressed" and cited is not None
        if l3 is not None and l3.verdict == "pass":
            if l2_cited:
                return Judgement(
                    "contested",
                    "L3",
                    tuple(decisions),
                    signature=failed,
                    cited=cited,
                    note="L2 and L3 disagree",
                )
            return Judgement("pass", "L3", tuple(decisions), note=l3.rationale)
        if l3 is not None and l2_cited:
            signature = frozenset(l3.failed) | frozenset(l2.failed) if l2 else failed
            return Judgement(
                "regressed", "L3", tuple(decisions), "L2+L3", signature or failed, cited, l3.rationale
            )
        tier = "L3" if l3 is not None else "L2" if l2 is not None else "L1" if l1 is not None else "L0"
        why = _why_not_block(l1, l2, l3, l2_cited, comparison.lost, decisions)
        return Judgement("contested", tier, tuple(decisions), signature=failed, cited=cited, note=why)

    def _ask(
        self,
        tier: str,
        model: str | None,
        prompt: str,
        values: Mapping[str, str],
        schema: type[BaseModel],
        into: list[Decision],
    ) -> Any:
        if model is None:
            into.append(
                Decision(tier, None, "skipped", rationale=f"no model for {tier} (JUDGE_{tier}_MODEL)")
            )
            return None
        text = render(prompt, **values)
        try:
            reply, calls = self.llm.complete_json(
                "judge", [{"role": "user", "content": text}], schema, model=model, temperature=0
            )
        except BudgetExceeded:
            raise  # MAX_RUN_USD ends the evaluation
        except IngotError as exc:
            into.append(Decision(tier, model, "skipped", rationale=f"{tier} failed: {exc}"))
            return None
        cited = getattr(reply, "cited_step", None)
        into.append(
            Decision(
                tier,
                model,
                reply.verdict,
                tuple(reply.failed),
                cited.model_dump() if cited else None,
                reply.rationale,
                *_usage(calls),
                len(text),
                hashlib.sha256(text.encode()).hexdigest(),
            )
        )
        return reply


def _usage(calls: Sequence[Completion]) -> tuple[int, int, float | None, bool]:
    costs = [c.cost_usd for c in calls if not c.from_cassette]
    cost = None if any(c is None for c in costs) else round(sum(costs), 8)  # type: ignore[arg-type]
    return (
        sum(c.tokens_in for c in calls),
        sum(c.tokens_out for c in calls),
        cost,
        all(c.from_cassette for c in calls),
    )


def _lost(comparison: Comparison) -> Decision:
    """L0's finding that the golden's commitments are missing: it blocks nothing by itself."""
    labels = comparison.labels()
    return Decision(
        "L0",
        None,
        "fail",
        tuple(c.id for c in comparison.missing),
        None,
        "commitments of the golden missing from the replay: " + "; ".join(labels),
    )


def _finding(decision: Decision) -> str:
    cited = f"; cites {json.dumps(decision.cited)}" if decision.cited else ""
    said = f"{decision.tier} ({decision.model}) said {decision.verdict}"
    return f"{said}; failed {list(decision.failed)}{cited}: {decision.rationale}"


def _why_not_block(
    l1: Any, l2: Any, l3: Any, l2_cited: bool, lost: bool, decisions: Sequence[Decision] = ()
) -> str:
    """Why this replay is contested, not blocked: which tier was missing, and whether it was
    never configured or failed to answer (a judge that errored is not "no judge")."""

    def absent(tier: str) -> str:
        failed = next((d for d in decisions if d.tier == tier and d.model and d.verdict == "skipped"), None)
        return f"{tier} failed to answer ({failed.rationale})" if failed else f"no {tier} tier is configured"

    if l1 is None and l2 is None and l3 is None:
        what = "commitments of the golden are missing" if lost else "the answer differs"
        tried = [d for d in decisions if d.model and d.verdict == "skipped"]
        if tried:
            errors = "; ".join(d.rationale for d in tried)
            return (
                f"{what} and every judge tier failed to answer ({errors}): re-evaluate when the "
                "judges answer, or a person must look"
            )
        return f"{what} and no judge tier is configured to decide: a person must look"
    if l3 is None and l2_cited:
        return f"L2 found a regression and cited it, but {absent('L3')} to agree (a BLOCK needs both)"
    if l3 is not None and l3.verdict == "regressed":
        return "L3 found a regression but L2 did not cite one (a BLOCK needs L2 and L3 agreeing)"
    if l3 is None:
        return f"contested below L3: {absent('L3')}"
    return "contested below L3 and no stronger tier is configured"
