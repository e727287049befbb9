"""What the review UI shows, as typed records read from change control and evidence bundles.

Evidence files are parsed here, once, into records the templates can trust. The one rule: a
value that was not measured stays `None` and the page shows it as missing; nothing here invents
a zero or a default. The gate verdict is recomputed under the current thresholds, and whether
approval would be refused is asked of change control itself (`ChangeControl.refusal`), so the page
and the server never disagree about a button.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ingot.errors import IngotError
from optimize.control import evidence as evidence_mod
from optimize.control.audit import AuditEntry
from optimize.control.autonomy import decide
from optimize.control.autopilot import change_passport, queued_at
from optimize.control.changes import ChangeControl
from optimize.control.gate import evaluate, p_clause
from optimize.control.passport import Cell, change_class
from optimize.control.pending import PendingChange
from optimize.control.status import Status
from ui import lifecycle
from ui.diffs import FileDiff, Risk, file_diffs, risk
from ui.lifecycle import Stage
from ui.queue import ScoreCard, ab_cards, age, routing_cards
from ui.replay import ReplayView, replay_view

# The cells each kind of change is measured by (measure/evaluate.py): shown as missing when absent.
EXPECTED = {
    "rewrite": ("ab", "routing_impact"),
    "description": ("routing_impact",),
    "create": ("checks", "routing_impact", "ab"),
}
ROUTING_METRICS = ("top1", "recall_at_3", "no_route_precision")


@dataclass(frozen=True)
class Header:
    pending: int
    drifted: tuple[str, ...]
    audit_ok: bool
    audit_lines: int
    audit_head: str
    audit_problem: str | None
    audit_bad_line: int | None


@dataclass(frozen=True)
class Measurement:
    name: str
    measured: bool
    why: str | None  # why it was not measured
    applicable: bool = True  # False: does not apply to this kind of change (and says why)


@dataclass(frozen=True)
class Case:
    id: str
    task: str
    champion: float | None
    challenger: float | None
    champion_pass: bool | None
    challenger_pass: bool | None
    champion_tokens: int | None
    challenger_tokens: int | None
    divergence: int | None  # first line where the two answers differ
    divergence_champion: str = ""  # that line in each answer
    divergence_challenger: str = ""
    pairwise: str | None = None  # win / tie / loss for the challenger, asked in both orders

    @property
    def delta(self) -> float | None:
        if self.champion is None or self.challenger is None:
            return None
        return self.challenger - self.champion


@dataclass(frozen=True)
class Metric:
    name: str
    champion: float | None
    challenger: float | None
    n: int | None = None  # routing cases the metric was measured on


@dataclass(frozen=True)
class Moved:
    """Routing impact on one other skill: tasks it gains and loses with the change."""

    skill: str
    gained: tuple[str, ...]
    lost: tuple[str, ...]


@dataclass(frozen=True)
class Statistic:
    name: str
    n: int | None
    statistic: float | None
    p: str  # "p < 0.001", "p = 0.125", or "p undefined"


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool | None
    detail: str


@dataclass(frozen=True)
class Search:
    """How the optimizer found the candidate (train-set means; never holdout evidence)."""

    seed_mean: float | None
    winner_mean: float | None
    candidates: int | None
    research: str | None  # web research status: off / fetched / cached / failed


@dataclass(frozen=True)
class Review:
    change: PendingChange
    verdict: str  # pass | blocked | insufficient
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]
    refusal: str | None  # why approval would be refused now; None: the button is live
    measurements: tuple[Measurement, ...]
    champion_mean: float | None
    challenger_mean: float | None
    samples: int | None
    cases: tuple[Case, ...]
    retention: float | None
    serving_model: str | None
    routing: tuple[Metric, ...]
    checks: tuple[Check, ...]
    search: Search | None
    cost_usd: float | None  # the optimize run's own cost
    champion_usd: float | None  # serving cost of each arm over the holdout
    challenger_usd: float | None
    evidence_id: str | None
    diffs: tuple[FileDiff, ...]
    pairwise: tuple[int, int, int] | None = None  # challenger wins, ties, losses
    statistics: tuple[Statistic, ...] = ()
    routing_cases: int | None = None  # routing cases and real tasks the impact was measured on
    traffic: int | None = None
    shadowed: tuple[str, ...] = ()  # "task (expects skill)" the change would take
    moved: tuple[Moved, ...] = ()
    provenance: tuple[str, ...] = ()  # models and endpoints, task-set origin (never keys)
    ledger: str | None = None  # the run's ledger, relative to the state home
    sampling: str | None = None  # "5 holdout items, 4 distinct"
    passport: tuple[Cell, ...] = ()
    passport_summary: str = ""
    lifecycle: tuple[Stage, ...] = ()
    autonomy: str | None = None  # what autonomy will do with it (level, countdown), or None
    goes_live_at: str | None = None  # a supervised change's window end (ISO, UTC): the countdown
    replay: ReplayView | None = None  # the regression replay cell
    risk: Risk | None = None  # the change's size and shape, from its bytes
    scorecards: tuple[ScoreCard, ScoreCard] | None = None  # None: no headline number measured
    age: str = ""  # how long it has waited

    @property
    def created(self) -> str:
        return self.change.created

    @property
    def refusal_extra(self) -> str | None:
        """The refusal, when it says more than the gate's reasons (a stale or tampered change):
        a blocked card states its reason once."""
        if self.refusal is None or any(r in self.refusal for r in self.reasons):
            return None
        return self.refusal

    @property
    def open_cells(self) -> tuple[Cell, ...]:
        """Passport cells a reviewer must read: measured (pass or fail) or stale."""
        return tuple(c for c in self.passport if c.state not in ("missing", "n/a"))

    @property
    def folded_cells(self) -> tuple[Cell, ...]:
        """Cells with no measurement behind them (missing or not applicable): folded away."""
        return tuple(c for c in self.passport if c.state in ("missing", "n/a"))

    @property
    def champion_tokens(self) -> int | None:
        return _total(c.champion_tokens for c in self.cases)

    @property
    def challenger_tokens(self) -> int | None:
        return _total(c.challenger_tokens for c in self.cases)


@dataclass(frozen=True)
class TimelineEntry:
    seq: int
    time: str
    action: str
    actor: str | None
    from_revision: str | None
    to_revision: str | None
    outcome: str | None
    reason: str | None
    evidence: str | None  # evidence bundle id, when the entry names one that exists
    change_id: str | None


def _num(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _mean(recorded: Any, scores: list[float | None]) -> float | None:
    """The recorded mean, else the mean of the per-case scores if every one was measured."""
    if _num(recorded) is not None:
        return _num(recorded)
    return sum(scores) / len(scores) if scores and all(s is not None for s in scores) else None  # type: ignore[misc]


def _total(values: Any) -> int | None:
    values = list(values)
    return sum(values) if values and all(v is not None for v in values) else None


def header(status: Status) -> Header:
    """The page header from one `ChangeControl.status()` (which re-reads every skills root: a
    request computes it once and shares it between the header and the page)."""
    audit = status.audit
    return Header(
        pending=status.pending,
        drifted=tuple(s.name for s in status.drifted),
        audit_ok=audit.ok,
        audit_lines=audit.lines,
        audit_head=audit.head_hash,
        audit_problem=audit.problem,
        audit_bad_line=audit.bad_line,
    )


def review(control: ChangeControl, change: PendingChange, now: dt.datetime | None = None) -> Review:
    data: Mapping[str, Any] = {}
    evidence_id = None
    if change.evidence_path:
        try:
            bundle = evidence_mod.load(control.runs_dir / change.evidence_path)
            data, evidence_id = bundle.data, bundle.id
        except evidence_mod.EvidenceError:
            data = {}
    verdict = evaluate(data, control.thresholds) if data else None
    card_passport = change_passport(control, change)
    blocks = data.get("measurements", {}) if isinstance(data.get("measurements"), Mapping) else {}
    names = list(EXPECTED.get(change.kind, ())) + [
        n for n in blocks if n not in EXPECTED.get(change.kind, ())
    ]
    measurements = tuple(_measurement(name, blocks.get(name)) for name in names)
    ab = _block(blocks, "ab")
    impact = _block(blocks, "routing_impact")
    metrics = impact.get("metrics") if isinstance(impact.get("metrics"), Mapping) else {}
    live = _live_files(control, change)
    cost = data.get("cost") if isinstance(data.get("cost"), Mapping) else {}
    raw_cases = ab.get("cases")
    cases = (
        tuple(_case(c) for c in raw_cases if isinstance(c, Mapping)) if isinstance(raw_cases, list) else ()
    )
    champion_mean = _mean(ab.get("champion_mean"), [c.champion for c in cases])
    challenger_mean = _mean(ab.get("challenger_mean"), [c.challenger for c in cases])
    samples = _int(ab.get("samples")) if _int(ab.get("samples")) is not None else (len(cases) or None)
    scorecards = None
    if ab:
        scorecards = ab_cards(
            change.kind,
            change.champion_revision,
            change.candidate_revision,
            (champion_mean, challenger_mean),
            samples,
            ([c.champion_pass for c in cases], [c.challenger_pass for c in cases]),
        )
    elif impact:
        scorecards = routing_cards(
            change.champion_revision,
            change.candidate_revision,
            (_num(_get(metrics, "champion", "top1")), _num(_get(metrics, "challenger", "top1"))),
            _int(_get(metrics, "n", "top1")),
        )
    autonomy = _autonomy(control, change)
    return Review(
        change=change,
        verdict=verdict.status if verdict else "blocked",
        reasons=verdict.reasons if verdict else ("the evidence bundle is missing or unreadable",),
        warnings=verdict.warnings if verdict else (),
        refusal=control.refusal(change),
        measurements=measurements,
        champion_mean=champion_mean,
        challenger_mean=challenger_mean,
        samples=samples,
        cases=cases,
        retention=_num(ab.get("retention")),
        serving_model=ab.get("serving_model") if isinstance(ab.get("serving_model"), str) else None,
        routing=tuple(
            Metric(
                m,
                _num(_get(metrics, "champion", m)),
                _num(_get(metrics, "challenger", m)),
                _int(_get(metrics, "n", m)),
            )
            for m in (ROUTING_METRICS if impact or change.kind == "description" else ())
        ),
        checks=_checks(_block(blocks, "checks")),
        search=_search(_block(blocks, "search")),
        cost_usd=_num(cost.get("usd")),
        champion_usd=_num(ab.get("champion_usd")),
        challenger_usd=_num(ab.get("challenger_usd")),
        evidence_id=evidence_id,
        diffs=tuple(file_diffs(live, change.files)),
        pairwise=_pairwise(ab.get("pairwise")),
        statistics=tuple(_statistic(s) for s in _list(_get_gate(data, "statistics"))),
        routing_cases=_int(_get(impact, "cases", "total")),
        traffic=_int(_get(impact, "cases", "traffic")),
        shadowed=tuple(
            f"{s.get('task')} (expects {s.get('expected')})"
            for s in _list(impact.get("shadowed"))
            if isinstance(s, Mapping)
        ),
        moved=tuple(
            Moved(str(name), tuple(map(str, _list(m.get("gained")))), tuple(map(str, _list(m.get("lost")))))
            for name, m in (impact.get("by_skill") or {}).items()
            if isinstance(m, Mapping) and name != change.skill
        ),
        provenance=_provenance(data.get("provenance")),
        ledger=cost.get("ledger") if isinstance(cost.get("ledger"), str) else None,
        sampling=_sampling(ab.get("sampling")),
        passport=card_passport.cells,
        passport_summary=card_passport.summary,
        lifecycle=_lifecycle(control, change, data, verdict),
        autonomy=autonomy[0] if autonomy else None,
        goes_live_at=autonomy[1] if autonomy else None,
        replay=replay_view(data) if data else None,
        risk=risk(change.skill, live, change.files, control.thresholds.retention_warn),
        scorecards=scorecards,
        age=age(change.created, now or dt.datetime.now(dt.UTC)),
    )


def _lifecycle(
    control: ChangeControl, change: PendingChange, data: Mapping[str, Any], verdict: Any
) -> tuple[Stage, ...]:
    try:
        lines = [e for e in control.audit.entries() if e.get("change_id") == change.id]
    except IngotError:  # a damaged chain: the card still shows, its lifecycle says why it is dark
        lines = []
    return lifecycle.for_pending(lines, change.source, change.created, data, verdict)


def _autonomy(control: ChangeControl, change: PendingChange) -> tuple[str, str | None] | None:
    """What autonomy will do with `change`, and when a supervised one goes live (None: manual)."""
    cls = change_class(change.kind, {})
    trust = control.autonomy.trust(change.skill, cls)
    if trust.level == "manual":
        return None
    try:
        start = queued_at(control, change)
    except IngotError as exc:
        return (
            f"{cls} changes are {trust.level}, but the audit chain cannot be read ({exc}): a person decides",
            None,
        )
    if start is None:
        return None
    decision = decide(
        trust, change_passport(control, change), start, control.review_window_s, dt.datetime.now(dt.UTC)
    )
    deadline = (
        decision.ready_at.isoformat(timespec="seconds")
        if decision.action == "wait" and decision.ready_at
        else None
    )
    return f"{cls} changes are {trust.level}: {decision.why}", deadline


def until(iso: str, now: dt.datetime | None = None) -> str:
    """ "in 41 min 5 s" until the ISO time `iso` (UTC), or "any moment now" once it has passed."""
    left = int((dt.datetime.fromisoformat(iso) - (now or dt.datetime.now(dt.UTC))).total_seconds())
    if left <= 0:
        return "any moment now"
    hours, rest = divmod(left, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{hours} h"] if hours else []
    parts += [f"{minutes} min"] if minutes or hours else []
    return "in " + " ".join([*parts, f"{seconds} s"])


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _get_gate(data: Mapping[str, Any], key: str) -> Any:
    gate = data.get("gate")
    return gate.get(key) if isinstance(gate, Mapping) else None


def _pairwise(block: Any) -> tuple[int, int, int] | None:
    if not isinstance(block, Mapping) or block.get("status") != "measured":
        return None
    counts = tuple(_int(block.get(k)) for k in ("wins", "ties", "losses"))
    return counts if all(c is not None for c in counts) else None  # type: ignore[return-value]


def _statistic(block: Any) -> Statistic:
    block = block if isinstance(block, Mapping) else {}
    return Statistic(
        str(block.get("test", "?")),
        _int(block.get("n")),
        _num(block.get("statistic")),
        p_clause(_num(block.get("p"))),
    )


def _provenance(block: Any) -> tuple[str, ...]:
    if not isinstance(block, Mapping):
        return ()
    lines = [
        f"{role}: {m.get('model')} at {m.get('endpoint')}"
        for role, m in (block.get("models") or {}).items()
        if isinstance(m, Mapping)
    ]
    task_set = block.get("task_set")
    if isinstance(task_set, Mapping) and task_set.get("origin"):
        lines.append(f"task set: {task_set.get('origin')}, sha256 {str(task_set.get('sha256'))[:12]}")
    return tuple(lines)


def _sampling(block: Any) -> str | None:
    if not isinstance(block, Mapping) or _int(block.get("holdout_items")) is None:
        return None
    return f"{block['holdout_items']} holdout items, {block.get('distinct')} distinct"


def set_aside(control: ChangeControl, limit: int = 10) -> list[dict[str, Any]]:
    """Recently displaced or withheld candidates (kept in the archive, never silently dropped)."""
    folder = control.queue.archive_folder
    found = []
    for path in folder.glob("*/*.json") if folder.is_dir() else []:
        try:
            record = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue
        if record.get("archived_status") in ("displaced", "withheld"):
            found.append(
                {
                    "skill": path.parent.name,
                    "id": record.get("id"),
                    "status": record.get("archived_status"),
                    "reason": record.get("archived_reason"),
                    "at": record.get("archived_at", ""),
                }
            )
    return sorted(found, key=lambda r: r["at"], reverse=True)[:limit]


def _live_files(control: ChangeControl, change: PendingChange) -> Mapping[str, bytes]:
    """The live skill's files, or nothing (a new skill, or a folder that cannot be read now:
    the diff then shows every file as added, and the card's refusal says what is wrong)."""
    root = control.root_of(change.skill)
    if root is None or change.champion_revision is None:
        return {}
    try:
        return control.promoter.read_tree(root / change.skill, change.skill)
    except (IngotError, OSError):
        return {}


def _block(blocks: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    block = blocks.get(name)
    return block if isinstance(block, Mapping) and block.get("status") == "measured" else {}


def _get(block: Mapping[str, Any], side: str, metric: str) -> Any:
    values = block.get(side)
    return values.get(metric) if isinstance(values, Mapping) else None


def _search(block: Mapping[str, Any]) -> Search | None:
    if not block:
        return None
    research = block.get("research")
    status = research.get("status") if isinstance(research, Mapping) else None
    return Search(
        _num(block.get("seed_train_mean")),
        _num(block.get("winner_train_mean")),
        _int(block.get("candidates")),
        status if isinstance(status, str) else None,
    )


def _measurement(name: str, block: Any) -> Measurement:
    if not isinstance(block, Mapping):
        return Measurement(name, False, "not in the evidence bundle")
    if block.get("status") == "measured":
        return Measurement(name, True, None)
    applicable = block.get("status") != "not_applicable"
    return Measurement(name, False, str(block.get("why") or "no reason given"), applicable)


def _case(case: Mapping[str, Any]) -> Case:
    divergence = case.get("divergence")
    return Case(
        id=str(case.get("id", "?")),
        task=str(case.get("task", "")),
        champion=_num(case.get("champion")),
        challenger=_num(case.get("challenger")),
        champion_pass=_bool(case.get("champion_pass")),
        challenger_pass=_bool(case.get("challenger_pass")),
        champion_tokens=_int(case.get("champion_tokens")),
        challenger_tokens=_int(case.get("challenger_tokens")),
        divergence=_int(divergence.get("line")) if isinstance(divergence, Mapping) else None,
        divergence_champion=str(divergence.get("champion", "")) if isinstance(divergence, Mapping) else "",
        divergence_challenger=str(divergence.get("challenger", ""))
        if isinstance(divergence, Mapping)
        else "",
        pairwise=case.get("pairwise") if case.get("pairwise") in ("win", "tie", "loss") else None,
    )


def _checks(block: Mapping[str, Any]) -> tuple[Check, ...]:
    results = block.get("results")
    if not isinstance(results, Mapping):
        return ()
    return tuple(
        Check(str(name), _bool(r.get("passed")), str(r.get("detail", "")))
        for name, r in results.items()
        if isinstance(r, Mapping)
    )


def timeline(control: ChangeControl, skill: str) -> list[TimelineEntry]:
    """The skill's audit entries, newest first, with a link to each one's evidence bundle."""
    bundles = {}
    folder = control.runs_dir / "evidence" / skill
    if folder.is_dir():
        for path in folder.glob("*/evidence.json"):
            bundles[evidence_mod.file_digest(path)] = path.parent.name
    # An "-intent" line is followed by its outcome line; show the outcome (or a lone intent).
    entries = control.history(skill)
    settled = {e.get("intent_seq") for e in entries}
    shown = [e for e in entries if not (str(e.get("action", "")).endswith("-intent") and e.seq in settled)]
    return [_entry(e, bundles) for e in reversed(shown)]


def _entry(entry: AuditEntry, bundles: Mapping[str, str]) -> TimelineEntry:
    def text(key: str) -> str | None:
        value = entry.get(key)
        return str(value) if value is not None else None

    return TimelineEntry(
        seq=entry.seq,
        time=entry.time,
        action=str(entry.get("action", "?")),
        actor=text("actor"),
        from_revision=text("from_revision"),
        to_revision=text("to_revision"),
        outcome=text("outcome"),
        reason=text("reason"),
        evidence=bundles.get(str(entry.get("evidence_digest"))),
        change_id=text("change_id"),
    )
