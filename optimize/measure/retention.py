"""How much of a skill's body a rewrite keeps: the one definition the A/B's evidence and the
review page's change-risk summary share.

Counted on non-blank lines, by exact text: a line the challenger rewords is a line it dropped.
Pure and dependency-free, so front ends can call it without loading the measuring machinery.
"""

from __future__ import annotations


def retention(champion: str, challenger: str) -> float:
    """Share of the champion's non-blank lines that the challenger keeps (a rewrite that drops
    most of them is risky). An empty champion has nothing to lose: 1.0."""
    old = [line for line in champion.splitlines() if line.strip()]
    kept = set(challenger.splitlines())
    return sum(line in kept for line in old) / len(old) if old else 1.0
