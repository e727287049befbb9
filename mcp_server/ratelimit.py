"""A token bucket: how often a caller may do something expensive, such as queue a skill.

Thread-safe; time comes from an injectable monotonic clock so tests can move it. It refuses
rather than waits: a refused call is told when to retry, and no thread sits blocked."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable


class RateLimit:
    """At most `per_minute` events per minute on average, in bursts of up to `burst`."""

    def __init__(self, per_minute: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def take(self) -> float:
        """0.0 if the event may happen now (and counts it), else the seconds until it may."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return 0.0
            return (1.0 - self._tokens) / self.rate if self.rate > 0 else float("inf")


class SourceRates:
    """A bucket per source (an MCP client's declared name) and one for all sources together.

    One noisy client spends only its own bucket, so it cannot lock other agents out; the shared
    bucket bounds a process that keeps changing the name it declares. Idle sources beyond
    `max_sources` are forgotten oldest first (a forgotten one starts again with a full burst)."""

    def __init__(
        self,
        per_minute: float,
        burst: int,
        total_per_minute: float,
        total_burst: int,
        max_sources: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_minute, self.burst, self.max_sources, self._clock = per_minute, burst, max_sources, clock
        self.total = RateLimit(total_per_minute, total_burst, clock)
        self._sources: OrderedDict[str, RateLimit] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, source: str) -> tuple[float, str]:
        """(0.0, "") if `source` may act now (counted on both buckets), else the seconds to wait
        and which limit refused: "source" or "total". The source's own bucket is asked first, so
        a client over its rate never spends the shared one; a call the total refuses has spent
        its source token (one token, on a busy server)."""
        with self._lock:
            bucket = self._sources.pop(source, None) or RateLimit(self.per_minute, self.burst, self._clock)
            self._sources[source] = bucket  # most recently used last
            while len(self._sources) > self.max_sources:
                self._sources.popitem(last=False)
        wait = bucket.take()
        if wait > 0:
            return wait, "source"
        wait = self.total.take()
        return (wait, "total") if wait > 0 else (0.0, "")
