"""Progress of long work: the typed callback the core calls, and the one line that shows it.

The core (optimize/, ingot/evaluation.py) walks a fixed list of named steps (`Steps`) and, inside
a step, reports units of real work done (a task answered and graded, a replay judged, a
candidate scored) through `Count`. It never prints, draws or imports a terminal library: a front
end passes an `OnStep` and decides how to show each `Step` (the CLI: a tqdm bar on a terminal,
else plain lines, ingot/cli/progress.py; the UI's run page parses the plain lines back with
`parse`). Deliberately left out: time estimates. Guarantee: every count is work finished, never
time elapsed, and `Step.line()` and `parse` are each other's inverse.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

_LINE = re.compile(
    r"step (?P<index>\d+) of (?P<steps>\d+): (?P<name>.+?)"
    r"(?: (?P<done>\d+)/(?P<total>\d+)(?: (?P<unit>[^\r\n]*))?)?$"
)


@dataclass(frozen=True)
class Step:
    """Where a long run is: step `index` (1-based) of `steps`, called `name`; inside it `done` of
    `total` units (`total` 0: the step has no count of its own, it is one piece of work)."""

    index: int
    steps: int
    name: str
    done: int = 0
    total: int = 0
    unit: str = ""

    def line(self) -> str:
        """ "step 3 of 5: held-out A/B 6/24 judgements", as a person reads it."""
        head = f"step {self.index} of {self.steps}: {self.name}"
        return f"{head} {self.done}/{self.total} {self.unit}".rstrip() if self.total else head

    @property
    def fraction(self) -> float:
        """How much of the whole run is done, counting finished steps and this one's units."""
        inside = min(self.done / self.total, 1.0) if self.total else 0.0
        return min((self.index - 1 + inside) / self.steps, 1.0) if self.steps else 0.0


def parse(line: str) -> Step | None:
    """The `Step` a `Step.line()` wrote (after any prefix such as "evaluate pdf: "), or None."""
    start = line.find("step ")
    while start >= 0:
        found = _LINE.fullmatch(line[start:].rstrip())
        if found:
            return Step(
                int(found["index"]),
                int(found["steps"]),
                found["name"],
                int(found["done"] or 0),
                int(found["total"] or 0),
                found["unit"] or "",
            )
        start = line.find("step ", start + 1)
    return None


class OnStep(Protocol):
    """What a front end gives the core: called at the start of each step and after each unit."""

    def __call__(self, step: Step) -> None: ...


class Count(Protocol):
    """Inside one step: `done` of `total` `unit`s finished so far (called again after each)."""

    def __call__(self, done: int, total: int, unit: str) -> None: ...


def silent(step: Step) -> None:
    """The `OnStep` of a caller that shows nothing (tests, the background evaluator)."""


def uncounted(done: int, total: int, unit: str) -> None:
    """The `Count` of a step run outside any `Steps` (its caller shows nothing)."""


class Steps:
    """The core's side: the run's steps, named up front so the count is known from the start."""

    def __init__(self, names: Sequence[str], on_step: OnStep | None = None) -> None:
        self.names = list(dict.fromkeys(names))
        self.on_step = on_step or silent

    def begin(self, name: str) -> Count:
        """Report that step `name` started; the returned `Count` reports units done inside it.
        A name not planned is added at the end (the count grows rather than lies)."""
        if name not in self.names:
            self.names.append(name)
        index = self.names.index(name) + 1
        self.on_step(Step(index, len(self.names), name))

        def count(done: int, total: int, unit: str) -> None:
            self.on_step(Step(index, len(self.names), name, done, total, unit))

        return count
