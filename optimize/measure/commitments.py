"""What a golden's answer committed to, found without a model, and which of it a replay lost.

A commitment is what a reworded answer must still say: each passage (a line or sentence) of the
answer, and inside it every number (identifiers with digits too), unit or currency, clock time
or time zone, decision (go / no-go, approve / reject), value a tool returned in the run (a
fact), format word, comparative (under / over, at least / at most, before / after, more /
fewer than: one canonical relation each) and quantifier (each / every / all, only, none), who
receives or owns something (recipients, owners: relations.py), and whether it is negated
("never", "unless", "without", "blameless"); and the answer's shape (JSON, a table, bullets,
numbered steps). Everything else is wording: "below 1000" keeps "under 1000", and a recipient
is kept wherever its words are in the passage carrying it ("the engineer on call" keeps "the
on-call engineer").
Each golden passage is aligned with the replay passages that carry at least half of its content
words; a commitment is kept when one of them states it (a moved world fact at its value now).
What it cannot do: tell a synonym from a change of meaning ("major" -> "minor" is wording to
it), know a negation it has no word for, or judge whether a difference matters. So a lost
commitment never decides a verdict alone: it keeps the cheap screen from passing the replay and
is handed to L2 and L3 (cascade.py) with the golden passage it came from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optimize.measure.passages import (
    STOP,
    content,
    negated,
    number,
    passages,
    shape,
    states_a_rule,
    strings,
    tokens,
    words,
)
from optimize.measure.relations import comparatives, parties, party_words, quantifiers

CARRIED = 0.5  # share of a golden passage's content words a replay passage must have to carry it
SHOWN = 40  # commitments listed to a judge (missing ones first)

POSITIVE = words("go yes approve approved allow allowed permit permitted proceed accept accepted safe ship")
NEGATIVE = words(
    "no-go nogo reject rejected deny denied block blocked stop halt refuse refused unsafe decline declined"
)
FORMATS = {
    **dict.fromkeys(("json",), "json"),
    **dict.fromkeys(("yaml", "yml"), "yaml"),
    **dict.fromkeys(("csv",), "csv"),
    **dict.fromkeys(("table", "tables", "tabular"), "table"),
    **dict.fromkeys(("bullet", "bullets", "bulleted"), "bullets"),
    **dict.fromkeys(("numbered",), "numbered"),
    **dict.fromkeys(("template",), "template"),
    **dict.fromkeys(("heading", "headings", "header", "headers"), "heading"),
    **dict.fromkeys(("column", "columns"), "column"),
    **dict.fromkeys(("markdown",), "markdown"),
}
UNITS = {
    **dict.fromkeys(("cent", "cents"), "cent"),
    **dict.fromkeys(("euro", "euros", "eur", "€"), "eur"),
    **dict.fromkeys(("dollar", "dollars", "usd", "$"), "usd"),
    **dict.fromkeys(("gbp", "£", "pound", "pounds"), "gbp"),
    **dict.fromkeys(("jpy", "¥", "yen"), "jpy"),
    **dict.fromkeys(("%", "percent", "pct"), "%"),
    **dict.fromkeys(("ms", "millisecond", "milliseconds"), "ms"),
    **dict.fromkeys(("second", "seconds", "sec", "secs"), "second"),
    **dict.fromkeys(("minute", "minutes", "mins"), "minute"),
    **dict.fromkeys(("hour", "hours", "hrs"), "hour"),
    **dict.fromkeys(("day", "days"), "day"),
    **dict.fromkeys(("week", "weeks"), "week"),
    **dict.fromkeys(("month", "months"), "month"),
    **dict.fromkeys(("year", "years"), "year"),
    **dict.fromkeys(("kb", "mb", "gb", "tb", "byte", "bytes"), "bytes"),
    **dict.fromkeys(
        ("km", "kilometre", "kilometres", "kilometer", "kilometers", "mile", "miles"), "distance"
    ),
    **dict.fromkeys(("kg", "kilogram", "kilograms", "lb", "lbs"), "mass"),
}
AFTER_A_NUMBER = {"s": "second", "m": "minute", "h": "hour", "min": "minute", "hr": "hour", "d": "day"}
CURRENCIES = words("EUR USD GBP JPY CHF CNY CAD AUD NZD SEK NOK DKK PLN CZK HUF INR BRL MXN ZAR")
ZONES = words(
    "UTC GMT CET CEST EET EEST WET WEST BST IST EST EDT CST "
    "CDT MST MDT PST PDT AKST HST JST KST AEST AEDT NZST NZDT"
)
_SIGN_UNIT = {"$": "usd", "€": "eur", "£": "gbp", "¥": "jpy"}


@dataclass(frozen=True)
class Commitment:
    id: str  # k1, k2, ... in the golden answer's order
    kind: str  # shape | passage | number | unit | zone | decision | fact | format | negation
    # | comparative | quantifier | recipient | owner
    value: str  # canonical ("1000", "eur", "utc", "negated", "a bulleted list")
    text: str  # as the golden says it
    passage: int  # 0: the whole answer (its shape)
    quote: str  # the golden passage it is in, exactly as written


@dataclass(frozen=True)
class Comparison:
    """The golden's commitments and which of them the replay lost (`missing`)."""

    commitments: tuple[Commitment, ...]
    missing: tuple[Commitment, ...]
    where: Mapping[int, str] = field(default_factory=dict)  # golden passage -> replay passage carrying it

    @property
    def lost(self) -> bool:
        return bool(self.missing)

    def labels(self) -> list[str]:
        """One line per missing commitment, as L0's decision records it."""
        return [f"{c.id}: {c.kind} {c.text!r} missing (golden: {c.quote[:80]!r})" for c in self.missing]

    def text(self) -> str:
        """The commitments as every judge tier reads them (missing ones first)."""
        missing = {c.id for c in self.missing}
        shown = [c for c in self.commitments if c.id in missing]
        shown += [
            c
            for c in self.commitments
            if c.id not in missing and c.kind not in ("passage",) and c.value != "affirmative"
        ]
        lines = []
        for c in shown[:SHOWN]:
            if c.id in missing:
                carried = self.where.get(c.passage)
                status = (
                    f"MISSING from {carried[:100]!r}" if carried else "MISSING (no replay passage carries it)"
                )
            else:
                status = f"kept in {self.where.get(c.passage, '(the answer)')[:100]!r}"
            what = c.text if c.kind != "passage" else "the whole passage"
            lines.append(f"- {c.id} [{c.kind}] {what} | golden: {c.quote[:120]!r} | {status}")
        if len(shown) > SHOWN:
            lines.append(f"- ... {len(shown) - SHOWN} more not shown")
        return "\n".join(lines) or "(none found)"


def stated(text: str, facts: frozenset[str]) -> list[tuple[str, str, str]]:
    """(kind, canonical value, text) of each commitment stated in one passage."""
    found: list[tuple[str, str, str]] = []
    words = tokens(text)
    for i, token in enumerate(words):
        low = token.casefold()
        value = number(token)
        if value is not None:
            found.append(("number", value, token))
            if token[0] in _SIGN_UNIT:
                found.append(("unit", _SIGN_UNIT[token[0]], token))
            if token.endswith("%"):
                found.append(("unit", "%", token))
            nxt = words[i + 1].casefold() if i + 1 < len(words) else ""
            if nxt in AFTER_A_NUMBER:
                found.append(("unit", AFTER_A_NUMBER[nxt], words[i + 1]))
            continue
        if any(ch.isdigit() for ch in token):
            found.append(("number", low, token))
        elif token in ZONES:
            found.append(("zone", low, token))
        elif token in CURRENCIES:
            found.append(("unit", UNITS.get(low, low), token))
        elif low in UNITS and low not in ("eur", "usd", "gbp", "jpy"):
            found.append(("unit", UNITS[low], token))
        elif low == "local" and i + 1 < len(words) and words[i + 1].casefold() == "time":
            found.append(("zone", "local time", "local time"))
        elif low in NEGATIVE:
            found.append(("decision", "no-go", token))
        elif low in POSITIVE:
            found.append(("decision", "go", token))
        elif low in FORMATS:
            found.append(("format", FORMATS[low], token))
        elif low in facts and low not in STOP:
            found.append(("fact", low, token))
    found += [("comparative", value, said) for value, said in comparatives(text)]
    found += [("quantifier", value, said) for value, said in quantifiers(text)]
    found += parties(text)
    unique: dict[tuple[str, str], tuple[str, str, str]] = {}
    for item in found:
        unique.setdefault(item[:2], item)
    return list(unique.values())


def fact_values(results: Iterable[str], values: Iterable[str] = ()) -> frozenset[str]:
    """The words a run's tools returned as values (after `key:` / `key =`, JSON leaves, anything
    with a digit), lowercased: an answer stating one states a fact."""
    found: set[str] = set()

    def add(text: str) -> None:
        for token in tokens(text):
            if len(token) > 1 and token.casefold() not in STOP:
                found.add(number(token) or token.casefold())

    for result in results:
        try:
            data = json.loads(result)
        except ValueError:
            data = None
        if isinstance(data, dict | list):
            for leaf in strings(data):
                add(leaf.split(": ", 1)[-1])
            continue
        for match in re.finditer(r"[\w .-]{1,30}?[:=]\s*([^,;)\n]+)", result):
            add(match.group(1))
        for token in tokens(result):
            if any(ch.isdigit() for ch in token):
                add(token)
    for value in values:
        add(value)
    return frozenset(found)


# -- comparing ------------------------------------------------------------------------------------


def commitments_of(answer: str, facts: frozenset[str] = frozenset()) -> list[Commitment]:
    """Everything `answer` commits to, numbered in its order (its shape first)."""
    found: list[Commitment] = []

    def add(kind: str, value: str, text: str, passage: int, quote: str) -> None:
        found.append(Commitment(f"k{len(found) + 1}", kind, value, text, passage, quote))

    form = shape(answer)
    if form:
        first = answer.strip().splitlines()[0].strip() if answer.strip() else ""
        add("shape", form, form, 0, first)
    for passage in passages(answer):
        add("passage", passage.text.casefold(), passage.text, passage.index, passage.quote)
        for kind, value, text in stated(passage.text, facts):
            add(kind, value, text, passage.index, passage.quote)
        polarity = "negated" if negated(passage.text) else "affirmative"
        add("negation", polarity, polarity, passage.index, passage.quote)
    return found


def compare(
    answer: str,
    replay: str,
    facts: frozenset[str] = frozenset(),
    moved: Mapping[str, str] | None = None,
) -> Comparison:
    """Which of `answer`'s commitments `replay` lost. `moved` maps a world fact's recorded value
    to its value now: either one keeps the commitment, except in a passage that states a rule
    ("go only when the status is green"), which only its recorded value keeps."""
    moved = {number(k) or k.casefold(): number(v) or v.casefold() for k, v in (moved or {}).items()}
    golden = {p.index: p for p in passages(answer)}
    theirs = passages(replay)
    said = {p.index: _said(p.text, facts) for p in theirs}
    carriers: dict[int, list[int]] = {}
    where: dict[int, str] = {}
    for index, passage in golden.items():
        mine = content(passage.text)
        scored = sorted(
            ((len(mine & content(p.text)) / max(1, len(mine)), -p.index, p.index) for p in theirs),
            reverse=True,
        )
        carriers[index] = [i for score, _, i in scored if score >= CARRIED]
        if carriers[index]:
            where[index] = next(p.text for p in theirs if p.index == carriers[index][0])
    everywhere = set().union(*said.values()) if said else set()
    commitments = commitments_of(answer, facts)
    missing = []
    for c in commitments:
        if c.kind == "shape":
            kept = shape(replay) == c.value
        elif c.kind == "passage":
            kept = bool(carriers.get(c.passage))
        else:
            pool = [said[i] for i in carriers.get(c.passage, ())] or [everywhere]
            wanted = {(c.kind, c.value)}
            if not states_a_rule(c.quote):  # a rule keeps its recorded value whatever the world does
                wanted.add((c.kind, moved.get(c.value, c.value)))
            if c.kind == "negation" and c.value == "affirmative":
                kept = not carriers.get(c.passage) or any(("negation", "negated") not in s for s in pool)
            elif c.kind in ("recipient", "owner") and c.value != "owner":
                kept = any(all(("word", w) in s for w in c.value.split()) for s in pool)
            else:
                kept = any(wanted & s for s in pool)
        if not kept:
            missing.append(c)
    return Comparison(tuple(commitments), tuple(missing), where)


def _said(text: str, facts: frozenset[str]) -> set[tuple[str, str]]:
    said = {(kind, value) for kind, value, _ in stated(text, facts)}
    if negated(text):
        said.add(("negation", "negated"))
    said |= {("word", w) for w in party_words(text)}  # where a recipient's or owner's words are
    # A number stated as a fact (or a fact that is a number) is the same statement.
    said |= {("fact", v) for k, v in list(said) if k == "number"}
    said |= {("number", v) for k, v in list(said) if k == "fact"}
    return said


def answer_facts(steps: Sequence[Any], values: Iterable[str] = ()) -> frozenset[str]:
    """`fact_values` of a run's tool results (objects with `.result`) and its review's facts."""
    return fact_values((str(s.result) for s in steps), values)
