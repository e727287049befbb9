"""Evaluation task sets: `optimize/tasks/<skill>.yaml`, split into train, holdout and routing.

    train:   [ "task text", {prompt: "...", rubric: "...", check: {fixture: {...}, assert: "..."}} ]
    holdout: [ ... ]          # sealed: its hash goes into the evidence
    routing: [ {task: "...", expected: skill-name | null} ]

A flat list with no split is leakage: the search would be judged on the tasks it tuned on, so
such a set is flagged and can never promote. The same for a holdout task that also appears in
train (compared after normalising case and whitespace). The holdout's hash is computed over its
canonical JSON: any change to it invalidates evidence measured on the old one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rfc8785
import yaml
from pydantic import BaseModel

from ingot.errors import IngotError, first_line


class TaskSetError(IngotError):
    """A task set file is missing or malformed."""


@dataclass(frozen=True)
class Check:
    fixture: Mapping[str, str]
    assertion: str  # a Python script run beside answer.py; exit 0 = the answer works
    setup: str | None = None  # optional script preparing the fixture; if it fails: inconclusive


@dataclass(frozen=True)
class Task:
    prompt: str
    rubric: str | None = None
    check: Check | None = None
    deliverable: str | None = None

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"prompt": self.prompt}
        if self.rubric:
            data["rubric"] = self.rubric
        if self.check:
            data["check"] = {"fixture": dict(self.check.fixture), "assert": self.check.assertion}
            if self.check.setup:
                data["check"]["setup"] = self.check.setup
        if self.deliverable:
            data["deliverable"] = self.deliverable
        return data


@dataclass(frozen=True)
class RoutingCase:
    task: str
    expected: str | None


@dataclass(frozen=True)
class TaskSet:
    skill: str
    train: tuple[Task, ...]
    holdout: tuple[Task, ...]
    routing: tuple[RoutingCase, ...] = ()
    leakage: tuple[str, ...] = field(default=())  # why this set can never promote; empty if sound

    @property
    def holdout_hash(self) -> str:
        return hashlib.sha256(rfc8785.dumps([t.as_json() for t in self.holdout])).hexdigest()


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _task(item: Any, where: str) -> Task:
    if isinstance(item, str) and item.strip():
        return Task(item.strip())
    if not isinstance(item, Mapping) or not isinstance(item.get("prompt"), str) or not item["prompt"].strip():
        raise TaskSetError(f"{where}: each task is a string or a mapping with a non-empty 'prompt'")
    check = item.get("check")
    parsed_check = None
    if check is not None:
        if not isinstance(check, Mapping) or not isinstance(check.get("assert"), str):
            raise TaskSetError(f"{where}: 'check' needs an 'assert' script (and an optional 'fixture' map)")
        fixture = check.get("fixture") or {}
        if not isinstance(fixture, Mapping) or not all(isinstance(v, str) for v in fixture.values()):
            raise TaskSetError(f"{where}: 'check.fixture' maps file names to text")
        setup = check.get("setup")
        if setup is not None and not isinstance(setup, str):
            raise TaskSetError(f"{where}: 'check.setup' is a script (text)")
        parsed_check = Check({str(k): v for k, v in fixture.items()}, check["assert"], setup)
    return Task(item["prompt"].strip(), item.get("rubric"), parsed_check, item.get("deliverable"))


def parse_task_set(skill: str, data: Any, where: str = "task set") -> TaskSet:
    if isinstance(data, list):
        tasks = tuple(_task(item, f"{where}[{i}]") for i, item in enumerate(data))
        return TaskSet(
            skill,
            tasks,
            (),
            (),
            ("a flat task list has no train/holdout split (leakage): split it into 'train' and 'holdout'",),
        )
    if not isinstance(data, Mapping):
        raise TaskSetError(f"{where}: expected a mapping with train, holdout and routing")
    train = tuple(_task(x, f"{where}.train[{i}]") for i, x in enumerate(data.get("train") or []))
    holdout = tuple(_task(x, f"{where}.holdout[{i}]") for i, x in enumerate(data.get("holdout") or []))
    routing = []
    for i, case in enumerate(data.get("routing") or []):
        if not isinstance(case, Mapping) or not isinstance(case.get("task"), str):
            raise TaskSetError(f"{where}.routing[{i}]: expected {{task: ..., expected: skill or null}}")
        routing.append(RoutingCase(case["task"], case.get("expected")))
    leakage = []
    seen = {_normal(t.prompt) for t in train}
    overlap = [t.prompt for t in holdout if _normal(t.prompt) in seen]
    if overlap:
        leakage.append(
            f"{len(overlap)} holdout task(s) also appear in train (leakage), e.g. {overlap[0][:80]!r}"
        )
    if not holdout:
        leakage.append("the holdout is empty: nothing unseen to measure on")
    return TaskSet(skill, train, holdout, tuple(routing), tuple(leakage))


def load_task_set(folder: Path, skill: str) -> TaskSet:
    path = folder / f"{skill}.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise TaskSetError(
            f"no task set for {skill!r} at {path}; write one (train/holdout/routing) or let "
            "`ingot optimize` draft it"
        ) from None
    except yaml.YAMLError as exc:
        raise TaskSetError(f"{path} is not valid YAML: {first_line(exc)}") from exc
    return parse_task_set(skill, data, str(path))


class _Draft(BaseModel):
    train: list[str]
    holdout: list[str]
    routing: list[dict[str, Any]] = []


def draft_task_set(
    llm: Any, skill: Any, folder: Path, train: int = 8, holdout: int = 5, routing: int = 8
) -> Path:
    """Have the teacher draft `<skill>.yaml` for a skill that has none; never overwrites one.

    The draft is written for a person to review before it is used: the holdout it contains will
    be sealed into every evidence bundle measured on it."""
    from optimize.models.prompting import render

    path = folder / f"{skill.name}.yaml"
    if path.exists():
        raise TaskSetError(f"{path} already exists; edit it instead of drafting a new one")
    prompt = render(
        "optimize_draft_tasks",
        name=skill.name,
        description=skill.description,
        body=skill.body,
        train=train,
        holdout=holdout,
        routing=routing,
    )
    draft, _ = llm.complete_json("teacher", [{"role": "user", "content": prompt}], _Draft)
    data = {"train": draft.train, "holdout": draft.holdout, "routing": draft.routing}
    parsed = parse_task_set(skill.name, data, "drafted task set")
    if parsed.leakage:
        raise TaskSetError(
            f"the teacher's draft is unusable: {'; '.join(parsed.leakage)}; write the set by hand"
        )
    folder.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    path.write_text(
        f"{DRAFT_MARK} (sha256 of the draft below: {hashlib.sha256(text.encode()).hexdigest()}).\n"
        "# Review it before optimizing: its holdout is sealed into every evidence bundle.\n" + text
    )
    return path


DRAFT_MARK = "# Drafted by the teacher model"
_DRAFT_LINE = re.compile(r"^# Drafted by the teacher model \(sha256 of the draft below: ([0-9a-f]{64})\)\.$")


def origin(folder: Path, skill: str) -> dict[str, Any]:
    """Who wrote `<skill>.yaml` and its hash: "human", "teacher-drafted", or "teacher-drafted,
    edited" when the draft's recorded hash no longer matches its content."""
    path = folder / f"{skill}.yaml"
    try:
        raw = path.read_bytes()
    except OSError:
        return {"origin": "none", "sha256": None, "path": str(path)}
    lines = raw.decode("utf-8", "replace").splitlines(keepends=True)
    found = _DRAFT_LINE.match(lines[0].rstrip("\n")) if lines else None
    if found is None:
        who = "teacher-drafted (hash not recorded)" if lines and lines[0].startswith(DRAFT_MARK) else "human"
    else:
        body = "".join(line for line in lines[1:] if not line.startswith("# Review it before optimizing"))
        who = (
            "teacher-drafted"
            if hashlib.sha256(body.encode()).hexdigest() == found.group(1)
            else "teacher-drafted, edited"
        )
    return {"origin": who, "sha256": hashlib.sha256(raw).hexdigest(), "path": str(path)}
