"""The serving process's background duties, run in one thread every AUTOPILOT_TICK_S seconds.

In order: read the candidate inbox (new candidates become pending changes), guard the live roots
(with LIVE_EDITS=quarantine, an edit made straight to a live skill is queued and the approved
revision restored), then let the autopilot promote what earned autonomy and report incidents.
One `ingot serve` (the MCP-serving process) runs them; each duty does its writes through
change control, under the change lock, so a CLI command running at the same time is safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)
Duty = tuple[str, Callable[[], Sequence[object]]]


def tick(duties: Sequence[Duty]) -> None:
    """Run each duty once; one that fails is logged and the others still run."""
    for name, duty in duties:
        try:
            for event in duty():
                log.log(
                    logging.DEBUG if getattr(event, "quiet", False) else logging.INFO, "%s: %s", name, event
                )
        except Exception as exc:  # the serving process must outlive one bad tick
            log.warning("%s failed this tick: %s", name, exc)


def run(duties: Sequence[Duty], stop: threading.Event, every_s: float) -> None:
    """Tick until `stop` is set."""
    while not stop.is_set():
        tick(duties)
        stop.wait(every_s)


def start(duties: Sequence[Duty], stop: threading.Event, every_s: float) -> threading.Thread:
    thread = threading.Thread(target=run, args=(duties, stop, every_s), name="ingot-background", daemon=True)
    thread.start()
    return thread
