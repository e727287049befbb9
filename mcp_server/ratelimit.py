"""A token bucket: how often a caller may do something expensive, such as queue a skill.

Thread-safe; time comes from an injectable monotonic clock so tests can move it. It refuses
rather than waits: a refused call is told when to retry, and no thread sits blocked."""

from __future__ import annotations

import threading
import time
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
