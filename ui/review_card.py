"""The review card for one pending change: its passport, evidence, diff and countdown.

The passport (control/passport.py) is the card's one verdict: its state heads the card and its
six cells are the only place a state word appears; the numbers below it are the measurements
the cells rest on. The bundle's blocks are parsed once (measurements.py) into records the
templates can trust; a value that was not measured stays `None` and the page shows it as
missing. Whether approval would be refused, and what it asks for (a reason naming the missing
cells, a replay override), is asked of change control itself (`ChangeControl.refusal`, the
passport), so the page and the server never disagree.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ingot.errors import IngotError
from optimize.control import evidence as evidence_mod
from optimize.control.autonomy import decide
from optimize.control.autopilot import change_passport, change_trust, queued_at
from optimize.control.changes import ChangeControl
from optimize.control.passport import Cell, Passport
from optimize.control.pending import PendingChange
from optimize.measure.impact import METRIC_NAMES
from ui import lifecycle
from ui.diffs import FileDiff, Risk, file_diffs, risk
from ui.lifecycle import Stage
from ui.measurements import (
    Case,
    Check,
    Leak,
    Metric,
    Moved,
    Search,
    Statistic,
    as_float,
    as_int,
    as_list,
    case_of,
    checks_of,
    leaks_of,
    measured_block,
    pairwise_of,
    provenance_of,
    recorded_mean,
    sampling_of,
    search_of,
    side_value,
    statistic_of,
)
from ui.queue import ScoreCard, ab_cards, age, routing_cards
from ui.replay import ReplayView, replay_view

ROUTING_METRICS = ("top1", "recall_at_3", "no_route_precision", "others_top1")


@dataclass(frozen=True)
class Review:
    change: PendingChange
    passport: Passport
    refusal: str | None  # why approval would be refused now; None: the button is live
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
    leaks: tuple[Leak, ...] = ()  # routing cases left out of the metrics: the candidate was written from them
    provenance: tuple[str, ...] = ()  # models and endpoints, task-set origin (never keys)
    ledger: str | None = None  # the run's ledger, relative to the state home
    sampling: str | None = None  # "5 holdout items, 4 distinct"
    lifecycle: tuple[Stage, ...] = ()
    autonomy: str | None = None  # what autonomy will do with it (level, countdown), or None
    goes_live_at: str | None = None  # a supervised change's window end (ISO, UTC): the countdown
    replay: ReplayView | None = None  # the regression replay cell
    risk: Risk | None = None  # the change's size and shape, from its bytes
    scorecards: tuple[ScoreCard, ScoreCard] | None = None  # None: no headline number measured
    no_scorecards: str = ""  # why there is no headline number
    age: str = ""  # how long it has waited

    @property
    def state(self) -> str:
        """One of passport.STATES: the one word for this change."""
        return self.passport.state

    @property
    def created(self) -> str:
        return self.change.created

    @property
    def refusal_extra(self) -> str | None:
        """The refusal, when it says more than the passport's failed cells (a stale or tampered
        change): a blocked card states its reason once."""
        said = (f"{self.change.id} is blocked: ", f"{self.change.id} is stale: ")  # the passport says it
        if self.refusal is None or self.refusal.startswith(said):
            return None
        return self.refusal

    @property
    def cells(self) -> tuple[Cell, ...]:
        return self.passport.cells

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.passport.warnings

    @property
    def needs(self) -> str:
        """What approving it takes: "nothing", "a reason" (missing cells), "an override" (a
        replay BLOCK or no gain shown, plus a reason when cells are missing too) or "cannot" (refused)."""
        if self.refusal is not None:
            return "cannot"
        if self.passport.overridable:
            return "an override"
        return "a reason" if self.passport.missing else "nothing"

    @property
    def failing_beside_headline(self) -> tuple[Cell, ...]:
        """The failed cells the score cards do not show: a blocked change whose headline shows no
        drop names what fails right there, not only in the folded evidence."""
        failed, cards = self.passport.failed, self.scorecards
        if not failed or cards is None or cards[0].value is None or cards[1].value is None:
            return failed
        if cards[1].value - cards[0].value >= -0.0005:  # the headline looks fine: say what is not
            return failed
        shown = "held-out A/B" if cards[0].metric == "held-out mean score" else "routing impact"
        return tuple(c for c in failed if c.name != shown)

    @property
    def champion_tokens(self) -> int | None:
        return _total(c.champion_tokens for c in self.cases)

    @property
    def challenger_tokens(self) -> int | None:
        return _total(c.challenger_tokens for c in self.cases)


def _total(values: Any) -> int | None:
    values = list(values)
    return sum(values) if values and all(v is not None for v in values) else None


def review(control: ChangeControl, change: PendingChange, now: dt.datetime | None = None) -> Review:
    data: Mapping[str, Any] = {}
    evidence_id = None
    if change.evidence_path:
        try:
            bundle = evidence_mod.load(control.runs_dir / change.evidence_path)
            data, evidence_id = bundle.data, bundle.id
        except evidence_mod.EvidenceError:
            data = {}
    card_passport = change_passport(control, change)
    blocks = data.get("measurements", {}) if isinstance(data.get("measurements"), Mapping) else {}
    ab = measured_block(blocks, "ab")
    impact = measured_block(blocks, "routing_impact")
    metrics = impact.get("metrics") if isinstance(impact.get("metrics"), Mapping) else {}
    live = _live_files(control, change)
    cost = data.get("cost") if isinstance(data.get("cost"), Mapping) else {}
    raw_cases = ab.get("cases")
    cases = (
        tuple(case_of(c) for c in raw_cases if isinstance(c, Mapping)) if isinstance(raw_cases, list) else ()
    )
    champion_mean = recorded_mean(ab.get("champion_mean"), [c.champion for c in cases])
    challenger_mean = recorded_mean(ab.get("challenger_mean"), [c.challenger for c in cases])
    samples = as_int(ab.get("samples")) if as_int(ab.get("samples")) is not None else (len(cases) or None)
    scorecards, no_scorecards = None, ""
    if ab:
        scorecards = ab_cards(
            change.kind,
            change.champion_revision,
            change.candidate_revision,
            (champion_mean, challenger_mean),
            samples,
            ([c.champion_pass for c in cases], [c.challenger_pass for c in cases]),
        )
    elif impact and change.kind in ("create", "description", "both", "removal"):
        scorecards = routing_cards(
            change.kind, change.skill, change.champion_revision, change.candidate_revision, impact
        )
    else:
        no_scorecards = (
            "the held-out A/B is not in the evidence"
            if change.kind in ("body", "both", "create", "rewrite")
            else "routing impact is not in the evidence"
        )
    autonomy = _autonomy(control, change)
    measured_search = measured_block(blocks, "search")
    return Review(
        change=change,
        passport=card_passport,
        refusal=control.refusal(change),
        champion_mean=champion_mean,
        challenger_mean=challenger_mean,
        samples=samples,
        cases=cases,
        retention=as_float(ab.get("retention")),
        serving_model=ab.get("serving_model") if isinstance(ab.get("serving_model"), str) else None,
        routing=tuple(
            Metric(
                METRIC_NAMES.get(m, m),
                as_float(side_value(metrics, "champion", m)),
                as_float(side_value(metrics, "challenger", m)),
                as_int(side_value(metrics, "n", m)),
            )
            for m in (ROUTING_METRICS if impact else ())
            if side_value(metrics, "n", m) is not None
        ),
        checks=checks_of(measured_block(blocks, "checks")),
        search=search_of(measured_search),
        cost_usd=as_float(cost.get("usd")),
        champion_usd=as_float(ab.get("champion_usd")),
        challenger_usd=as_float(ab.get("challenger_usd")),
        evidence_id=evidence_id,
        diffs=tuple(file_diffs(live, change.files)),
        pairwise=pairwise_of(ab.get("pairwise")),
        statistics=tuple(statistic_of(s) for s in card_passport.statistics),
        routing_cases=as_int(side_value(impact, "cases", "total")),
        traffic=as_int(side_value(impact, "cases", "traffic")),
        shadowed=tuple(
            f"{s.get('task')} (expects {s.get('expected')})"
            for s in as_list(impact.get("shadowed"))
            if isinstance(s, Mapping)
        ),
        moved=tuple(
            Moved(
                str(name), tuple(map(str, as_list(m.get("gained")))), tuple(map(str, as_list(m.get("lost"))))
            )
            for name, m in (impact.get("by_skill") or {}).items()
            if isinstance(m, Mapping) and name != change.skill
        ),
        leaks=leaks_of(impact.get("leakage")),
        provenance=provenance_of(data.get("provenance")),
        ledger=cost.get("ledger") if isinstance(cost.get("ledger"), str) else None,
        sampling=sampling_of(ab.get("sampling")),
        lifecycle=_lifecycle(control, change, data, card_passport if data else None),
        autonomy=autonomy[0] if autonomy else None,
        goes_live_at=autonomy[1] if autonomy else None,
        replay=replay_view(data) if data else None,
        risk=risk(change.skill, live, change.files, control.thresholds.retention_warn),
        scorecards=scorecards,
        no_scorecards=no_scorecards,
        age=age(change.created, now or dt.datetime.now(dt.UTC)),
    )


def _lifecycle(
    control: ChangeControl, change: PendingChange, data: Mapping[str, Any], verdict: Passport | None
) -> tuple[Stage, ...]:
    try:
        lines = [e for e in control.audit.entries() if e.get("change_id") == change.id]
    except IngotError:  # a damaged chain: the card still shows, its lifecycle says why it is dark
        lines = []
    return lifecycle.for_pending(lines, change.source, change.created, data, verdict)


def _autonomy(control: ChangeControl, change: PendingChange) -> tuple[str, str | None] | None:
    """What autonomy will do with `change`, and when a supervised one goes live (None: manual)."""
    trust = change_trust(control, change)
    if trust is None or trust.level == "manual":
        return None
    cls = f"{change.kind} changes" if change.kind != "both" else "description + body changes"
    try:
        start = queued_at(control, change)
    except IngotError as exc:
        return (
            f"{cls} are {trust.level}, but the audit chain cannot be read ({exc}): a person decides",
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
    return f"{cls} are {trust.level}: {decision.why}", deadline


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
