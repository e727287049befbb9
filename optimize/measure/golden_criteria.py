"""A golden's success criteria and world facts: drafted by the teacher, or approved by a person.

`draft_review` asks the teacher, from the golden and the skill as it was served to the run, for a
checklist and the world facts the answer relied on, with the passages of the answer that state
each (its quotes), and drops every fact that does not hold in the recorded run and every quote
that is not such a passage (with a note saying why). A format the golden's answer has (JSON, a
table, bullets, numbered steps) is made a criterion without a model when the teacher named
none, so it is never left to a judge's tolerance. The result is marked teacher-drafted.
`approved` is a person's review, refused (`GoldenError`) if a fact does not hold or a quote is
not a passage of the answer stating its value. Storing a review is golden_store.py's job;
who may approve, and auditing it, is change control's (optimize/control/goldens_admin.py).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, Field

from optimize.measure.commitments import FORMATS
from optimize.measure.goldens import (
    Criterion,
    Golden,
    GoldenError,
    Review,
    WorldFact,
    check_facts,
    quote_problem,
    text_of,
)
from optimize.measure.passages import shape
from optimize.models.llm import Completion, LLMClient
from optimize.models.prompting import render

MAX_SHOWN = 1500  # characters of a tool result the teacher sees per step
MAX_SKILL = 6000  # characters of the served skill (the run's system prompt) the teacher sees


class _FactReply(BaseModel):
    step: int
    label: str = Field(min_length=1, max_length=200)
    value: str = Field(min_length=1, max_length=200)
    quotes: list[str] = Field(default_factory=list, max_length=8)


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
    recorded run, and quotes that are not passages of the answer stating the fact's value, are
    dropped, with a note saying why. Marked teacher-drafted until a person approves them."""
    served = "\n".join(text_of(m) for m in golden.messages if m.get("role") == "system")
    prompt = render(
        "golden_draft",
        task=golden.task,
        skill=served[:MAX_SKILL] or "(no system prompt: the skill reached the run through a tool call)",
        steps=_steps_text(golden),
        answer=golden.answer,
    )
    reply, calls = llm.complete_json(
        "teacher", [{"role": "user", "content": prompt}], _DraftReply, temperature=0
    )
    texts = [text.strip() for text in reply.criteria if text.strip()]
    form, notes = format_criterion(golden.answer, texts)
    criteria = tuple(Criterion(f"c{i}", text) for i, text in enumerate(texts + form, 1))
    steps = {s.index: s for s in golden.steps}
    candidates = [
        WorldFact(
            f"f{i}",
            f.step,
            steps[f.step].name if f.step in steps else "?",
            f.label.strip(),
            f.value.strip(),
            tuple(dict.fromkeys(q.strip() for q in f.quotes if q.strip())),
        )
        for i, f in enumerate(reply.world_facts, 1)
    ]
    problems = dict.fromkeys(check_facts(golden, [replace(f, quotes=()) for f in candidates]))
    bad = {p.split(":", 1)[0] for p in problems}
    facts = []
    notes += [f"dropped {p}" for p in problems]
    for fact in (f for f in candidates if f.id not in bad):
        kept, dropped = _checked_quotes(golden, fact)
        facts.append(kept)
        notes.extend(dropped)
    review = Review(criteria, tuple(facts), "teacher-drafted", drafted_by=calls[-1].model, notes=tuple(notes))
    return review, calls


def format_criterion(answer: str, criteria: list[str]) -> tuple[list[str], list[str]]:
    """([the criterion], [a note]) naming the answer's format when it has one and no criterion
    names a format already; ([], []) otherwise. Model-free."""
    form = shape(answer)
    named = any(word in FORMATS for c in criteria for word in c.casefold().replace(",", " ").split())
    if form is None or named:
        return [], []
    return [f"answers as {form} (the golden's format)"], [
        f"added without a model: the golden answers as {form}"
    ]


def _checked_quotes(golden: Golden, fact: WorldFact) -> tuple[WorldFact, list[str]]:
    """`fact` with only the quotes that are passages of the answer stating its value, and a note
    for each quote dropped (the fact itself stays: it holds in the run)."""
    quotes, notes = [], []
    for quote in fact.quotes:
        problem = quote_problem(golden.answer, fact.value, quote)
        if problem:
            notes.append(f"dropped a quote of {fact.id} ({fact.label}): {quote!r} {problem}")
        else:
            quotes.append(quote)
    return replace(fact, quotes=tuple(quotes)), notes


def approved(
    golden: Golden, criteria: Sequence[str], facts: Sequence[Mapping[str, Any]], actor: str
) -> Review:
    """A review written or confirmed by a person; `GoldenError` if a fact does not hold or one
    of its quotes (optional) is not a passage of the answer stating its value."""
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
                    _quotes(fact.get("quotes"), i),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
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


def _quotes(raw: Any, number: int) -> tuple[str, ...]:
    """A person's quotes of world fact `number`: none, one passage, or a list of passages."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list | tuple) or not all(isinstance(q, str) for q in raw):
        raise GoldenError(
            f'world fact {number}\'s quotes must be a list of passages of the answer, e.g. ["Status: green"]'
        )
    return tuple(dict.fromkeys(q.strip() for q in raw if q.strip()))
