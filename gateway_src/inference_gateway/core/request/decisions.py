"""The recent decisions of one replica, so `igw explain REQUEST_ID` needs no tracing backend.

A ring of the last `capacity` requests (`tracing.explain.recent`, 10,000 by default),
each one record: the ids it can be found by (the internal id, the client's
`x-request-id`, the trace id) and its summary, encoded once as JSON bytes when the
request ends. The ring holds bytes, not objects: a record's size is bounded by what a
summary keeps (`Explanation.summary`: the best 5 candidates, 5 names per exclusion
reason, ids cut to `MAX_ID_CHARS`), never by the pool's size, and the oldest record goes
when the ring is full. bench/decision_log_memory.py measures it: about 1 KiB a record, so
~10 MB for the default 10,000.

Lookups scan the ring (a debugging call, not a hot path), so no index is keyed by a
value a client chose: two requests that sent the same `x-request-id` are both answered.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson

__all__ = ["DEFAULT_RECENT", "MAX_ID_CHARS", "DecisionLog", "Record"]

DEFAULT_RECENT = 10_000
MAX_ID_CHARS = 128  # a client's x-request-id is kept this long at most


class Record(NamedTuple):
    internal_id: str
    client_id: str
    trace_id: str
    blob: bytes  # the summary, JSON

    def matches(self, wanted: str) -> bool:
        return wanted in (self.internal_id, self.client_id, self.trace_id)

    def document(self) -> dict[str, Any]:
        out: dict[str, Any] = orjson.loads(self.blob)
        return out


class DecisionLog:
    """A bounded ring of decision records (`capacity` 0 keeps none)."""

    def __init__(self, capacity: int = DEFAULT_RECENT) -> None:
        self.capacity = capacity
        self._ring: deque[Record] = deque(maxlen=capacity or 1)

    def __len__(self) -> int:
        return len(self._ring) if self.capacity else 0

    def __iter__(self) -> Iterator[Record]:
        return iter(self._ring if self.capacity else ())

    def record(
        self, internal_id: str, client_id: str, trace_id: str, summary: dict[str, Any]
    ) -> None:
        if not self.capacity:
            return
        client_id = client_id[:MAX_ID_CHARS]
        summary = {
            "id": internal_id,
            "requestId": client_id,
            "traceId": trace_id,
            "time": round(time.time(), 3),
            **summary,
        }
        self._ring.append(Record(internal_id, client_id, trace_id, orjson.dumps(summary)))

    def find(self, wanted: str) -> list[dict[str, Any]]:
        """Every kept record whose internal id, request id or trace id is `wanted`, newest
        first."""
        wanted = wanted[:MAX_ID_CHARS]
        return [r.document() for r in reversed(self._ring) if self.capacity and r.matches(wanted)]

    def recent(self, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` records, newest first."""
        if not self.capacity:
            return []
        out: list[dict[str, Any]] = []
        for record in reversed(self._ring):
            if len(out) >= limit:
                break
            out.append(record.document())
        return out

    def nbytes(self) -> int:
        """Bytes the kept records hold (blobs and ids; the ring's own slots aside)."""
        return sum(
            len(r.blob) + len(r.internal_id) + len(r.client_id) + len(r.trace_id)
            for r in self._ring
        )
