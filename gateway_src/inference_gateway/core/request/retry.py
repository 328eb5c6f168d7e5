"""When a request may go to another pod: one policy for both data planes.

A retry is safe only when the engine never started the work. Retrying anything else
multiplies it: a generation longer than the read timeout would run once per attempt and
still end in an error. So:

* retried: the connection was refused or failed (`UpstreamConnectError`), or the pod
  closed it before a single byte of its answer (a pooled connection the pod had just
  dropped, an engine that died before reading);
* retried: an answer whose status says the server refused the request without starting
  it (429 overloaded, 503 not ready), while another ranked pod is left;
* never retried: a timeout (the engine may still be generating: the client gets 504), an
  answer that broke after its first byte, any other status (passed to the client as is).

The standalone proxy applies it itself. Behind Envoy the picker only names fallback pods
(`PickerOptions.fallbacks`); Envoy's own retry policy decides when to use them, and
should be set to the same rule (`connect-failure`, `refused-stream`, `reset-before-request`;
no `5xx`, no per-try timeout retries).
"""

from __future__ import annotations

from dataclasses import dataclass

from inference_gateway.core.request.attempts import REFUSAL_STATUSES
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`max_attempts` pods at most per request; `refusal_statuses` are the answers that
    mean "not started here, try elsewhere"."""

    max_attempts: int = 3
    refusal_statuses: frozenset[int] = REFUSAL_STATUSES  # the global router's too

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")

    @staticmethod
    def never_reached_engine(error: UpstreamError) -> bool:
        """True when the pod cannot have started on the request."""
        if isinstance(error, UpstreamTimeout):
            return False
        return isinstance(error, UpstreamConnectError) or error.before_response

    def attempts(self, ranked: list[Endpoint]) -> list[Endpoint]:
        """The pods to try, in order."""
        return ranked[: self.max_attempts]

    def retry_error(self, error: UpstreamError) -> bool:
        """May the next pod be tried after `error`?"""
        return self.never_reached_engine(error)

    def retry_status(self, status: int) -> bool:
        """May the next pod be tried after an answer with `status`?"""
        return status in self.refusal_statuses
