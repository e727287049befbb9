"""The records a routing decision is made of: each ranked `Candidate` and the `RouteResult`.

Produced by router.py, read by library.py, the MCP server and the CLI. Frozen: a decision is
never edited after it is made. At most one skill in a result carries a body (the chosen one);
the others are names and scores a caller may load itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mcp_server.registry import Skill

NEAREST = 3  # names a decision lists (the chosen skill included), best first


@dataclass(frozen=True)
class Candidate:
    """One ranked skill with its calibrated confidence and the components behind it."""

    name: str
    score: float  # calibrated confidence: 0 = the library's typical background task, 1 = own description
    fit: str  # "match", "related" (close enough to compose or extend) or "none"
    components: Mapping[str, float]

    @property
    def related(self) -> bool:
        """At least related but not a direct match."""
        return self.fit == "related"


@dataclass(frozen=True)
class RouteResult:
    """The routing decision for one task. At most one skill (the chosen one) carries a body."""

    match: str | None
    related_match: str | None
    score: float
    skill: Skill | None
    alternatives: tuple[Candidate, ...]  # other candidates that are at least related
    components: Mapping[str, object]
    ranked: tuple[Candidate, ...] = ()  # the top k before any threshold (diagnostics, hints)

    @property
    def novel(self) -> bool:
        return self.skill is None

    @property
    def nearest(self) -> tuple[Candidate, ...]:
        """Up to NEAREST - 1 other skills (or NEAREST when novel), best first, whatever their fit:
        names and scores a caller may load with get_skill; never loaded here."""
        chosen = self.skill.name if self.skill is not None else None
        others = tuple(c for c in self.ranked if c.name != chosen)
        return others[: NEAREST - (chosen is not None)]
