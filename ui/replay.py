"""What the UI shows of regression replay: the review card's replay cell and the Traces page.

Parsed once from an evidence bundle's `replay` cell, the trace store and the goldens store into
typed records. As everywhere in the UI, a value that was not measured stays None and the page
shows it as missing. Text from a model's error (a judge that failed) is made readable here: the
request it echoes is left out, never shown as raw JSON; a run no judge settled is "undecided",
never "decided"; and judging that failed claims no saving. What an approval needs (nothing, a
reason, an override) comes from `replay_rule.replay_rule`, the rule `ChangeControl.approve` enforces.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ingot.errors import IngotError
from optimize.control.replay_rule import FINDING_OF, STATE_OF, replay_rule
from optimize.measure.goldens import Stored
from optimize.measure.replay_verdict import said_rulings
from optimize.models.traces import TraceRecord


def _num(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


# A model request (or a reply quoting it) echoed inside an error: JSON with its keys in quotes.
_PAYLOAD = re.compile(r"""["'](model|messages|role|content|temperature|error)["']\s*:""")


def readable(text: str) -> str:
    """`text` as a person reads it: an echoed model request or error payload (JSON, with its
    literal `\\n`) is left out, and what stays is one line."""
    while (match := _PAYLOAD.search(text)) is not None:
        start = text.rfind("{", 0, match.start())
        if start < 0:
            break
        end = text.rfind("}")
        end = end + 1 if end > match.start() else len(text)
        text = f"{text[:start].rstrip(' :-')} (the model's request and reply are left out){text[end:]}"
    return " ".join(text.replace("\\n", " ").split())


@dataclass(frozen=True)
class GoldenResult:
    id: str
    task: str
    verdict: str  # PASS | WARN | BLOCK: the record's word (CSS classes key on it); never shown
    tier: str  # where it was decided: L0..L3
    why: str
    ruling: str  # passes | world moved | held | regressed | stale (`ingot replay`: the world moved)
    usd: float | None
    criteria_status: str
    controls: str  # e.g. "0 of 2 failed"
    cited: str  # the cited step, readable
    judges_failed: int = 0  # judge calls that were configured and did not answer

    @property
    def finding(self) -> str:
        """What became of this blessed run: held, undecided or regressed."""
        return FINDING_OF.get(self.verdict, "unreadable")

    @property
    def level(self) -> str:
        """Where it was settled, in the same words as its finding: a run no judge settled is
        undecided at the level it reached, never "decided" there."""
        if self.verdict in ("PASS", "BLOCK"):
            return f"decided at {self.tier}" + (" (without a model)" if self.tier == "L0" else "")
        if self.judges_failed:
            return f"undecided: {self.judges_failed} judge call(s) failed (reached {self.tier})"
        return f"undecided at {self.tier}"


@dataclass(frozen=True)
class DriftView:
    golden: str
    label: str
    old: str
    new: str | None
    source: str
    corroboration: str
    ruling: str


@dataclass(frozen=True)
class TierCost:
    tier: str
    model: str | None
    calls: int
    usd: float | None


@dataclass(frozen=True)
class ReplayView:
    measured: bool
    why: str | None  # why it was not measured
    verdict: str | None = None  # the record's word; the card shows `state`
    needs: str | None = None  # None | "reason" | "override"
    reasons: tuple[str, ...] = ()
    rationale: str = ""
    rationale_by: str = ""
    goldens: tuple[GoldenResult, ...] = ()
    noise_pass_rate: float | None = None
    noise_controls: int | None = None
    noise_failed: int | None = None
    noise_why: str | None = None  # why the noise floor was not measured
    drift: tuple[DriftView, ...] = ()
    total_usd: float | None = None
    serving_usd: float | None = None
    tiers: tuple[TierCost, ...] = ()
    all_strongest_usd: float | None = None
    judging_usd: float | None = None
    saving: float | None = None  # None when judging failed: nothing was saved
    judging_failed: int = 0  # judge calls that were configured and did not answer, over every run
    rulings: tuple[str, ...] = ()  # each model ruling the verdict rests on, with its prompt digest

    @property
    def state(self) -> str | None:
        """The replay cell in the passport's words: pass, missing (could not decide) or fail."""
        return STATE_OF.get(self.verdict or "", None) if self.verdict else None


def replay_view(evidence: Mapping[str, Any]) -> ReplayView:
    """The replay cell of `evidence` (a parsed evidence.json), for the review card."""
    rule = replay_rule(evidence)
    blocks = evidence.get("measurements") if isinstance(evidence.get("measurements"), Mapping) else {}
    cell = blocks.get("replay")
    if not isinstance(cell, Mapping) or cell.get("status") != "measured":
        why = cell.get("why") if isinstance(cell, Mapping) else "not in the evidence bundle"
        return ReplayView(False, str(why or "no reason given"))
    noise = cell.get("noise_floor") if isinstance(cell.get("noise_floor"), Mapping) else {}
    cost = cell.get("cost") if isinstance(cell.get("cost"), Mapping) else {}
    counter = cell.get("counterfactual") if isinstance(cell.get("counterfactual"), Mapping) else {}
    tiers = cell.get("tiers") if isinstance(cell.get("tiers"), Mapping) else {}
    judging = cost.get("judging") if isinstance(cost.get("judging"), Mapping) else {}
    by = cell.get("rationale_by") if isinstance(cell.get("rationale_by"), Mapping) else {}
    goldens = tuple(_golden(g) for g in cell.get("goldens") or () if isinstance(g, Mapping))
    failed = sum(g.judges_failed for g in goldens)
    rationale = readable(_text(cell.get("rationale")))
    if any(g.verdict not in ("PASS", "BLOCK") for g in goldens):  # said of runs no model settled
        unsettled = "not settled: no model decided them (L0 findings only)"
        rationale = rationale.replace("decided without a model (L0)", unsettled)
    return ReplayView(
        measured=True,
        why=None,
        verdict=rule.verdict,
        needs=rule.needs,
        reasons=rule.reasons,
        rationale=rationale,
        rationale_by=f"{by.get('tier')} ({by.get('model') or 'no model'})" if by else "",
        goldens=goldens,
        noise_pass_rate=_num(noise.get("pass_rate")) if noise.get("status") == "measured" else None,
        noise_controls=noise.get("controls") if isinstance(noise.get("controls"), int) else None,
        noise_failed=noise.get("failed") if isinstance(noise.get("failed"), int) else None,
        noise_why=None if noise.get("status") == "measured" else str(noise.get("why") or "not recorded"),
        drift=tuple(_drift(d) for d in cell.get("drift") or () if isinstance(d, Mapping)),
        total_usd=_num(cost.get("usd")),
        serving_usd=_num((cost.get("serving") or {}).get("usd"))
        if isinstance(cost.get("serving"), Mapping)
        else None,
        tiers=tuple(
            TierCost(t, tiers.get(t), int(b.get("calls") or 0), _num(b.get("usd")))
            for t, b in judging.items()
            if isinstance(b, Mapping)
        ),
        all_strongest_usd=_num(counter.get("all_strongest_usd")),
        judging_usd=_num(counter.get("judging_usd")),
        saving=None if failed else _num(counter.get("saving")),
        judging_failed=failed,
        rulings=tuple(readable(r) for r in said_rulings(cell)),
    )


def _golden(entry: Mapping[str, Any]) -> GoldenResult:
    controls = [c for c in entry.get("controls") or () if isinstance(c, Mapping)]
    failed = sum(c.get("verdict") != "pass" for c in controls)
    cited = entry.get("cited") if isinstance(entry.get("cited"), Mapping) else None
    decisions = [d for d in entry.get("decisions") or () if isinstance(d, Mapping)]
    failed = sum(1 for d in decisions if d.get("model") and d.get("verdict") == "skipped")
    return GoldenResult(
        id=_text(entry.get("id")),
        task=_text(entry.get("task")),
        verdict=_text(entry.get("verdict")) or "?",
        tier=_text(entry.get("tier")) or "?",
        why=readable(_text(entry.get("why"))),
        ruling=_text(entry.get("ruling")),
        usd=_num(entry.get("usd")),
        criteria_status=_text(entry.get("criteria_status")),
        controls=f"{failed} of {len(controls)} failed" if controls else "no controls",
        cited=f"{cited.get('run')} step {cited.get('step')}: {cited.get('quote')}" if cited else "",
        judges_failed=failed,
    )


def _drift(card: Mapping[str, Any]) -> DriftView:
    return DriftView(
        _text(card.get("golden")),
        _text(card.get("label")),
        _text(card.get("old")),
        card.get("new") if isinstance(card.get("new"), str) else None,
        _text(card.get("source")),
        _text(card.get("corroboration")),
        _text(card.get("ruling")),
    )


# -- the Traces page --------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceRow:
    id: str
    time: str
    skill: str | None
    revision: str | None
    harness: str | None
    task: str
    answer: str
    blessable: str | None  # None: it can be blessed; else why not
    golden: str | None  # the golden made from it, if any


@dataclass(frozen=True)
class GoldenRow:
    id: str
    skill: str
    revision: str
    task: str
    state: str
    status: str  # none | teacher-drafted | human-approved
    approved_by: str | None
    criteria: tuple[str, ...]
    facts: tuple[str, ...]  # "step | label | value | quote…", as the edit box takes them
    notes: tuple[str, ...]
    retired: str | None


def trace_rows(records: Sequence[TraceRecord], goldens: Sequence[Stored], limit: int = 200) -> list[TraceRow]:
    """Newest first, with whether each can be blessed and the golden already made from it."""
    made = {str(s.golden.source.get("trace")): s.id for s in goldens}
    rows = []
    for record in list(reversed(records))[:limit]:
        if record.route not in ("match", "related") or not record.skill:
            why = "not served by a skill"
        elif not record.answer or record.tool_calls:
            why = "an intermediate call (it asked for tools)"
        elif not record.messages:
            why = "no transcript (recorded before Ingot kept one)"
        elif record.errors:
            why = "the run failed"
        else:
            why = None
        rows.append(
            TraceRow(
                record.id,
                record.time,
                record.skill,
                record.revision,
                record.harness,
                record.task[:200],
                (record.answer or "")[:300],
                why,
                made.get(record.id),
            )
        )
    return rows


def golden_rows(goldens: Sequence[Stored]) -> list[GoldenRow]:
    rows = []
    for stored in goldens:
        golden, review = stored.golden, stored.review
        retired = (
            f"retired by {review.retired_by}: {review.retired_reason}" if review.state == "retired" else None
        )
        rows.append(
            GoldenRow(
                stored.id,
                golden.skill,
                golden.revision,
                golden.task[:200],
                review.state,
                review.status,
                review.approved_by,
                tuple(c.text for c in review.criteria),
                tuple(fact_line(f.step, f.label, f.value, *f.quotes) for f in review.facts),
                review.notes,
                retired,
            )
        )
    return rows


_ESCAPES = {"\\": "\\", "|": "|", "n": "\n"}


def fact_line(step: int, *fields: str) -> str:
    """One world fact as the edit box shows it: `step | label | value | quote | quote…`, with
    `\\`, `\\|` and `\\n` standing for a backslash, a bar and a line break inside a field."""
    escaped = (f.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "\\n") for f in fields)
    return " | ".join((str(step), *escaped))


def _fields(line: str) -> list[str]:
    """A line split at its unescaped bars, escapes undone (`fact_line` reversed)."""
    fields, current, chars = [], [], iter(line)
    for char in chars:
        if char == "|":
            fields.append("".join(current))
            current = []
        elif char == "\\":
            following = next(chars, "")
            current.append(_ESCAPES.get(following, char + following))
        else:
            current.append(char)
    return [f.strip() for f in (*fields, "".join(current))]


def parse_facts(text: str) -> list[dict[str, Any]]:
    """World facts typed in the edit box: one `step | label | value` per line, then optionally
    the passages of the answer that state it (`| quote | quote…`)."""
    facts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = _fields(line)
        if len(parts) < 3 or not parts[0].isdigit():
            raise IngotError(
                f"world fact line {number}: write it as `step | label | value`, then any quotes of the "
                "answer that state it as `| quote` (e.g. `1 | EUR/USD rate | 1.0842 | at 1.0842`)"
            )
        quotes = [q for q in parts[3:] if q]
        facts.append({"step": int(parts[0]), "label": parts[1], "value": parts[2], "quotes": quotes})
    return facts
