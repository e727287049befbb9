"""The review queue at a glance: which changes wait, in what order, and each one's two score cards.

Passing changes come first (a reviewer's time goes where a decision can be made), then the ones
that are admissible, insufficient and blocked; oldest first within each. A score card shows one
arm's headline number with the n it rests on; a number that was not measured stays `None`, and
the page says so. Nothing here reads files: it orders and summarises records review_card.py built.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

# Where a verdict sorts: decidable first, then weaker evidence, then what cannot be approved.
VERDICT_ORDER = {"pass": 0, "admissible": 1, "insufficient": 2, "blocked": 3}


@dataclass(frozen=True)
class ScoreCard:
    """One arm's headline: the held-out mean score (or routing top-1 for a description change)."""

    arm: str  # "champion" | "challenger"
    label: str  # what the arm is: "live 3f2a…", "no skill", "candidate 9c41…"
    metric: str  # "held-out mean score" | "routing top-1"
    value: float | None
    n: int | None  # distinct items the value was measured on
    passed: int | None = None  # held-out tasks the arm passed (of n), when recorded per case


class Card(Protocol):
    """What ordering needs from a review card (review_card.Review)."""

    @property
    def verdict(self) -> str: ...

    @property
    def refusal(self) -> str | None: ...

    @property
    def created(self) -> str: ...


C = TypeVar("C", bound=Card)


def ordered(cards: Iterable[C]) -> list[C]:
    """Approvable passing changes first, then by verdict, then oldest first."""
    return sorted(
        cards,
        key=lambda c: (c.refusal is not None, VERDICT_ORDER.get(c.verdict, len(VERDICT_ORDER)), c.created),
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
    champion_revision: str | None,
    candidate_revision: str,
    top1: tuple[float | None, float | None],
    n: int | None,
) -> tuple[ScoreCard, ScoreCard]:
    """Routing top-1 before and after, for a change that moves only the description."""
    champion = f"live {champion_revision[:12]}" if champion_revision else "no skill"
    return (
        ScoreCard("champion", champion, "routing top-1", top1[0], n),
        ScoreCard("challenger", f"candidate {candidate_revision[:12]}", "routing top-1", top1[1], n),
    )
