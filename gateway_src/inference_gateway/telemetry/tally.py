"""Counting a flood of like events (refused credentials, malformed requests) without a
log line each: a counter per reason for `/metrics`, and at most one summary line per
interval in the log.

Why: a refusal is what a hostile client can produce at will. One line each (plus an
access-log line) was ~218 bytes, ~1.5 GB an hour at 2,000 refusals a second: the disk
or the log pipeline fails before the gateway does. The first event after a quiet
interval is logged at once (an operator sees a problem start), later ones are summed
into the next line, and the counter says how many there were in any case, so an alert
reads the metric, never the log.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

__all__ = ["Tally"]

LOG_INTERVAL_S = 10.0


class Tally:
    """`record(reason)` counts one event; `collector()` exports the counts.

    The summary line names the reasons and their counts only: what an event carried
    (a credential, a header) is never part of it."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        level: int = logging.INFO,
        interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.what = what
        self.level = level
        self.interval_s = interval_s
        self.clock = clock
        self.totals: Counter[str] = Counter()  # since start: the metric
        self._since: Counter[str] = Counter()  # since the last line
        self._next_line = float("-inf")
        self._last_line = clock()

    def record(self, reason: str) -> None:
        self.totals[reason] += 1
        self._since[reason] += 1
        now = self.clock()
        if now < self._next_line:
            return
        counts = ", ".join(f"{r} {n}" for r, n in sorted(self._since.items()))
        total = sum(self._since.values())
        elapsed = now - self._last_line
        self.logger.log(
            self.level, "%s: %d in the last %.0f s (%s)", self.what, total, elapsed, counts
        )
        self._since.clear()
        self._last_line = now
        self._next_line = now + self.interval_s

    def collector(self, name: str, documentation: str, label: str = "reason") -> Collector:
        """A Prometheus collector of the totals as counter `name` (`_total` added)."""
        return _TallyCollector(self, name, documentation, label)


class _TallyCollector(Collector):
    def __init__(self, tally: Tally, name: str, documentation: str, label: str) -> None:
        self.tally = tally
        self.name = name
        self.documentation = documentation
        self.label = label

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=[self.label])
        for reason, count in sorted(self.tally.totals.items()):
            family.add_metric([reason], count)
        yield family
