"""World values by provenance: which values of a golden's answer a recorded tool call supplied,
and which of them the world has moved since. No model decides any of it.

A value the answer states (a number, an identifier with digits, a word a tool returned as a
value: `status: green`, a JSON leaf) is supplied by a tool call when it stands, as a whole word
or number, in that call's recorded result and not in the task or the call's own arguments (what
the user or the model said first). Every such value is tracked to its call, listed as a world
fact or not. When a replay's answer to that call differs from the recording, the value has moved
by construction: a read-only world tool observed live (the `World` every replay of the
evaluation shares), or, for the live revision replayed alone at the recorded bytes, a sandbox or
workspace tool (its bytes did not change, so only its surroundings can have). Answers replayed
from the recording never move. Not tracked: a value of one character (a one-digit count), which
L0 holds as any number; whether a move explains its loss is the recorded-world replay's call
(regress.py). `value_cards` says from what to what, with the call.
Where a moved value goes in the golden's answer (level0.Expected): only into passages that
restate it (`restating`), never into one that states a rule or condition (`states_a_rule`:
"only when", "unless", "if ... then", "page if p99 > 95 ms"), nor where the skill's own words put
it: a rule is the skill's, not the world's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optimize.measure.commitments import fact_values
from optimize.measure.drift import DriftCard, World, corroborate, locate
from optimize.measure.goldens import Golden, Review, Step, call_key, quote_spans, value_spans
from optimize.measure.passages import number, passages, states_a_rule, tokens
from optimize.measure.replay import ReplayRun, ReplayStep

# Replay steps whose answers come from the replayed revision's own bytes.
OWN_BYTES = frozenset({"sandbox", "workspace"})


def rule_spans(answer: str) -> list[tuple[int, int]]:
    """Where in `answer` the passages that state a rule are."""
    return [span for p in passages(answer) if states_a_rule(p.text) for span in quote_spans(answer, p.quote)]


def _joined(text: str) -> str:
    return f" {' '.join(tokens(text)).casefold()} "


def restating(answer: str, value: str, skill_text: str = "") -> tuple[str, ...]:
    """The passages of `answer` (exact quotes) that restate `value`: they hold it as a whole word
    or number, state no rule, and do not hold it between the same neighbours as the skill's text
    does (then the skill said it, as in "quote the SLO of 95 ms")."""
    skill = _joined(skill_text)
    found = []
    for passage in passages(answer):
        if states_a_rule(passage.text) or not value_spans(passage.quote, value):
            continue
        said = tokens(passage.text)
        around = [" ".join(said[max(0, i - 1) : i + 2]).casefold() for i, t in enumerate(said) if t == value]
        if around and all(f" {a} " in skill for a in around):
            continue
        found.append(passage.quote)
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class Supplied:
    """A value of the golden's answer that recorded tool call `step` supplied. `recorded` is how
    the call's result writes it (case may differ from the answer's); `quotes` are the passages
    restating it, where a moved value is put (level0.Expected), as a world fact's quotes are."""

    id: str  # v1, v2, ...
    value: str
    recorded: str
    step: int
    tool: str
    arguments: Any
    quotes: tuple[str, ...]


def _files_text(files: Mapping[str, bytes]) -> str:
    texts = []
    for data in files.values():
        try:
            texts.append(data.decode("utf-8"))
        except UnicodeDecodeError:
            continue
    return "\n".join(texts)


def supplied(golden: Golden, recorded_files: Mapping[str, bytes] | None = None) -> tuple[Supplied, ...]:
    """Every value of `golden`'s answer a recorded tool result supplied, per call."""
    skill_text = _files_text(recorded_files or {})
    said_tokens = list(dict.fromkeys(tokens(golden.answer)))
    found: list[Supplied] = []
    for step in golden.steps:
        values = fact_values([step.result])
        said_first = f"{golden.task} {json.dumps(step.arguments, ensure_ascii=False)}"
        for token in said_tokens:
            if len(token) < 2 or (number(token) or token.casefold()) not in values:
                continue
            recorded = _as_recorded(step.result, token)
            if recorded is None or _as_recorded(said_first, token) is not None:
                continue
            quotes = restating(golden.answer, token, skill_text)
            found.append(
                Supplied(f"v{len(found) + 1}", token, recorded, step.index, step.name, step.arguments, quotes)
            )
    return tuple(found)


def _as_recorded(text: str, value: str) -> str | None:
    """`value` as `text` writes it (a whole word or number, case aside), or None."""
    if value_spans(text, value):
        return value
    for match in re.finditer(re.escape(value), text, re.I):
        if value_spans(text, match.group(0)):
            return match.group(0)
    return None


def value_now(old_result: str, value: str, new_result: str) -> str | None:
    """What stands where `value` stood: a JSON leaf at the same path; else, when both answers
    have the same words in number (the same shape), the word at its position; else drift.locate."""
    try:
        json.loads(old_result)
        json.loads(new_result)
    except ValueError:
        pass
    else:
        return locate(old_result, value, new_result)
    old, new = tokens(old_result), tokens(new_result)
    if len(old) == len(new) and value in old:
        return new[old.index(value)]
    return locate(old_result, value, new_result)


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def _answered(run: ReplayRun, step: Step) -> ReplayStep | None:
    """The replay step answering the golden's `step`: matched to it, else the same call."""
    key = call_key(step.name, step.arguments)
    return next((r for r in run.steps if r.matched == step.index), None) or next(
        (r for r in run.steps if r.matched is None and call_key(r.name, r.arguments) == key), None
    )


@dataclass(frozen=True)
class Answer:
    """A replay's answer to a recorded call, and where it came from."""

    text: str
    source: str
    observed: bool  # a world tool observed live (a second call can corroborate it)


def answer_now(step: Step, world: World, run: ReplayRun | None, at_recorded_bytes: bool) -> Answer | None:
    """What the replays got for `step` when it is not the recording (None: the recording)."""
    if world.covers(step.name):
        now = world.observe(step.name, step.arguments)
        return Answer(now.value, now.source, True) if now is not None else None
    if run is None or not at_recorded_bytes:
        return None
    replayed = _answered(run, step)
    if replayed is None or replayed.source not in OWN_BYTES:
        return None
    return Answer(replayed.result, f"{replayed.source}, at the recorded revision's bytes", False)


def moved_calls(golden: Golden, world: World, run: ReplayRun | None = None) -> list[dict[str, Any]]:
    """The recorded calls the replays got another answer for: the world moved under them.
    `run`: the live revision replayed alone (its sandbox and workspace answers count when its
    bytes are the recorded ones)."""
    at_recorded = run is not None and run.revision == golden.revision
    moved = []
    for step in golden.steps:
        now = answer_now(step, world, run, at_recorded)
        if now is not None and not _same(now.text, step.result):
            moved.append(
                {"step": step.index, "tool": step.name, "arguments": step.arguments, "source": now.source}
            )
    return moved


def value_cards(
    golden: Golden,
    values: Sequence[Supplied],
    review: Review,
    world: World,
    run: ReplayRun | None = None,
) -> list[DriftCard]:
    """A drift card for every supplied value (not a listed world fact: drift.drift_cards has
    those) whose call the replays got another answer for, and that reads differently in it."""
    listed = {(f.step, f.value) for f in review.facts}
    steps = {s.index: s for s in golden.steps}
    at_recorded = run is not None and run.revision == golden.revision
    cards = []
    for value in values:
        step = steps.get(value.step)
        if step is None or (value.step, value.recorded) in listed or (value.step, value.value) in listed:
            continue
        now = answer_now(step, world, run, at_recorded)
        if now is None or _same(now.text, step.result):
            continue
        new = value_now(step.result, value.recorded, now.text)
        if new == value.recorded:
            continue
        if now.observed:
            second = world.again(step.name, step.arguments)
            again = value_now(step.result, value.recorded, second.value) if second else None
            corroboration, ruling = corroborate(new, again, second is not None)
        else:
            corroboration = "the replayed bytes are the recorded ones: only the world can have changed it"
            ruling = "world moved"
        cards.append(
            DriftCard(
                golden.id,
                value.id,
                f"value from {step.name}",
                step.name,
                step.arguments,
                value.value,
                new,
                now.source,
                corroboration,
                ruling,
                step=step.index,
                listed=False,
            )
        )
    return cards
