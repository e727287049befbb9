"""A golden's success criteria and world facts: drafted by the teacher, or approved by a person.

`draft_review` asks the teacher for a checklist and the world facts the answer relied on, and
drops every fact that does not hold in the recorded run (with a note saying why); the result is
marked teacher-drafted. `approved` is a person's review, refused (`GoldenError`) if a fact does
not hold. Storing a review is golden_store.py's job; who may approve, and auditing it, is
change control's (optimize/control/goldens_admin.py).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from optimize.measure.goldens import Criterion, Golden, GoldenError, Review, WorldFact, check_facts
from optimize.models.llm import Completion, LLMClient
from optimize.models.prompting import render

MAX_SHOWN = 1500  # characters of a tool result the teacher sees per step


class _FactReply(BaseModel):
    step: int
    label: str = Field(min_length=1, max_length=200)
    value: str = Field(min_length=1, max_length=200)


class _DraftReply(BaseModel):
    criteria: list[str] = Field(min_length=1, max_length=8)
    world_facts: list[_FactReply] = Field(default_factory=list, max_length=12)


def _steps_text(golden: Golden) -> str:
    lines = []
    for step in golden.steps:
        arguments = json.dumps(step.arguments, ensure_ascii=False)[:300]
        lines.append(f"Step {step.index}: {step.name}({arguments})\nResult: {step.result[:MAX_SHOWN]}")
    return "\n\n".join(lines) or "(no tool calls)"


def draft_review(llm: LLMClient, golden: Golden) -> tuple[Review, list[Completion]]:
    """The teacher's checklist and world facts for `golden`; facts that do not hold in the
    recorded run are dropped, with a note saying why. Marked teacher-drafted until a person
    approves them."""
    prompt = render("golden_draft", task=golden.task, steps=_steps_text(golden), answer=golden.answer)
    reply, calls = llm.complete_json(
        "teacher", [{"role": "user", "content": prompt}], _DraftReply, temperature=0
    )
    criteria = tuple(
        Criterion(f"c{i}", text.strip()) for i, text in enumerate(reply.criteria, 1) if text.strip()
    )
    steps = {s.index: s for s in golden.steps}
    candidates = [
        WorldFact(
            f"f{i}", f.step, steps[f.step].name if f.step in steps else "?", f.label.strip(), f.value.strip()
        )
        for i, f in enumerate(reply.world_facts, 1)
    ]
    problems = dict.fromkeys(check_facts(golden, candidates))
    bad = {p.split(":", 1)[0] for p in problems}
    facts = tuple(f for f in candidates if f.id not in bad)
    notes = tuple(f"dropped {p}" for p in problems)
    return Review(criteria, facts, "teacher-drafted", drafted_by=calls[-1].model, notes=notes), calls


def approved(
    golden: Golden, criteria: Sequence[str], facts: Sequence[Mapping[str, Any]], actor: str
) -> Review:
    """A review written or confirmed by a person; `GoldenError` if a fact does not hold."""
    texts = [c.strip() for c in criteria if c and c.strip()]
    if not texts:
        raise GoldenError("a golden needs at least one success criterion: what must the answer keep doing?")
    steps = {s.index: s for s in golden.steps}
    parsed = []
    for i, fact in enumerate(facts, 1):
        try:
            step = int(fact["step"])
            parsed.append(
                WorldFact(
                    f"f{i}",
                    step,
                    steps[step].name if step in steps else "?",
                    str(fact["label"]),
                    str(fact["value"]),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise GoldenError(f"world fact {i} needs step, label and value: {exc}") from exc
    problems = check_facts(golden, parsed)
    if problems:
        raise GoldenError("; ".join(problems))
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return Review(
        tuple(Criterion(f"c{i}", t) for i, t in enumerate(texts, 1)),
        tuple(parsed),
        "human-approved",
        approved_by=actor,
        approved_at=now,
    )
