"""The recent decisions of one replica, so `igw explain REQUEST_ID` needs no tracing backend.

A ring of the last `capacity` requests (`tracing.explain.recent`, 10,000 by default),
each one record: the ids it can be found by (the internal id, the client's
`x-request-id`, the trace id) and its fields, encoded once as JSON bytes when the
request ends, positionally (`RequestLifecycle.compact`, `Explanation.compact`: a few
microseconds); names are put on when a record is read (`expand_record`). The ring holds
bytes, not objects: a record's size is bounded by what it keeps (the best 5 candidates,
5 names per exclusion reason, ids cut to `MAX_ID_CHARS`), never by the pool's size, and
the oldest record goes when the ring is full. bench/decision_log_memory.py measures what
the ring holds.

Lookups scan the ring (a debugging call, not a hot path), so no index is keyed by a
value a client chose: two requests that sent the same `x-request-id` are both answered.

The ring keeps each record as a plain tuple of strings, a float and bytes, which
CPython's cyclic collector stops tracking the first time it looks at one; a `Record`
(a NamedTuple, which it tracks for good) is made only when the ring is read. Kept as
NamedTuples, a full ring was 10,000 more objects for the collector's older generations
to walk, and a second's worth of new ones for every young collection.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import orjson

from inference_gateway.core.scheduling.explain import expand

__all__ = [
    "DEFAULT_RECENT",
    "MAX_ID_CHARS",
    "RECORD_FIELDS",
    "DecisionLog",
    "Record",
    "expand_record",
]

DEFAULT_RECENT = 10_000
MAX_ID_CHARS = 128  # a client's x-request-id is kept this long at most
#: the names of `RequestLifecycle.compact`'s fields, in order
RECORD_FIELDS = (
    "model",
    "targetModel",
    "pool",
    "band",
    "profile",
    "tried",
    "prefillPod",
    "outcome",
    "status",
    "queuedS",
    "scheduleS",
    "ttftS",
    "promptTokensEstimate",
    "inputTokens",
    "outputTokens",
    "cachedTokens",
    "explanation",
)
_SECONDS = ("queuedS", "scheduleS", "ttftS")


def expand_record(fields: list[Any]) -> dict[str, Any]:
    """A tier-1 record's fields, named (times rounded to the microsecond)."""
    out = dict(zip(RECORD_FIELDS, fields, strict=True))
    for key in _SECONDS:
        if out[key] is not None:
            out[key] = round(out[key], 6)
    if out["explanation"] is not None:
        out["explanation"] = expand(out["explanation"])
    return out


_Kept = tuple[str, str, str, float, bytes]  # a `Record`'s fields, as the ring holds them


class Record(NamedTuple):
    internal_id: str
    client_id: str
    trace_id: str
    time: float
    blob: bytes  # the fields, JSON


class DecisionLog:
    """A bounded ring of decision records (`capacity` 0 keeps none). `expand` names a
    record's fields when it is read (tier 1's `expand_record`; tier 2 keeps a dict)."""

    def __init__(
        self,
        capacity: int = DEFAULT_RECENT,
        expand: Callable[[Any], dict[str, Any]] = expand_record,
    ) -> None:
        self.capacity = capacity
        self.expand = expand
        self._ring: deque[_Kept] = deque(maxlen=capacity or 1)

    def __len__(self) -> int:
        return len(self._ring) if self.capacity else 0

    def __iter__(self) -> Iterator[Record]:
        return map(Record._make, self._ring if self.capacity else ())

    def record(self, internal_id: str, client_id: str, trace_id: str, fields: Any) -> None:
        if not self.capacity:
            return
        client_id = client_id[:MAX_ID_CHARS]
        # a copy of exactly its size: orjson's own bytes keep its growth buffer (4 KiB)
        blob = bytes(memoryview(orjson.dumps(fields)))
        self._ring.append((internal_id, client_id, trace_id, time.time(), blob))

    def document(self, record: Record) -> dict[str, Any]:
        return {
            "id": record.internal_id,
            "requestId": record.client_id,
            "traceId": record.trace_id,
            "time": round(record.time, 3),
            **self.expand(orjson.loads(record.blob)),
        }

    def find(self, wanted: str) -> list[dict[str, Any]]:
        """Every kept record whose internal id, request id or trace id is `wanted`, newest
        first."""
        wanted = wanted[:MAX_ID_CHARS]
        return [
            self.document(Record._make(kept))
            for kept in reversed(self._ring)
            if self.capacity and wanted in kept[:3]
        ]

    def recent(self, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` records, newest first."""
        if not self.capacity:
            return []
        out: list[dict[str, Any]] = []
        for kept in reversed(self._ring):
            if len(out) >= limit:
                break
            out.append(self.document(Record._make(kept)))
        return out

    def nbytes(self) -> int:
        """Bytes the kept records hold (blobs and ids; the ring's own slots aside)."""
        return sum(
            len(blob) + len(internal_id) + len(client_id) + len(trace_id)
            for internal_id, client_id, trace_id, _, blob in self._ring
        )
