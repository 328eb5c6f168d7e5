"""Where a global-router request may go next: one attempt plan for `igw global` and the
fleet simulator (`sim/fleet/tier.py`), so both follow the same rules.

A request is ranked over the clusters once; the plan says, after each attempt, whether
the next routable cluster of that ranking may be tried, what the cluster's score learns
and what the client is told when it ends there. The rule is the one the proxy's
`RetryPolicy` applies to pods: a retry is safe only when the cluster cannot be
generating the answer, because a second cluster would otherwise generate it again for
the same client (or for nobody).

    what happened (before a byte reached the client)   retry  drain  failure  client
    refused: connect refused or failed, or closed        yes    yes    yes     502
      before any byte of an answer
    drained: the router drained the cluster while        yes    -      -       502
      waiting for its first byte (and closed the
      connection, so a cluster still alive aborts)
    timeout: silent past firstByteTimeoutMs / readTimeoutMs  no   -    yes     504
    broken: the answer began and broke before its         no     -      yes     502
      first byte was relayed
    a refusal status (429, 503: admission said no)       yes    -    5xx only  as is*
    any other status                                       no     -    5xx only  as is

    * the last attempt's refusal is relayed to the client as it came (its Retry-After
      too); a refusal with another cluster left is retried.

After the first byte reached the client nothing is retried (relay.py ends a stream
that breaks or stalls with an SSE error event). With no routable cluster at all the
client gets 503 `no_routable_cluster`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

__all__ = ["REFUSAL_STATUSES", "AttemptPlan", "Failure", "Verdict"]

REFUSAL_STATUSES = frozenset({429, 503})  # "not started here": the proxy's RetryPolicy too
T = TypeVar("T")


class Failure(Enum):
    """Why an attempt ended before its first byte reached the client (the values are the
    `reason` label of `igw_global_retries_total`)."""

    REFUSED = "connect_failed"
    DRAINED = "cluster_drained"
    TIMEOUT = "timeout"
    BROKEN = "broke_before_first_byte"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one attempt's end means: `retry` the next cluster; `drain` this one now (it is
    gone); count it as a `failed` attempt in the cluster's error score; the `status` and
    `code` the client gets when the request ends with it."""

    retry: bool
    drain: bool
    failed: bool
    status: int
    code: str


_FAILURES = {
    Failure.REFUSED: Verdict(True, True, True, 502, "no_cluster_answered"),
    Failure.DRAINED: Verdict(True, False, False, 502, "no_cluster_answered"),
    Failure.TIMEOUT: Verdict(False, False, True, 504, "cluster_timeout"),
    Failure.BROKEN: Verdict(False, False, True, 502, "cluster_answer_broken"),
}
NO_ROUTABLE = Verdict(False, False, False, 503, "no_routable_cluster")


@dataclass(frozen=True, slots=True)
class AttemptPlan:
    """`max_attempts` clusters at most per request (the config's `maxAttempts`)."""

    max_attempts: int = 3
    refusal_statuses: frozenset[int] = REFUSAL_STATUSES

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")

    def next_index(
        self, ranked: Sequence[T], after: int, made: int, routable: Callable[[T], bool]
    ) -> int | None:
        """The place in `ranked` of the next cluster to try after place `after` (-1: the
        first) when `made` attempts were made: the next one still routable (drained since
        the ranking was made: skipped, no timeout spent on it), within `max_attempts`."""
        if made >= self.max_attempts:
            return None
        return next((i for i in range(after + 1, len(ranked)) if routable(ranked[i])), None)

    @staticmethod
    def after_failure(failure: Failure) -> Verdict:
        return _FAILURES[failure]

    def after_status(self, status: int) -> Verdict:
        """An answer's status line: a refusal may go elsewhere, anything else is the answer."""
        return Verdict(
            status in self.refusal_statuses, False, status >= 500, status, "cluster_answer"
        )

    @staticmethod
    def nothing_routable() -> Verdict:
        return NO_ROUTABLE
