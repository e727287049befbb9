"""Goldens: recorded runs the user was happy with, kept as regression tests for a skill.

A golden is made from one trace (`golden_from_trace`): the task, the final answer, the final
model request's messages (system prompt, task, every tool call with its arguments and result, in
order), the tool schemas offered, the serving model and the skill revision that served it. It
is redacted like a trace, content-addressed (its id is its SHA-256) and stored private (0600)
under `<home>/goldens/<skill>/`, beside the serving revision's files (needed to put a
candidate's bytes where that revision's were). Its *review* is kept apart, because it changes:
success criteria and world facts (drafted by the teacher or written by a person, and which of
the two), and whether the golden is active or retired. This module holds the records and reads
a run's messages; golden_store.py keeps them on disk and golden_criteria.py drafts and approves
a review. Deciding who may bless or retire, and auditing it, is change control's job
(optimize/control/goldens_admin.py), not this module's.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import rfc8785

from ingot.errors import IngotError
from optimize.models.redaction import redact_value
from optimize.models.traces import TraceRecord

SCHEMA_VERSION = 1
# A trace's skill and revision come from a harness (the proxy's X-Ingot-Skill header): only a
# real skill name and a content revision may name files in the store.
SKILL_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
REVISION = re.compile(r"^[0-9a-f]{64}$")


class GoldenError(IngotError):
    """A trace cannot become a golden, or a golden or its review is missing or malformed."""


@dataclass(frozen=True)
class Step:
    """One tool call of a recorded run, with its result."""

    index: int  # 1-based, in the order the calls were made
    name: str
    arguments: Any  # parsed JSON arguments, or the raw string when they are not JSON
    result: str
    call_id: str = ""


@dataclass(frozen=True)
class Golden:
    """A recorded run, as stored (immutable: its id is the digest of this content)."""

    skill: str
    revision: str
    route: str  # "match" | "related"
    harness: str | None
    model: str | None
    task: str
    answer: str
    messages: tuple[Mapping[str, Any], ...]  # the final request, without the answer
    tools: tuple[Mapping[str, Any], ...]
    model_calls: tuple[Mapping[str, Any], ...] = ()
    source: Mapping[str, Any] = field(default_factory=dict)  # trace id, time, harness

    def content(self) -> dict[str, Any]:
        data = asdict(self)
        return {"schema_version": SCHEMA_VERSION, **data}

    @property
    def digest(self) -> str:
        return hashlib.sha256(rfc8785.dumps(self.content())).hexdigest()

    @property
    def id(self) -> str:
        return f"g-{self.digest[:12]}"

    @property
    def steps(self) -> tuple[Step, ...]:
        """The run's tool calls: those after the last user message (earlier ones are history)."""
        return steps_of(self.messages[prefix_length(self.messages) :])


@dataclass(frozen=True)
class Criterion:
    id: str
    text: str


@dataclass(frozen=True)
class WorldFact:
    """A tool result the answer relied on: `value` as it appears in step `step`'s result.

    `quotes` are the passages of the golden's answer that state this fact, each occurring in the
    answer and holding the value as a whole word or number: when the world moves, the value is
    replaced there and nowhere else (level0.Expected). No quotes: the answer is left as it is."""

    id: str
    step: int
    tool: str
    label: str
    value: str
    quotes: tuple[str, ...] = ()

    def content(self) -> dict[str, Any]:
        """What a review's digest hashes: without `quotes` when there are none, so a review
        written before facts had quotes keeps the digest its cached controls were keyed on."""
        data = asdict(self)
        if self.quotes:
            data["quotes"] = list(self.quotes)
        else:
            del data["quotes"]
        return data


@dataclass(frozen=True)
class Review:
    """What a golden is judged against, and its state. Mutable, unlike the golden."""

    criteria: tuple[Criterion, ...] = ()
    facts: tuple[WorldFact, ...] = ()
    status: Literal["none", "teacher-drafted", "human-approved"] = "none"
    drafted_by: str | None = None
    approved_by: str | None = None
    approved_at: str | None = None
    state: Literal["active", "retired"] = "active"
    retired_by: str | None = None
    retired_at: str | None = None
    retired_reason: str | None = None
    notes: tuple[str, ...] = ()  # what drafting dropped, and why

    @property
    def digest(self) -> str:
        """Digest of what judging depends on (criteria and facts), recorded in every bundle."""
        data = {"criteria": [asdict(c) for c in self.criteria], "facts": [f.content() for f in self.facts]}
        return hashlib.sha256(rfc8785.dumps(data)).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}


@dataclass(frozen=True)
class Stored:
    """A golden as found on disk, with its review."""

    golden: Golden
    review: Review
    path: Path

    @property
    def id(self) -> str:
        return self.golden.id


def text_of(message: Mapping[str, Any]) -> str:
    """A message's text (string content, or the text parts of a content list)."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return str(content or "")


def parse_arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return raw
    return raw


def prefix_length(messages: Sequence[Mapping[str, Any]]) -> int:
    """Messages up to and including the last user message: the context a run starts from."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    return users[-1] + 1 if users else len(messages)


def normalised(value: Any) -> Any:
    """Arguments compared loosely: whitespace collapsed, numbers as floats, nulls dropped."""
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list | tuple):
        return [normalised(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): normalised(v) for k, v in sorted(value.items()) if v is not None}
    return str(value)


def call_key(name: str, arguments: Any) -> str:
    """What makes two tool calls the same call: the name and the normalised arguments."""
    return rfc8785.dumps([name, normalised(parse_arguments(arguments))]).decode()


def steps_of(messages: Sequence[Mapping[str, Any]]) -> tuple[Step, ...]:
    """Every tool call in `messages` with its result, in call order (results matched by id)."""
    results = {m.get("tool_call_id"): text_of(m) for m in messages if m.get("role") == "tool"}
    steps = []
    for message in messages:
        for call in message.get("tool_calls") or () if message.get("role") == "assistant" else ():
            function = call.get("function") or {}
            name = function.get("name") or call.get("name") or "?"
            raw = function.get("arguments", call.get("arguments", call.get("args", {})))
            steps.append(
                Step(
                    len(steps) + 1,
                    name,
                    parse_arguments(raw),
                    results.get(call.get("id"), ""),
                    call.get("id", ""),
                )
            )
    return tuple(steps)


def golden_from_trace(record: TraceRecord) -> Golden:
    """The golden a trace makes, redacted; `GoldenError` saying why when it cannot be one."""
    if record.route not in ("match", "related") or not record.skill or not record.revision:
        raise GoldenError(
            f"trace {record.id} was not served by a skill (route {record.route}); only runs a skill "
            "served, attributed to its revision, can become goldens"
        )
    if not SKILL_NAME.match(record.skill) or len(record.skill) > 64 or not REVISION.match(record.revision):
        raise GoldenError(
            f"trace {record.id} names {record.skill!r}@{record.revision[:20]!r}, which is not a skill "
            "revision Ingot serves; only runs attributed to a served revision can become goldens"
        )
    if record.errors:
        raise GoldenError(f"trace {record.id} failed ({'; '.join(record.errors)}); bless a run that worked")
    if not record.answer or not record.answer.strip():
        asked = ", ".join(str(c.get("name")) for c in record.tool_calls) or "nothing"
        raise GoldenError(
            f"trace {record.id} has no final answer (it asked for tools: {asked}); bless the run's "
            "final model call, the one that answered"
        )
    if not record.messages:
        raise GoldenError(
            f"trace {record.id} has no transcript (recorded before Ingot kept one, or sent no "
            "messages); run the task again and bless the new trace"
        )
    messages = list(record.messages)
    if messages and messages[-1].get("role") == "assistant" and not messages[-1].get("tool_calls"):
        messages.pop()  # the reference agent's transcript ends with the answer, kept apart
    data = redact_value(
        {
            "task": record.task,
            "answer": record.answer,
            "messages": messages,
            "tools": list(record.tools),
        }
    )
    return Golden(
        skill=record.skill,
        revision=record.revision,
        route=record.route,
        harness=record.harness,
        model=record.model,
        task=data["task"],
        answer=data["answer"],
        messages=tuple(data["messages"]),
        tools=tuple(data["tools"]),
        model_calls=tuple(dict(c) for c in record.model_calls),
        source={"trace": record.id, "time": record.time, "harness": record.harness},
    )


def value_spans(text: str, value: str) -> list[tuple[int, int]]:
    """Where `value` occurs in `text` as a whole: not inside a longer word or number ("green" is
    not in "greenfield", "12" not in "125" or "12.5"). Punctuation around it is a boundary."""
    if not value:
        return []
    left = r"(?<!\w)" if re.match(r"\w", value[0]) else ""
    left += r"(?<!\d[.,])" if value[0].isdigit() else ""
    right = r"(?!\w)" if re.match(r"\w", value[-1]) else ""
    right += r"(?![.,]\d)" if value[-1].isdigit() else ""
    return [m.span() for m in re.finditer(left + re.escape(value) + right, text)]


def quote_spans(text: str, quote: str) -> list[tuple[int, int]]:
    """Every occurrence of `quote` in `text`, exactly, left to right and not overlapping."""
    spans, start = [], text.find(quote) if quote else -1
    while start >= 0:
        spans.append((start, start + len(quote)))
        start = text.find(quote, start + len(quote))
    return spans


def quote_problem(answer: str, value: str, quote: str) -> str | None:
    """Why `quote` cannot locate `value` in `answer` (None: it can), as "it ..." reads."""
    spans = quote_spans(answer, quote)
    if not spans:
        return "is not in the answer (quote it exactly, as one passage)"
    if not any(s <= a and b <= e for s, e in spans for a, b in value_spans(answer, value)):
        return f"does not contain {value!r} as a whole word or number"
    return None


def check_facts(golden: Golden, facts: Sequence[WorldFact]) -> list[str]:
    """Why each fact does not hold in the recorded run, or a quote of it is not a passage of the
    answer stating its value (empty: all hold)."""
    steps = {s.index: s for s in golden.steps}
    problems = []
    for fact in facts:
        step = steps.get(fact.step)
        if step is None:
            problems.append(f"{fact.id}: the run has no tool step {fact.step}")
        elif step.name != fact.tool:
            problems.append(f"{fact.id}: step {fact.step} called {step.name}, not {fact.tool}")
        elif not fact.value or fact.value not in step.result:
            problems.append(f"{fact.id}: {fact.value!r} is not in step {fact.step}'s result")
        else:
            for quote in fact.quotes:
                problem = quote_problem(golden.answer, fact.value, quote)
                if problem:
                    problems.append(f"{fact.id}: the quote {quote!r} {problem}")
    return problems
