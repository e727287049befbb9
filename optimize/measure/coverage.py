"""Coverage of a change: which of the instructions it alters the blessed runs exercised.

`changed_instructions` compares the champion's and the candidate's text files block by block (a
paragraph, a list item, a heading, a table row) with markdown emphasis, list numbering, case
and whitespace left out, so a change in those alone alters no instruction; SKILL.md is compared
by its body (what its description changes is routing's cell). Each altered instruction is then
exercised or not, model-free first:
- a golden's replay *shows* it when the replay's answer, tool calls or executed output lost words
  the instruction had or gained words it has now (comparative and quantifier words included),
  answers in another format where the instruction names one, or (a moved block) puts the answer
  in another order; or when it is the only altered instruction that run was served and the
  replay differs from the golden while every control (the unchanged champion) reproduces it:
  nothing else can have made the difference. The cascade judged that difference;
- a golden was never *served* it when nothing of the file reached its run (a reference the run
  never read): that run cannot exercise it.
Each changed instruction is also compared model-free (wording.py): its `differences` besides
wording. An instruction served to some runs and shown by none goes to a model (the strongest
judge tier), asked once for all of them: is it wording only, or does behaviour change, and does
any of these runs' situation call for the changed behaviour? The answer is recorded with the
model and its prompt's digest, and replay_verdict.py derives each instruction's status: the
model decides only where the model-free comparison finds nothing but wording; one not exercised
(or undecided, for want of a model) makes the replay cell WARN, never a silent PASS.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from ingot.errors import IngotError
from mcp_server.registry import parse_skill_md
from optimize.measure.commitments import FORMATS
from optimize.measure.goldens import Golden, call_key, text_of
from optimize.measure.level0 import same_text
from optimize.measure.passages import content, passages, shape, tokens
from optimize.measure.relations import RELATION_WORDS
from optimize.measure.replay import ReplayRun
from optimize.measure.replay_verdict import instruction_status
from optimize.measure.wording import differences
from optimize.models.ledger import BudgetExceeded
from optimize.models.llm import LLMClient
from optimize.models.prompting import render

SHOWN = 600  # characters of each run's answer the coverage judge reads
MAX_ASKED = 40  # instructions put to the model in one call; the rest stay undecided


@dataclass(frozen=True)
class Instruction:
    """One altered instruction: a block of a file before (`old`) and after (`new`) the change."""

    id: str  # i1, i2, ...
    path: str
    kind: Literal["changed", "added", "removed", "moved"]
    old: str  # "" when added
    new: str  # "" when removed

    @property
    def label(self) -> str:
        where = "" if self.path == "SKILL.md" else f"{self.path}: "
        if self.kind == "changed":
            return f"{where}{_short(self.old)!r} -> {_short(self.new)!r}"
        return f"{where}{self.kind} {_short(self.old or self.new)!r}"


def _short(text: str, size: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= size else text[: size - 1] + "…"


# -- what changed -------------------------------------------------------------------------------


def blocks(text: str) -> list[str]:
    """A text's blocks: paragraphs, list items (with their continuation lines), headings, table rows."""
    found: list[str] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            found.append("\n".join(current))
            current.clear()

    for line in text.splitlines():
        if not line.strip():
            flush()
            continue
        single = re.match(r"^\s*(?:#{1,6}\s|\|)", line)
        starts = single or re.match(r"^\s*(?:[-*+]|\d+[.)])\s", line)
        if starts:
            flush()
        current.append(line)
        if single:
            flush()
    flush()
    return found


def normalised(block: str) -> str:
    """A block as compared: no list marker, heading marks, emphasis or table padding; one case."""
    text = re.sub(r"^\s*(?:[-*+]|\d+[.)]|#{1,6})\s+", "", block)
    text = re.sub(r"(\*\*|__|\*|_|`)", "", text)
    text = re.sub(r"\s*\|\s*", " | ", text)
    return " ".join(text.casefold().split())


def _text_of(path: str, data: bytes | None, skill: str) -> str | None:
    if data is None:
        return ""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None  # a binary file has no instructions to compare
    if path == "SKILL.md":
        try:
            return parse_skill_md(text, skill)[2]
        except IngotError:
            return text
    return text


def changed_instructions(skill: str, old: Mapping[str, bytes], new: Mapping[str, bytes]) -> list[Instruction]:
    """Every instruction the change from `old` to `new` alters, file by file."""
    found: list[tuple[str, str, str, str]] = []
    for path in sorted(set(old) | set(new)):
        before, after = _text_of(path, old.get(path), skill), _text_of(path, new.get(path), skill)
        if before is None or after is None or before == after:
            continue
        a, b = blocks(before), blocks(after)
        na, nb = [normalised(x) for x in a], [normalised(x) for x in b]
        removed, added = [], []
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, na, nb, autojunk=False).get_opcodes():
            if op == "replace" and i2 - i1 == j2 - j1:
                found += [
                    (path, "changed", a[i], b[j]) for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
                ]
            elif op == "replace":
                found.append((path, "changed", "\n".join(a[i1:i2]), "\n".join(b[j1:j2])))
            elif op == "delete":
                removed += a[i1:i2]
            elif op == "insert":
                added += b[j1:j2]
        for block in removed:
            twin = next((x for x in added if normalised(x) == normalised(block)), None)
            if twin is not None:
                added.remove(twin)
                found.append((path, "moved", block, twin))
            else:
                found.append((path, "removed", block, ""))
        found += [(path, "added", "", block) for block in added]
    return [Instruction(f"i{n}", path, kind, o, w) for n, (path, kind, o, w) in enumerate(found, 1)]  # type: ignore[arg-type]


# -- model-free evidence ------------------------------------------------------------------------


def _terms(text: str) -> set[str]:
    """`content` with the words comparatives and quantifiers are made of (stop words there)."""
    return content(text) | {t.casefold() for t in tokens(text) if t.casefold() in RELATION_WORDS}


def _output(answer: str | None, steps: Sequence[Any], executed: frozenset[str]) -> set[str]:
    """What a run did, as words: its answer, its tool calls, and what the executed ones printed.
    Results of file reads and recorded calls are left out: they are the skill's bytes, not what
    the run made of them."""
    text = [answer or ""]
    for step in steps:
        text.append(f"{step.name} {json.dumps(step.arguments, ensure_ascii=False)}")
        if step.name in executed:
            text.append(str(step.result))
    return _terms("\n".join(text))


def _order_changed(golden: str, replay: str) -> bool:
    """The replay states the golden's passages in another order."""
    mine = [(p.index, content(p.text)) for p in passages(golden)]
    order = []
    for passage in passages(replay):
        words = content(passage.text)
        scored = max(((len(words & m) / max(1, len(m)), -i, i) for i, m in mine), default=None)
        if scored and scored[0] >= 0.5:
            order.append(scored[2])
    return order != sorted(order)


def shown(
    instruction: Instruction, golden: Golden, replay: ReplayRun | None, executed: frozenset[str]
) -> bool:
    """Whether `replay` shows the instruction's change against `golden` (see the module docstring)."""
    if replay is None or replay.answer is None:
        return False
    if instruction.kind == "moved":
        return _order_changed(golden.answer, replay.answer)
    asks_format = any(t.casefold() in FORMATS for t in tokens(instruction.old + " " + instruction.new))
    if asks_format and shape(golden.answer) != shape(replay.answer):
        return True
    before, after = _terms(instruction.old), _terms(instruction.new)
    recorded, replayed = (
        _output(golden.answer, golden.steps, executed),
        _output(replay.answer, replay.steps, executed),
    )
    return bool((before - after) & (recorded - replayed)) or bool((after - before) & (replayed - recorded))


def _reproduces(golden: Golden, run: ReplayRun | None) -> bool:
    """The run answered as the golden did (case, Unicode forms, whitespace aside), with the same
    tool calls in the same order."""
    if run is None or run.answer is None:
        return False
    calls = [call_key(s.name, s.arguments) for s in golden.steps]
    replayed = [call_key(s.name, s.arguments) for s in run.steps]
    return same_text(golden.answer, run.answer) and calls == replayed


def alone(golden: Golden, replay: ReplayRun | None, controls: Sequence[ReplayRun]) -> bool:
    """The replay differs from its golden while every control (at least one) reproduces it: the
    change made the difference, not the model's noise or the world."""
    return (
        replay is not None
        and replay.answer is not None
        and not _reproduces(golden, replay)
        and bool(controls)
        and all(_reproduces(golden, c) for c in controls)
    )


def _transcript(messages: Sequence[Mapping[str, Any]], steps: Sequence[Any]) -> str:
    return "\n".join([text_of(m) for m in messages] + [str(s.result) for s in steps])


def served(
    instruction: Instruction, golden: Golden, replay: ReplayRun | None, files: Mapping[str, str]
) -> bool:
    """Whether the instruction's file reached the run: SKILL.md's body always does (the harness
    serves it); another file only if the recorded run (or its replay) read some of its text."""
    if instruction.path == "SKILL.md":
        return True
    seen = _transcript(golden.messages, golden.steps)
    if replay is not None:
        seen += "\n" + _transcript(replay.transcript, replay.steps)
    lines = [line.strip() for line in files.get(instruction.path, "").splitlines() if len(line.strip()) >= 8]
    lines += [
        line.strip()
        for line in (instruction.old + "\n" + instruction.new).splitlines()
        if len(line.strip()) >= 8
    ]
    return any(line in seen for line in lines)


# -- the model's judgement ------------------------------------------------------------------------


class _Ruling(BaseModel):
    id: str
    behaviour: Literal["unchanged", "changed"]
    exercised_by: list[str] = Field(default_factory=list)
    rationale: str = ""


class _Rulings(BaseModel):
    instructions: list[_Ruling] = Field(default_factory=list)


def _calls(golden: Golden) -> str:
    calls = [
        f"{s.name}({json.dumps(s.arguments, ensure_ascii=False)[:80]}) -> {_short(str(s.result), 160)!r}"
        for s in golden.steps
    ]
    return ", ".join(calls) or "none"


def _ask(
    llm: LLMClient,
    model: str,
    body: str,
    asked: Sequence[Instruction],
    runs: Sequence[tuple[Golden, ReplayRun | None]],
) -> tuple[dict[str, _Ruling], dict[str, Any]]:
    changes = "\n".join(
        f"- {i.id} ({i.path}, {i.kind}) was: {_short(i.old, 400)!r} | now: {_short(i.new, 400)!r}"
        for i in asked
    )
    shown_runs = "\n".join(
        f"- {g.id}: task {_short(g.task, 200)!r}; tool calls: {_calls(g)}; "
        f"answer: {_short(g.answer, SHOWN)!r}"
        for g, _ in runs
    )
    prompt = render("replay_coverage", skill=body[:6000], changes=changes, runs=shown_runs)
    digest = hashlib.sha256(prompt.encode()).hexdigest()
    reply, calls = llm.complete_json(
        "judge", [{"role": "user", "content": prompt}], _Rulings, model=model, temperature=0
    )
    costs = [c.cost_usd for c in calls if not c.from_cassette]
    usage = {
        "model": model,
        "prompt_digest": digest,
        "tokens_in": sum(c.tokens_in for c in calls),
        "tokens_out": sum(c.tokens_out for c in calls),
        "cost_usd": None if any(c is None for c in costs) else round(sum(costs), 8),  # type: ignore[arg-type]
        "from_cassette": all(c.from_cassette for c in calls),
    }
    return {r.id: r for r in reply.instructions}, usage


def coverage(
    skill: str,
    champion: Mapping[str, bytes],
    candidate: Mapping[str, bytes],
    runs: Sequence[tuple[Golden, ReplayRun | None]],
    llm: LLMClient,
    judge: tuple[str, str] | None,
    executed: frozenset[str] = frozenset({"execute"}),
    controls: Mapping[str, Sequence[ReplayRun]] | None = None,
) -> dict[str, Any]:
    """The cell's `coverage` block: every altered instruction, what it changes besides wording
    (model-free), the goldens that were served it and whose replays showed it, the model's
    ruling where one was needed, and its status. `judge` is (tier, model) of the strongest judge
    tier, None when no tier is configured; `controls` the unchanged champion's replays of each
    golden (by id)."""
    controls = controls or {}
    instructions = changed_instructions(skill, champion, candidate)
    texts = {p: t for p in candidate if (t := _text_of(p, candidate[p], skill))} | {
        p: t for p in champion if p not in candidate and (t := _text_of(p, champion[p], skill))
    }
    entries = []
    for instruction in instructions:
        served_to = [g.id for g, r in runs if served(instruction, g, r, texts)]
        entries.append(
            {
                "id": instruction.id,
                "path": instruction.path,
                "kind": instruction.kind,
                "old": instruction.old,
                "new": instruction.new,
                "label": instruction.label,
                "differences": list(differences(instruction.old, instruction.new)),
                "served_to": served_to,
                "shown_by": [g.id for g, r in runs if shown(instruction, g, r, executed)],
                "model": None,
            }
        )
    for entry in entries:  # the only altered instruction a run was served made its difference
        for golden, replay in runs:
            others = [e for e in entries if e is not entry and golden.id in e["served_to"]]
            unshown = golden.id in entry["served_to"] and golden.id not in entry["shown_by"]
            if unshown and not others and alone(golden, replay, controls.get(golden.id, ())):
                entry["shown_by"].append(golden.id)
    undecided = [
        i for i, e in zip(instructions, entries, strict=True) if e["served_to"] and not e["shown_by"]
    ]
    decision = None
    if undecided and judge is None:
        decision = {
            "tier": None,
            "model": None,
            "skipped": "no judge tier is configured (JUDGE_L1/L2/L3_MODEL)",
        }
    elif undecided:
        tier, model = judge
        served_runs = [(g, r) for g, r in runs if any(g.id in e["served_to"] for e in entries)]
        body = texts.get("SKILL.md", "")
        try:
            rulings, usage = _ask(llm, model, body, undecided[:MAX_ASKED], served_runs)
            decision = {"tier": tier, **usage}
        except BudgetExceeded:
            raise
        except IngotError as exc:
            rulings, decision = (
                {},
                {"tier": tier, "model": model, "skipped": f"the coverage judge failed: {exc}"},
            )
        for entry in entries:
            ruling = rulings.get(entry["id"])
            if ruling is not None and entry["served_to"] and not entry["shown_by"]:
                entry["model"] = {
                    "tier": tier,
                    "model": model,
                    "prompt_digest": decision.get("prompt_digest"),
                    "behaviour": ruling.behaviour,
                    "exercised_by": [g for g in ruling.exercised_by if g in entry["served_to"]],
                    "rationale": ruling.rationale,
                }
    for entry in entries:
        entry["status"], entry["why"] = instruction_status(entry)
    return {
        "status": "measured",
        "instructions": entries,
        "goldens": [g.id for g, _ in runs],
        "decision": decision,
    }
