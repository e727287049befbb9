"""The judge cascade: a replay judged against its golden, cheapest tier first.

L0, no model: the final answer compared with the golden's after normalising (identical, or
identical to what the unchanged champion answers now: pass), the tool-call sequence, and the
side effects (calls of side-effecting tools, e.g. write_file, added or missing: that is L0
evidence of a regression). L1, a cheap model, screens the answer against the golden's criteria
and world facts. L2, a mid model, re-checks what L1 contested and must cite the divergent step
(a citation that does not quote the run is not one). L3, the strongest, adjudicates what is
left. A regression is established only by L0 evidence or by L2 and L3 agreeing; anything else
that is not a pass is "contested" (a WARN upstream). A tier without a model is skipped, and the
decision says so. Every model decision records tier, model, tokens and cost.
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from ingot.errors import IngotError
from optimize.measure.goldens import Golden, Review, call_key
from optimize.measure.replay import ReplayRun
from optimize.models.ledger import BudgetExceeded
from optimize.models.llm import Completion, LLMClient
from optimize.models.prompting import render

SIDE_EFFECT_TOOLS = frozenset({"write_file", "edit_file", "delete", "create_skill"})
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


@dataclass(frozen=True)
class Decision:
    tier: str  # L0 | L1 | L2 | L3
    model: str | None
    verdict: str  # pass | fail | unsure | regressed | skipped
    failed: tuple[str, ...] = ()
    cited: Mapping[str, Any] | None = None
    rationale: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = 0.0
    from_cassette: bool = False
    prompt_chars: int = 0  # size of what the tier read (for the all-strongest estimate)

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["failed"] = list(self.failed)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decision:
        return cls(**{**data, "failed": tuple(data.get("failed") or ())})


@dataclass(frozen=True)
class Judgement:
    """The cascade's finding on one replay."""

    verdict: Literal["pass", "regressed", "contested", "error"]
    tier: str  # where it was decided
    decisions: tuple[Decision, ...]
    evidence: str = ""  # for a regression: "L0" or "L2+L3"
    signature: frozenset[str] = field(default_factory=frozenset)  # what differs: criteria, L0 labels
    cited: Mapping[str, Any] | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "tier": self.tier,
            "decisions": [d.to_json() for d in self.decisions],
            "evidence": self.evidence,
            "signature": sorted(self.signature),
            "cited": self.cited,
            "note": self.note,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Judgement:
        return cls(
            data["verdict"],
            data["tier"],
            tuple(Decision.from_json(d) for d in data.get("decisions") or ()),
            data.get("evidence", ""),
            frozenset(data.get("signature") or ()),
            data.get("cited"),
            data.get("note", ""),
        )


def same_text(a: str | None, b: str | None) -> bool:
    """Final answers equal after normalising case, Unicode forms and whitespace."""

    def norm(text: str | None) -> str:
        return " ".join(unicodedata.normalize("NFKC", text or "").casefold().split())

    return a is not None and b is not None and norm(a) == norm(b)


@dataclass(frozen=True)
class Expected:
    """What a replay is judged against: the golden, its review, and the world as it is now."""

    golden: Golden
    review: Review
    now: Mapping[str, str] = field(default_factory=dict)  # fact id -> its value now (drift)

    @property
    def answer(self) -> str:
        """The golden's answer with every drifted fact's old value replaced by the new one."""
        answer = self.golden.answer
        for fact in self.review.facts:
            if self.now.get(fact.id):
                answer = answer.replace(fact.value, self.now[fact.id])
        return answer

    def facts_text(self) -> str:
        lines = []
        for fact in self.review.facts:
            value = self.now.get(fact.id) or fact.value
            moved = f" (was {fact.value} when recorded; the world moved)" if self.now.get(fact.id) else ""
            lines.append(f"- {fact.id}: {fact.label} = {value} (from step {fact.step}, {fact.tool}){moved}")
        return "\n".join(lines) or "(none)"

    def criteria_text(self) -> str:
        return "\n".join(f"- {c.id}: {c.text}" for c in self.review.criteria) or "(none written)"


# -- L0 ------------------------------------------------------------------------------------------


def side_effect_diff(
    golden: Golden, replay: ReplayRun, side_effects: frozenset[str]
) -> tuple[list[str], Mapping | None]:
    """Labels for side-effecting calls missing from or added by the replay, and the first one's
    golden step (the citation)."""
    recorded = Counter(call_key(s.name, s.arguments) for s in golden.steps if s.name in side_effects)
    replayed = Counter(call_key(s.name, s.arguments) for s in replay.steps if s.name in side_effects)
    labels, cited = [], None
    for step in golden.steps:
        key = call_key(step.name, step.arguments)
        if step.name in side_effects and recorded[key] > replayed[key]:
            recorded[key] -= 1
            labels.append(f"missing side effect: {step.name}({_args(step.arguments)})")
            cited = cited or {
                "run": "golden",
                "step": step.index,
                "quote": f"{step.name}({_args(step.arguments)})",
            }
    for step in replay.steps:
        key = call_key(step.name, step.arguments)
        if step.name in side_effects and replayed[key] > recorded[key]:
            replayed[key] -= 1
            labels.append(f"extra side effect: {step.name}({_args(step.arguments)})")
            cited = cited or {
                "run": "replay",
                "step": step.index,
                "quote": f"{step.name}({_args(step.arguments)})",
            }
    return labels, cited


def sequence_diff(golden: Golden, replay: ReplayRun) -> dict[str, Any]:
    """L0's tool-call comparison: the same calls in the same order, or which are missing / extra."""
    recorded = [call_key(s.name, s.arguments) for s in golden.steps]
    replayed = [call_key(s.name, s.arguments) for s in replay.steps]
    left, right = Counter(recorded), Counter(replayed)
    missing = [
        s for s in golden.steps if left[call_key(s.name, s.arguments)] > right[call_key(s.name, s.arguments)]
    ]
    extra = [
        s for s in replay.steps if right[call_key(s.name, s.arguments)] > left[call_key(s.name, s.arguments)]
    ]
    return {
        "same": recorded == replayed,
        "missing": [f"step {s.index}: {s.name}({_args(s.arguments)})" for s in missing],
        "extra": [f"step {s.index}: {s.name}({_args(s.arguments)})" for s in extra],
    }


def _args(arguments: Any) -> str:
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)[:160]


def level0(
    expected: Expected, replay: ReplayRun, side_effects: frozenset[str], controls: Sequence[str] = ()
) -> Judgement | None:
    """The model-free decision, or None when a model must look."""
    if replay.stopped or replay.answer is None:
        reason = replay.stopped or "no answer"
        return Judgement("error", "L0", (Decision("L0", None, "unsure", rationale=reason),), note=reason)
    labels, cited = side_effect_diff(expected.golden, replay, side_effects)
    if labels:
        decision = Decision("L0", None, "regressed", tuple(labels), cited, "; ".join(labels))
        return Judgement("regressed", "L0", (decision,), "L0", frozenset(labels), cited, "; ".join(labels))
    if same_text(replay.answer, expected.answer):
        sequence = [call_key(s.name, s.arguments) for s in expected.golden.steps]
        same_calls = sequence == [call_key(s.name, s.arguments) for s in replay.steps]
        note = "the same answer" + ("" if same_calls else "; read-only tool calls differ")
        return Judgement("pass", "L0", (Decision("L0", None, "pass", rationale=note),), note=note)
    if any(same_text(replay.answer, c) for c in controls):
        note = "the same answer as the unchanged champion gives now"
        return Judgement("pass", "L0", (Decision("L0", None, "pass", rationale=note),), note=note)
    return None


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
        "\n".join(f"Step {s.index}: {s.name}({_args(s.arguments)}) -> {str(s.result)[:SHOWN]}" for s in steps)
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
        text = f"{step.name}({_args(step.arguments)}) {step.result}"
    norm = lambda t: " ".join(str(t).casefold().split())  # noqa: E731
    return norm(cited["quote"]) in norm(text)


def prompt_values(expected: Expected, replay: ReplayRun) -> dict[str, str]:
    """What every tier reads about one replay."""
    return {
        "task": expected.golden.task,
        "criteria": expected.criteria_text(),
        "facts": expected.facts_text(),
        "golden_answer": expected.answer,
        "replay_answer": replay.answer or "",
        "golden_steps": _steps_text(expected.golden.steps),
        "replay_steps": _steps_text(replay.steps),
        "partial": "yes: some tools were unavailable during the replay" if replay.partial else "no",
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
        values = prompt_values(expected, replay)
        decisions: list[Decision] = []
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
        why = _why_not_block(l1, l2, l3, l2_cited)
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


def _finding(decision: Decision) -> str:
    cited = f"; cites {json.dumps(decision.cited)}" if decision.cited else ""
    said = f"{decision.tier} ({decision.model}) said {decision.verdict}"
    return f"{said}; failed {list(decision.failed)}{cited}: {decision.rationale}"


def _why_not_block(l1: Any, l2: Any, l3: Any, l2_cited: bool) -> str:
    if l1 is None and l2 is None and l3 is None:
        return "the answer differs and no judge tier is configured: a person must look"
    if l3 is None and l2_cited:
        return (
            "L2 found a regression and cited it, but no L3 tier is configured to agree (a BLOCK needs both)"
        )
    if l3 is not None and l3.verdict == "regressed":
        return "L3 found a regression but L2 did not cite one (a BLOCK needs L2 and L3 agreeing)"
    return "contested below L3 and no stronger tier is configured"
