"""Admission checks: the quarantine runs all three at proposal, the description pass runs the
collision check on its candidates, and approval re-runs the injection check from disk.

Each returns a `CheckResult` (passed + a detail a person or a calling model can read). They are
pure: the collision check receives the similarities, it does not compute them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# Above every pair of distinct skills in the 70-skill shared corpus (max 0.826, pytest-skill vs
# unittest-skill), below a paraphrase of an existing description.
COLLISION_COSINE = 0.88
# On the description text alone: above the 70-skill corpus's closest pair (0.837) and the 99.9th
# percentile of the 828 tool descriptions (0.771); a verbatim copy under another name is 1.0.
COPY_COSINE = 0.95
INJECTION_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\b(ignore|disregard|forget|override)\b.{0,40}\b(previous|prior|above|earlier|all|your|system)\b.{0,20}"
        r"\b(instructions?|prompts?|rules|guidelines|directions)\b",
        r"\byou are now\b.{0,40}\b(unrestricted|jailbroken|dan|developer mode|free of)\b",
        r"\b(reveal|print|show|leak|exfiltrate)\b.{0,30}"
        r"\b(system prompt|hidden instructions|api keys?|secrets?|credentials|tokens?)\b",
        r"\b(send|post|upload|forward)\b.{0,60}\b(api keys?|secrets?|credentials|passwords?|tokens?|\.env)\b"
        r".{0,40}\b(to|at)\b",
        r"\bdo anything now\b|\bjailbreak\b",
        r"\bcurl\b[^\n|]{0,200}\|\s*(sudo\s+)?(ba|z)?sh\b",
        r"<\s*/?\s*(system|assistant)\s*>",
    )
)


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    detail: str

    def as_json(self) -> dict[str, object]:
        return {"passed": self.passed, "detail": self.detail}


def injection_check(text: str) -> CheckResult:
    for pattern in INJECTION_PATTERNS:
        found = pattern.search(text)
        if found:
            return CheckResult(False, f"instruction-override / injection phrase: {found.group(0)[:80]!r}")
    return CheckResult(True, f"{len(INJECTION_PATTERNS)} phrase patterns, none found")


def collision_check(
    similar: Mapping[str, float], own_name: str, alone: Mapping[str, float] | None = None
) -> CheckResult:
    """Refuse a description that would shadow another skill's route (`similar`: with names), or
    that near-copies another skill's description text (`alone`: without names)."""
    copies = sorted(
        ((n, s) for n, s in (alone or {}).items() if n != own_name and s >= COPY_COSINE), key=lambda x: -x[1]
    )
    if copies:
        listed = ", ".join(f"{n} (cosine {s:.2f})" for n, s in copies[:3])
        return CheckResult(False, f"the description near-copies {listed}; say what only this skill does")
    clashes = sorted(
        ((n, s) for n, s in similar.items() if n != own_name and s >= COLLISION_COSINE),
        key=lambda item: -item[1],
    )
    if clashes:
        listed = ", ".join(f"{n} (cosine {s:.2f})" for n, s in clashes[:3])
        return CheckResult(
            False, f"the description would shadow {listed}; make it specific to what only this skill does"
        )
    nearest = max(((s, n) for n, s in similar.items() if n != own_name), default=(0.0, "none"))
    copy = max(((s, n) for n, s in (alone or {}).items() if n != own_name), default=(0.0, "none"))
    return CheckResult(
        True,
        f"nearest existing description: {nearest[1]} (cosine {nearest[0]:.2f} < {COLLISION_COSINE} with names"
        + (f"; {copy[1]} {copy[0]:.2f} < {COPY_COSINE} as text alone)" if alone is not None else ")"),
    )
