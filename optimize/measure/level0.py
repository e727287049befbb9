"""The judge cascade's records and its model-free tier, L0.

A replay is first compared with its golden without any model: the final answer after normalising
case, Unicode forms and whitespace (identical, or identical to what the unchanged champion answers
now: pass), the tool-call sequence, and the side effects (calls of side-effecting tools added or
missing: L0 evidence of a regression). `level0` returns None when a model must look
(cascade.py); `lost_commitments` then says which of the golden answer's commitments the replay
lost (commitments.py), a finding for the judges, never evidence by itself. `Decision` and
`Judgement` are what every tier records, serialisable to evidence.
`Expected` is the golden as the world is now: a moved value (a world fact, or a value a tool
supplied, provenance.py) is replaced only inside the passages of the answer that restate it, never
in a passage that states a rule on it, and never by a search-and-replace over the whole text.
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from optimize.measure.commitments import Comparison, answer_facts, compare
from optimize.measure.goldens import Golden, Review, call_key, quote_spans, value_spans
from optimize.measure.provenance import Supplied, rule_spans
from optimize.measure.replay import ReplayRun

SIDE_EFFECT_TOOLS = frozenset({"write_file", "edit_file", "delete", "create_skill"})


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
    prompt_digest: str | None = None  # sha256 of what the tier read: which prompt ruled

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
    now: Mapping[str, str] = field(default_factory=dict)  # fact or value id -> its value now (drift)
    values: tuple[Supplied, ...] = ()  # what tool calls supplied the answer (provenance.py)

    @property
    def answer(self) -> str:
        """The golden's answer with each moved value replaced by its value now, only where it was
        observed: inside a fact's quotes or the passages restating a supplied value, as a whole
        word or number, and never inside a passage that states a rule ("go only when green").
        The same text elsewhere is left alone, and so is the answer of a fact without quotes
        (the judges still read the move in `facts_text`)."""
        answer = self.golden.answer
        rules = rule_spans(answer)
        edits: dict[tuple[int, int], str] = {}
        for item in (*self.review.facts, *self.values):
            new = self.now.get(item.id)
            if not new:
                continue
            values = value_spans(answer, item.value)
            for start, end in (q for quote in item.quotes for q in quote_spans(answer, quote)):
                for a, b in values:
                    if start <= a and b <= end and not any(s <= a and b <= e for s, e in rules):
                        edits.setdefault((a, b), new)  # a listed fact first, then the first value
        # Spans of the recorded answer, applied from the end so earlier offsets still hold; a
        # span overlapping one already applied (two facts quoting the same text) is skipped.
        kept = len(answer) + 1
        for (a, b), new in sorted(edits.items(), reverse=True):
            if b <= kept:
                answer, kept = answer[:a] + new + answer[b:], a
        return answer

    def facts_text(self) -> str:
        lines = []
        for fact in self.review.facts:
            value = self.now.get(fact.id) or fact.value
            moved = f" (was {fact.value} when recorded; the world moved)" if self.now.get(fact.id) else ""
            lines.append(f"- {fact.id}: {fact.label} = {value} (from step {fact.step}, {fact.tool}){moved}")
        for item in self.moved_values():
            lines.append(
                f"- {item.id}: a value {item.tool} returned = {self.now[item.id]} (from step {item.step}, "
                f"{item.tool}) (was {item.value} when recorded; the world moved)"
            )
        return "\n".join(lines) or "(none)"

    def moved_values(self) -> list[Supplied]:
        """The supplied values (not listed as facts) that read differently now."""
        return [v for v in self.values if self.now.get(v.id)]

    def criteria_text(self) -> str:
        return "\n".join(f"- {c.id}: {c.text}" for c in self.review.criteria) or "(none written)"


def side_effect_diff(
    golden: Golden, replay: ReplayRun, side_effects: frozenset[str]
) -> tuple[list[str], Mapping | None]:
    """Labels for side-effecting calls missing from or added by the replay, and the first one's
    step (the citation: a missing one's golden step before an extra one's replay step)."""
    recorded = Counter(call_key(s.name, s.arguments) for s in golden.steps if s.name in side_effects)
    replayed = Counter(call_key(s.name, s.arguments) for s in replay.steps if s.name in side_effects)
    missing, first_missing = _surplus(golden.steps, recorded, replayed, side_effects, "missing", "golden")
    extra, first_extra = _surplus(replay.steps, replayed, recorded, side_effects, "extra", "replay")
    return missing + extra, first_missing or first_extra


def _surplus(
    steps: Sequence, mine: Counter, theirs: Counter, side_effects: frozenset[str], word: str, run: str
) -> tuple[list[str], Mapping | None]:
    """Labels for the side-effecting calls in `steps` beyond what the other run made (`mine` is
    counted down as they are found), and a citation of the first of them."""
    labels, cited = [], None
    for step in steps:
        key = call_key(step.name, step.arguments)
        if step.name in side_effects and mine[key] > theirs[key]:
            mine[key] -= 1
            call = f"{step.name}({args_text(step.arguments)})"
            labels.append(f"{word} side effect: {call}")
            cited = cited or {"run": run, "step": step.index, "quote": call}
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
        "missing": [f"step {s.index}: {s.name}({args_text(s.arguments)})" for s in missing],
        "extra": [f"step {s.index}: {s.name}({args_text(s.arguments)})" for s in extra],
    }


def lost_commitments(expected: Expected, replay: ReplayRun) -> Comparison:
    """The golden answer's commitments (commitments.py) and which the replay lost; a moved world
    value counts at its recorded value or its value now."""
    moved = {v.value: expected.now[v.id] for v in expected.moved_values()}
    moved |= {f.value: expected.now[f.id] for f in expected.review.facts if expected.now.get(f.id)}
    facts = answer_facts(
        expected.golden.steps, [f.value for f in expected.review.facts] + list(moved.values())
    )
    return compare(expected.answer, replay.answer or "", facts, moved)


def args_text(arguments: Any) -> str:
    """A call's arguments as the judges and reports show them (sorted JSON, at most 160 chars)."""
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
