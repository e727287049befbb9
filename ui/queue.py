"""The review queue at a glance: which changes wait, in what order, and each one's two score cards.

Ready changes come first (a reviewer's time goes where a decision can be made), then the ones
that need acknowledgement, then blocked ones; oldest first within each. A score card shows one
arm's headline number with the n it rests on; a number that was not measured stays `None`, and
the page says so. Nothing here reads files: it orders and summarises records review_card.py built.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from optimize.control.passport import STATES


@dataclass(frozen=True)
class ScoreCard:
    """One arm's headline: the held-out mean score, or a routing number when that is what the
    change's evidence rests on (top-1 on held-out cases, a new skill's own cases routed to it)."""

    arm: str  # "champion" | "challenger"
    label: str  # what the arm is: "live 3f2a…", "no skill", "candidate 9c41…"
    metric: str
    value: float | None
    n: int | None  # distinct items the value was measured on
    passed: int | None = None  # held-out tasks the arm passed (of n), when recorded per case


class Card(Protocol):
    """What ordering needs from a review card (review_card.Review)."""

    @property
    def state(self) -> str: ...

    @property
    def refusal(self) -> str | None: ...

    @property
    def created(self) -> str: ...


C = TypeVar("C", bound=Card)


def ordered(cards: Iterable[C]) -> list[C]:
    """Approvable changes first, ready before needs-acknowledgement before blocked, then oldest first."""
    return sorted(
        cards,
        key=lambda c: (
            c.refusal is not None,
            STATES.index(c.state) if c.state in STATES else len(STATES),
            c.created,
        ),
    )


def age(created: str, now: dt.datetime) -> str:
    """How long ago a change was queued, as a reviewer reads it: "just now", "5 min ago", "3 h ago"."""
    try:
        then = dt.datetime.fromisoformat(created)
    except ValueError:
        return "unknown"
    if then.tzinfo is None:
        then = then.replace(tzinfo=dt.UTC)
    seconds = (now - then).total_seconds()
    if seconds < 60:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds // 60)} min ago"


def _passed(flags: Sequence[bool | None]) -> int | None:
    return sum(bool(f) for f in flags) if flags and all(f is not None for f in flags) else None


def ab_cards(
    kind: str,
    champion_revision: str | None,
    candidate_revision: str,
    means: tuple[float | None, float | None],
    samples: int | None,
    passes: tuple[Sequence[bool | None], Sequence[bool | None]],
) -> tuple[ScoreCard, ScoreCard]:
    """The held-out A/B as two cards. A new skill's champion is "no skill": the same tasks served
    without any skill, which is what the A/B of a create measures against."""
    champion = "no skill" if kind == "create" or not champion_revision else f"live {champion_revision[:12]}"
    metric = "held-out mean score"
    return (
        ScoreCard("champion", champion, metric, means[0], samples, _passed(passes[0])),
        ScoreCard(
            "challenger",
            f"candidate {candidate_revision[:12]}",
            metric,
            means[1],
            samples,
            _passed(passes[1]),
        ),
    )


def routing_cards(
    kind: str,
    skill: str,
    champion_revision: str | None,
    candidate_revision: str,
    impact: Mapping[str, Any],
) -> tuple[ScoreCard, ScoreCard]:
    """Routing before and after, for a change whose evidence is routing: a new skill's own held-out
    cases routed to it (against no skill, which serves none of them; with none of its own, the
    other skills' top-1 its routing cell was judged on), a removal's other skills' top-1, a
    description's top-1. Each number on the held-out cases it counts, never on another
    skill's cases alone."""
    champion = f"live {champion_revision[:12]}" if champion_revision else "no skill"
    candidate = "no skill (removed)" if kind == "removal" else f"candidate {candidate_revision[:12]}"
    metrics = impact.get("metrics") if isinstance(impact.get("metrics"), Mapping) else {}
    own = impact.get("own") if isinstance(impact.get("own"), Mapping) else {}
    if kind == "create" and isinstance(own.get("cases"), int) and own.get("cases"):
        n = own.get("cases")
        before = own.get("champion_routed") / n if n else None
        after = own.get("challenger_routed") / n if n else None
        metric = f"its own routing cases routed to {skill}"
        values = (before, after)
    else:  # a new skill with no cases of its own is judged on what it does to the others
        name = "others_top1" if kind in ("removal", "create") else "top1"
        metric = "top-1 of other skills' cases" if name == "others_top1" else "routing top-1 (held-out cases)"
        n = (metrics.get("n") or {}).get(name)
        values = ((metrics.get("champion") or {}).get(name), (metrics.get("challenger") or {}).get(name))
    return (
        ScoreCard("champion", champion, metric, _number(values[0]), n if isinstance(n, int) else None),
        ScoreCard("challenger", candidate, metric, _number(values[1]), n if isinstance(n, int) else None),
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
