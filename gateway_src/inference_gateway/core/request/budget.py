"""One request's token budget: what its rate limits reserved, counted as tokens pass.

The director charges a request's prompt and reserves its output bound (the local
limiter, traffic/ratelimit.py, or the store's, through the view the core defines and
shared_store/ratelimit.py implements, traffic/shared_limits.py); this object follows
the answer. The relay (core/request/relay.py) calls `admit` with each streamed chunk
BEFORE relaying it (`count`, then `grow` when needed):
when the tokens counted outgrow the reservation, `grow` asks the limiter for `step` more
(one store round trip per step, none per chunk) and a refusal means the window has no
room, so the data plane ends the stream with the SSE error event instead of relaying
past the limit. `close` (the lifecycle calls it once, whatever the outcome) settles the
charge: the answer's `usage` when it reported one, else the prompt plus what was counted.
An answer that did not stream is judged whole (`admit_whole`, from its `usage`) by every
data plane that holds one; a refusal says when to retry (`retry_after_s`).

Counting: one token per `"finish_reason"` key in the stream (every chat and completions
chunk carries one per choice, vLLM's usage-only chunk none). An engine that streams
several tokens per event (vLLM `--stream-interval` > 1) is counted per event while the
stream runs and exactly from `usage` at its end.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Protocol

from inference_gateway.core.request.usage import body_output_tokens
from inference_gateway.core.traffic import retry_after
from inference_gateway.core.traffic.ratelimit import RateLimiter
from inference_gateway.core.traffic.shared_limits import Admission, SharedLimiter, Ticket

__all__ = ["LocalBackend", "StoreBackend", "TokenBudget", "grow_step", "store_budget"]

_MARK = b'"finish_reason"'
_CARRY = len(_MARK) - 1


def grow_step(limit: int) -> int:
    """Tokens asked for per extension: a tenth of the limit, 16 to 256."""
    return max(16, min(256, limit // 10))


class BudgetBackend(Protocol):
    async def extend(self, more: int) -> bool: ...
    def settle(self, used_total: int) -> None: ...
    def retry_after_s(self, tokens: int) -> int: ...


@dataclass(slots=True)
class LocalBackend:
    """A reservation in this replica's own buckets."""

    limiter: RateLimiter
    request_id: str
    client: str
    model: str
    charged: int  # committed at admission

    async def extend(self, more: int) -> bool:
        return self.limiter.extend(self.request_id, self.client, self.model, more, time.monotonic())

    def settle(self, used_total: int) -> None:
        self.limiter.settle(
            self.request_id, self.client, self.model, used_total - self.charged, time.monotonic()
        )

    def retry_after_s(self, tokens: int) -> int:
        return self.limiter.retry_after_s(self.client, self.model, tokens, time.monotonic())


@dataclass(slots=True)
class StoreBackend:
    """A reservation in the shared store; the local buckets take over extensions while
    the store is away. Settling is written in the background (the answer has been sent);
    `pending` holds those writes, for the owner to await at shutdown."""

    pending: set[asyncio.Task[None]]
    limiter: SharedLimiter
    ticket: Ticket
    fallback: LocalBackend
    used_fallback: bool = field(default=False)

    async def extend(self, more: int) -> bool:
        granted = await self.limiter.extend(self.ticket, more)
        if granted is None:
            self.used_fallback = True
            return await self.fallback.extend(more)
        return granted

    def settle(self, used_total: int) -> None:
        if self.used_fallback:
            self.fallback.settle(self.fallback.charged)  # drops the local reservation
        task = asyncio.get_running_loop().create_task(self.limiter.settle(self.ticket, used_total))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    def retry_after_s(self, tokens: int) -> int:
        """The store's buckets are read by script only: the longest window, after which
        everything admitted before has left it (an upper bound; reservations of requests
        still running can hold longer, as the local limiter's own estimate says)."""
        if self.used_fallback or not self.ticket.windows_ms:
            return self.fallback.retry_after_s(tokens)
        return retry_after.seconds_from_ms(max(self.ticket.windows_ms))


class TokenBudget:
    __slots__ = (
        "_before",
        "_tail",
        "backend",
        "closed",
        "counted",
        "prompt",
        "refused",
        "reserved",
        "step",
    )

    def __init__(self, backend: BudgetBackend, prompt: int, reserved: int, step: int) -> None:
        self.backend = backend
        self.prompt = prompt  # tokens charged for the prompt (the estimate)
        self.reserved = reserved  # output tokens the request may deliver without asking
        self.step = step
        self.counted = 0  # output tokens seen so far
        self.closed = False
        self._tail = b""
        self._before = 0  # `counted` before the last chunk (what a refusal leaves)
        self.refused = 0  # tokens the last refused extension asked for

    def count(self, chunk: bytes) -> bool:
        """Count the tokens of a streamed chunk; True when they outgrow the reservation
        (the caller must `grow` before relaying the chunk)."""
        data = self._tail + chunk
        self._before = self.counted
        self.counted += data.count(_MARK) - self._tail.count(_MARK)
        self._tail = data[-_CARRY:]
        return self.counted > self.reserved

    def count_whole(self, output_tokens: int) -> bool:
        """A whole answer's output tokens (from its `usage`); True when over."""
        self._before = 0  # refused: nothing of it is delivered
        self.counted = max(self.counted, output_tokens)
        return self.counted > self.reserved

    async def admit_whole(self, body: bytes) -> bool:
        """A whole (non-streamed) answer: False when its `usage` puts the client over
        its window and no extension fits; the data plane then answers a 429 instead of
        the body (an answer whose usage says nothing is let through, and settled as
        counted)."""
        used = body_output_tokens(body)
        return used is None or not self.count_whole(used) or await self.grow()

    def retry_after_s(self) -> int:
        """Seconds until the last refused extension would fit (at least 1)."""
        return retry_after.seconds(self.backend.retry_after_s(self.refused))

    async def admit(self, chunk: bytes) -> bool:
        """The relay's `admit` (core/request/relay.py): count `chunk`, growing the
        reservation when it outgrows it; False: the chunk must not be relayed."""
        return not self.count(chunk) or await self.grow()

    async def grow(self) -> bool:
        """Reserve what was counted plus a step (or, near the limit, just what was
        counted). False: the window is full, and the last chunk is not delivered (the
        count goes back to before it)."""
        need = self.counted - self.reserved
        for more in (need + self.step, need):
            if await self.backend.extend(more):
                self.reserved += more
                return True
        self.refused = need
        self.counted = self._before
        return False

    def close(self, used_total: int | None) -> None:
        """Settle once: `used_total` from the answer's usage, else prompt + counted."""
        if self.closed:
            return
        self.closed = True
        self.backend.settle(used_total if used_total is not None else self.prompt + self.counted)


def store_budget(
    limiter: SharedLimiter,
    admission: Admission,
    request_id: str,
    client: str,
    model: str,
    pending: set[asyncio.Task[None]],
) -> TokenBudget | None:
    """The budget of a request `limiter.check(..., request_id=...)` admitted (None when
    no token limit applies): every server that keeps its limits in the store (`igw
    serve --store`, `igw global`) follows its answers with this one object. An admission
    made by the local fallback (`scope == "local"`) is followed in `limiter.local`."""
    limit = admission.headers.get("x-ratelimit-limit-tokens")
    if limit is None:
        return None
    ticket = admission.ticket
    step = grow_step(int(limit))
    if admission.scope == "local":
        local = LocalBackend(limiter.local, request_id, client, model, ticket.charged)
        return TokenBudget(local, ticket.charged, ticket.reserved, step)
    fallback = LocalBackend(limiter.local, request_id, client, model, 0)
    backend = StoreBackend(pending, limiter, ticket, fallback)
    return TokenBudget(backend, ticket.charged, ticket.reserved, step)
