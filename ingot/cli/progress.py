"""Long commands' progress on stderr: a tqdm bar on a terminal, plain lines anywhere else.

The CLI's implementation of ingot/progress.py's `OnStep`. On a terminal each step draws its own
bar ("evaluate pdf [3/5] held-out A/B  6/24 judgements"); when stderr is a pipe or a file (CI,
the UI's background runs) each update is one plain line, "evaluate pdf: step 3 of 5: held-out
A/B 6/24 judgements", which ui/runs.py reads back with `ingot.progress.parse`. Only stderr is
written, so stdout (and `--json`) carries the result alone. It shows what the core reports and
adds nothing of its own: no timers, no spinners.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from tqdm import tqdm

from ingot.progress import OnStep, Step


class TerminalProgress:
    """Shows each `Step` of the run called `what` ("evaluate pdf") on `stream`."""

    def __init__(self, what: str, stream: TextIO | None = None, bar: bool | None = None) -> None:
        """`bar`: draw bars (default: when `stream` is a terminal), else print plain lines."""
        self.what, self.stream = what, stream or sys.stderr
        self.bar = self.stream.isatty() if bar is None else bar
        self._drawn: tqdm | None = None
        self._index = 0

    def __call__(self, step: Step) -> None:
        if not self.bar:
            print(f"{self.what}: {step.line()}", file=self.stream, flush=True)
            return
        if self._drawn is None or step.index != self._index:
            self.close(finished=True)
            self._index = step.index
            self._drawn = tqdm(
                total=step.total or None,
                desc=f"{self.what} [{step.index}/{step.steps}] {step.name}",
                unit=f" {step.unit}" if step.unit else " step",
                file=self.stream,
                bar_format="{desc} {bar} {n_fmt}/{total_fmt}{unit}" if step.total else "{desc}",
                leave=True,
            )
        bar = self._drawn
        if step.total and bar.total != step.total:
            bar.total = step.total
            bar.unit = f" {step.unit}"
            bar.bar_format = "{desc} {bar} {n_fmt}/{total_fmt}{unit}"
        bar.n = step.done
        bar.refresh()

    def close(self, finished: bool = False) -> None:
        """End the current bar; `finished`: the next step began, so draw this one complete
        (a run that stops keeps its bar where it stopped)."""
        if self._drawn is not None:
            if finished and self._drawn.total:
                self._drawn.n = self._drawn.total
            self._drawn.close()
            self._drawn = None


@contextmanager
def progress(what: str) -> Iterator[OnStep]:
    """The `OnStep` for a command's long work, its last bar closed however the command ends."""
    shown = TerminalProgress(what)
    try:
        yield shown
    finally:
        shown.close()
