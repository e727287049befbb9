"""Goldens: recorded runs the user was happy with, kept as regression tests for a skill.

A golden is made from one trace (`golden_from_trace`): the task, the final answer, the final
model request's messages (system prompt, task, every tool call with its arguments and result, in
order), the tool schemas offered, the serving model and the skill revision that served it. It
is redacted like a trace, content-addressed (its id is its SHA-256) and stored private (0600)
under `<home>/goldens/<skill>/`, beside the serving revision's files (needed to put a
candidate's bytes where that revision's were). Its *review* is kept apart, because it changes:
success criteria and world facts (drafted by the teacher or written by a person, and which of
the two), and whether the golden is active or retired. Deciding who may bless or retire, and
auditing it, is change control's job (optimize/control/goldens_admin.py), not this module's.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import rfc8785
from pydantic import BaseModel, Field

from ingot.errors import IngotError
from ingot.fsutil import check_relative, write_atomic
from optimize.models.llm import Completion, LLMClient
from optimize.models.prompting import render
from optimize.models.redaction import redact_value
from optimize.models.traces import TraceRecord

SCHEMA_VERSION = 1
MAX_SHOWN = 1500  # characters of a tool result the teacher sees per step
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
    """A tool result the answer relied on: `value` as it appears in step `step`'s result."""

    id: str
    step: int
    tool: str
    label: str
    value: str


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
        data = {"criteria": [asdict(c) for c in self.criteria], "facts": [asdict(f) for f in self.facts]}
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


def check_facts(golden: Golden, facts: Sequence[WorldFact]) -> list[str]:
    """Why each fact does not hold in the recorded run (empty: all hold)."""
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
    return problems


# -- the teacher's draft ------------------------------------------------------------------------


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


# -- the store ----------------------------------------------------------------------------------


def _review_from(data: Mapping[str, Any]) -> Review:
    if data.get("schema_version") != SCHEMA_VERSION:
        raise GoldenError("not a version-1 golden review")
    return Review(
        criteria=tuple(Criterion(str(c["id"]), str(c["text"])) for c in data.get("criteria") or ()),
        facts=tuple(
            WorldFact(str(f["id"]), int(f["step"]), str(f["tool"]), str(f["label"]), str(f["value"]))
            for f in data.get("facts") or ()
        ),
        status=data.get("status", "none"),
        drafted_by=data.get("drafted_by"),
        approved_by=data.get("approved_by"),
        approved_at=data.get("approved_at"),
        state=data.get("state", "active"),
        retired_by=data.get("retired_by"),
        retired_at=data.get("retired_at"),
        retired_reason=data.get("retired_reason"),
        notes=tuple(data.get("notes") or ()),
    )


def _golden_from(data: Mapping[str, Any]) -> Golden:
    if data.get("schema_version") != SCHEMA_VERSION:
        raise GoldenError("not a version-1 golden")
    if not SKILL_NAME.match(str(data["skill"])) or not REVISION.match(str(data["revision"])):
        raise GoldenError("its skill or revision is malformed")
    return Golden(
        skill=str(data["skill"]),
        revision=str(data["revision"]),
        route=str(data["route"]),
        harness=data.get("harness"),
        model=data.get("model"),
        task=str(data["task"]),
        answer=str(data["answer"]),
        messages=tuple(data["messages"]),
        tools=tuple(data.get("tools") or ()),
        model_calls=tuple(data.get("model_calls") or ()),
        source=dict(data.get("source") or {}),
    )


class GoldenStore:
    """`<home>/goldens/<skill>/<digest>.json` (+ `.review.json`) and `revisions/<revision>.json`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _skill_dir(self, skill: str) -> Path:
        check_relative(skill)
        return self.folder / skill

    def _write(self, path: Path, data: Mapping[str, Any]) -> None:
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        folder = self.folder
        for part in ("", *path.parent.relative_to(self.folder).parts):  # every level private
            folder = folder / part if part else folder
            folder.mkdir(mode=0o700, exist_ok=True)
            folder.chmod(0o700)
        write_atomic(
            path, json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False).encode(), mode=0o600
        )

    def add(self, golden: Golden, files: Mapping[str, bytes], review: Review) -> tuple[Stored, bool]:
        """Store `golden`, its revision's files and `review`; (stored, False) if it was already there."""
        folder = self._skill_dir(golden.skill)
        path = folder / f"{golden.digest}.json"
        if path.exists():
            return self.load(path), False
        revision_path = folder / "revisions" / f"{golden.revision}.json"
        if not revision_path.exists():
            encoded = [{"path": p, "base64": base64.b64encode(d).decode()} for p, d in sorted(files.items())]
            self._write(revision_path, {"schema_version": SCHEMA_VERSION, "files": encoded})
        self._write(path.with_suffix(".review.json"), review.to_json())
        self._write(path, golden.content())
        return Stored(golden, review, path), True

    def load(self, path: Path) -> Stored:
        try:
            golden = _golden_from(json.loads(path.read_bytes()))
            review = _review_from(json.loads(path.with_suffix(".review.json").read_bytes()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise GoldenError(f"cannot read golden {path.name}: {exc}") from exc
        if golden.digest != path.stem:
            raise GoldenError(f"golden {path.name} does not hash to its name (edited on disk); retire it")
        return Stored(golden, review, path)

    def all(self, skill: str | None = None) -> tuple[list[Stored], list[str]]:
        """Every golden (of `skill`), oldest first, and one line per file that could not be read."""
        found, problems = [], []
        folders = (
            [self._skill_dir(skill)] if skill else sorted(p for p in self.folder.glob("*") if p.is_dir())
        )
        for folder in folders:
            for path in sorted(folder.glob("*.json")):
                if path.name.endswith(".review.json"):
                    continue
                try:
                    found.append(self.load(path))
                except GoldenError as exc:
                    problems.append(str(exc))
        found.sort(key=lambda s: str(s.golden.source.get("time", "")))
        return found, problems

    def active(self, skill: str) -> tuple[list[Stored], list[str]]:
        stored, problems = self.all(skill)
        return [s for s in stored if s.review.state == "active"], problems

    def find(self, golden_id: str) -> Stored:
        """The golden whose id (or digest) starts with `golden_id`."""
        prefix = golden_id.removeprefix("g-")
        matches = [s for s in self.all()[0] if len(prefix) >= 6 and s.golden.digest.startswith(prefix)]
        if len(matches) != 1:
            raise GoldenError(f"{golden_id!r} matches {len(matches)} goldens; `ingot goldens` lists them")
        return matches[0]

    def save_review(self, stored: Stored, review: Review) -> Stored:
        self._write(stored.path.with_suffix(".review.json"), review.to_json())
        return replace(stored, review=review)

    def revision_files(self, skill: str, revision: str) -> dict[str, bytes]:
        if not REVISION.match(revision):
            raise GoldenError(f"{revision[:20]!r} is not a revision")
        path = self._skill_dir(skill) / "revisions" / f"{revision}.json"
        try:
            data = json.loads(path.read_bytes())
            return {check_relative(f["path"]): base64.b64decode(f["base64"]) for f in data["files"]}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise GoldenError(
                f"the files of {skill}@{revision[:12]} are missing from the goldens store: {exc}"
            ) from exc

    def skills(self) -> Iterator[str]:
        yield from sorted(p.name for p in self.folder.glob("*") if p.is_dir())
