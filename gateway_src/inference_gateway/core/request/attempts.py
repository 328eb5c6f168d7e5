"""Where a request may go next: one attempt plan over ranked targets, pods (`igw serve`,
frontends/proxy.py) or clusters (`igw global` and the fleet simulator, sim/fleet/tier.py),
so every tier follows the same rules.

A request is ranked once; the plan says, after each attempt, whether the next target of
that ranking may be tried, what the target's score learns and what the client is told
when it ends there. A retry is safe only when the target cannot be generating the
answer: a second target would otherwise generate it again for the same client (or for
nobody), and a generation longer than the read timeout would run once per attempt.

Both outbound clients raise one error tree (errors.py `UpstreamError`): the lean HTTP/1.1
client for pods raises it itself (transport/http1_client.py), aiohttp's errors for
clusters are translated into it in one place (transport/aiohttp_errors.py). `failure_of`
reads that tree, so "never started, may be retried" is decided here and only here.

    what happened (before a byte reached the client)   retry  drain  failure  client
    refused: connect refused, failed or timed out, or    yes    yes    yes     502
      closed before any byte of an answer
      (`UpstreamConnectError`, `before_response`)
    drained: the router drained the cluster while        yes    -      -       502
      waiting for its first byte (and closed the
      connection, so a cluster still alive aborts)
    timeout: silent past firstByteTimeoutMs /            no     -      yes     504
      readTimeoutMs (`UpstreamTimeout`)
    broken: the answer began and broke before its        no     -      yes     502
      first byte was relayed (any other `UpstreamError`)
    a refusal status (429, 503: admission said no)       yes    -    5xx only  as is*
    any other status                                       no     -    5xx only  as is

    * the last attempt's refusal is relayed to the client as it came (its Retry-After
      too); a refusal with another target left is retried.

After the first byte reached the client the plan's word is `after_break`: an answer that
broke or stalled counts as a failed attempt, a stalled target is drained, and the
request goes on to the next target (`next_index`) only where the plan resumes
(`resume`: `igw global`'s config `migration`, tier 2): the continuation, re-issued with
the text already delivered and spliced into the same client stream, is core/request/
resume.py's (one implementation for both tiers). Where the plan does not resume, the
relay ends the stream with an SSE error event (relay.py). At tier 1 `igw serve` arms
resume.py itself from its config's `migration` and opens each continuation by this
plan's rules for a first attempt (`after_error`); its plan keeps `resume` off. With no
routable cluster at all the client gets 503 `no_routable_cluster`.

Behind Envoy the picker only names fallback pods (`PickerOptions.fallbacks`); Envoy's own
retry policy decides when to use them, and should be set to the same rule
(`connect-failure`, `refused-stream`, `reset-before-request`; no `5xx`, no per-try
timeout retries).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from inference_gateway.core.request.relay import StreamEnd
from inference_gateway.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout

__all__ = ["REFUSAL_STATUSES", "AttemptPlan", "Failure", "Verdict"]

REFUSAL_STATUSES = frozenset({429, 503})  # "not started here, try elsewhere"
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
    """What one attempt's end means: `retry` the next target; `drain` this one now (it is
    gone); count it as a `failed` attempt in the target's error score; the `status` and
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
    """`max_attempts` targets at most per request (`igw global`'s `maxAttempts`; 3 pods
    for `igw serve`); `refusal_statuses` are the answers that mean "not started here";
    `resume`: a stream that breaks after its first byte goes on at the next target."""

    max_attempts: int = 3
    refusal_statuses: frozenset[int] = REFUSAL_STATUSES

    resume: bool = False

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")

    def targets(self, ranked: Sequence[T]) -> list[T]:
        """The targets to try, in order, when none can leave the ranking meanwhile (pods:
        a pod found unreachable is marked by the endpoint store, not skipped here)."""
        return list(ranked[: self.max_attempts])

    def next_index(
        self, ranked: Sequence[T], after: int, made: int, routable: Callable[[T], bool]
    ) -> int | None:
        """The place in `ranked` of the next target to try after place `after` (-1: the
        first) when `made` attempts were made: the next one still routable (drained since
        the ranking was made: skipped, no timeout spent on it), within `max_attempts`."""
        if made >= self.max_attempts:
            return None
        return next((i for i in range(after + 1, len(ranked)) if routable(ranked[i])), None)

    @staticmethod
    def failure_of(error: UpstreamError) -> Failure:
        """What an outbound error means for the attempt: the one reading of "never
        started" (a timeout never counts as that: the engine may be generating)."""
        if isinstance(error, UpstreamTimeout):
            return Failure.TIMEOUT
        if isinstance(error, UpstreamConnectError) or error.before_response:
            return Failure.REFUSED
        return Failure.BROKEN

    @staticmethod
    def after_failure(failure: Failure) -> Verdict:
        return _FAILURES[failure]

    def after_error(self, error: UpstreamError) -> Verdict:
        """`after_failure` of an outbound error (`failure_of`)."""
        return self.after_failure(self.failure_of(error))

    def after_status(self, status: int) -> Verdict:
        """An answer's status line: a refusal may go elsewhere, anything else is the answer."""
        return Verdict(
            status in self.refusal_statuses, False, status >= 500, status, "cluster_answer"
        )

    def after_break(self, end: StreamEnd) -> Verdict:
        """An answer that broke or stalled (`end`) after its first byte reached the
        client: counted as a failed attempt, a stalled target drained; retried (resumed:
        the continuation goes to `next_index`) only where the plan resumes, since the
        client already holds part of the answer and only a continuation can follow it."""
        stalled = end is StreamEnd.STALLED
        return Verdict(self.resume, stalled, True, 502, end.value)

    @staticmethod
    def nothing_routable() -> Verdict:
        return NO_ROUTABLE
