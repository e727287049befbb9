"""How many distinct items a holdout really has: near-duplicates merged, train overlap flagged.

n must count distinct items: the same task three times (or with another case, spacing or a
trailing period) is one sample, not three, and a holdout task that is a near-copy of a train
task is leakage. Two tasks are near-duplicates when their normalised texts are equal (case,
whitespace and punctuation ignored), or when their embeddings are at least `cosine` apart (0.97,
measured on the shipped all-MiniLM-L6-v2: "How do I / How can I reset my password?" 0.991, a
trailing period 0.969) *and* they mention the same numbers, so "notes for v2.0" and "notes for
v2.1" (0.983) stay two tasks. Runs before any model call; the embedder is passed in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

NEAR_DUPLICATE_COSINE = 0.97
Embed = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class SampleReport:
    """Which holdout items count, which were merged into them, and which leak from train."""

    kept: tuple[int, ...]  # holdout indexes that count (the first of each near-duplicate group)
    merged: tuple[tuple[int, ...], ...]  # groups of 2+ holdout indexes that are one item
    leaks: tuple[tuple[int, int], ...]  # (holdout index, train index) near-duplicate pairs
    cosine: float | None  # None: no embedder, normalised text only

    @property
    def distinct(self) -> int:
        return len(self.kept)

    def as_json(self, holdout: Sequence[str], train: Sequence[str]) -> dict[str, object]:
        return {
            "holdout_items": len(holdout),
            "distinct": self.distinct,
            "merged": [[holdout[i][:120] for i in group] for group in self.merged],
            "train_overlap": [{"holdout": holdout[h][:120], "train": train[t][:120]} for h, t in self.leaks],
            "rule": "equal after normalising case, whitespace and punctuation"
            + (f", or cosine >= {self.cosine} with the same numbers" if self.cosine is not None else ""),
        }


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", " ", text.lower())).strip()


def _numbers(text: str) -> tuple[str, ...]:
    return tuple(sorted(re.findall(r"\d+(?:[.,]\d+)*", text)))


def _near(a: str, b: str, similarity: float, cosine: float | None) -> bool:
    if normalise(a) == normalise(b):
        return True
    return cosine is not None and similarity >= cosine and _numbers(a) == _numbers(b)


def distinct_items(
    holdout: Sequence[str], train: Sequence[str], embed: Embed | None, cosine: float = NEAR_DUPLICATE_COSINE
) -> SampleReport:
    """Group near-duplicate holdout items and find holdout items that near-copy a train item."""
    texts = list(holdout) + list(train)
    sims = None
    if embed is not None and texts:
        vectors = embed(texts)
        sims = vectors @ vectors.T
    threshold = cosine if embed is not None else None

    def near(i: int, j: int) -> bool:
        return _near(texts[i], texts[j], float(sims[i, j]) if sims is not None else 0.0, threshold)

    kept: list[int] = []
    groups: dict[int, list[int]] = {}
    for i in range(len(holdout)):
        owner = next((k for k in kept if near(i, k)), None)
        if owner is None:
            kept.append(i)
            groups[i] = [i]
        else:
            groups[owner].append(i)
    leaks = tuple((h, t) for h in range(len(holdout)) for t in range(len(train)) if near(h, len(holdout) + t))
    merged = tuple(tuple(g) for g in groups.values() if len(g) > 1)
    return SampleReport(tuple(kept), merged, leaks, threshold)
