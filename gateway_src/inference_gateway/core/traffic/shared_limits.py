"""What the core needs of rate limits kept in a shared store: the interface, defined here
and implemented by the store (shared_store/ratelimit.py), so the core sees a view and
never the store (no Redis client, no Lua, no key layout crosses into the core).

A store limiter answers a request's charge with an `Admission` (allowed, the
`x-ratelimit-*` headers, the wait until it would fit, the `Ticket` of what it charged)
or None when the store is away, and follows an admitted request's token budget with
`extend` and `settle` on its ticket (core/request/budget.py). Its `local` limiter is the
fallback the budget continues in while the store is away.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

from inference_gateway.config.spec import RateLimitSpec
from inference_gateway.core.traffic.ratelimit import RateLimiter, TooLarge

__all__ = ["Admission", "SharedLimiter", "SharedLimitsView", "Ticket"]


@dataclass(frozen=True, slots=True)
class Ticket:
    """What a request charged to token buckets, so its course can extend and settle them."""

    request_id: str = ""
    admitted_ms: int = 0  # the store's clock at admission
    token_keys: tuple[str, ...] = ()
    token_limits: tuple[int, ...] = ()
    windows_ms: tuple[int, ...] = ()
    charged: int = 0  # committed at admission (the prompt estimate, or the whole charge)
    reserved: int = 0  # reserved for the output until settled


@dataclass(frozen=True, slots=True)
class Admission:
    allowed: bool
    headers: dict[str, str] = field(default_factory=dict)
    retry_after_s: int = 0
    scope: str = "global"  # "global" (the store) or "local" (fallback)
    ticket: Ticket = field(default_factory=Ticket)
    too_large: TooLarge | None = None  # can never fit: answer 429 "Request too large"


class SharedLimiter(Protocol):
    """One rule list's limits in the store (shared_store `GlobalRateLimiter`)."""

    @property
    def local(self) -> RateLimiter:
        """The same rules in this replica's own buckets: the fallback."""
        ...

    async def check_shared(
        self,
        client: str,
        model: str,
        prompt_tokens: int,
        output_tokens: int = 0,
        *,
        request_id: str = "",
        bounded: bool = True,
    ) -> Admission | None:
        """Charge the request in the store; None when the store is away."""
        ...

    async def extend(self, ticket: Ticket, more: int) -> bool | None:
        """Reserve `more` output tokens; None when the store is away."""
        ...

    async def settle(self, ticket: Ticket, used_tokens: int) -> None:
        """Drop the reservation and count what the request really cost."""
        ...


class SharedLimitsView(Protocol):
    """`igw serve --store`'s limits: one store limiter per rule list, and the settles
    being written in the background (awaited at shutdown)."""

    @property
    def pending(self) -> set[asyncio.Task[None]]: ...

    def limiter(self, rules: list[RateLimitSpec]) -> SharedLimiter: ...

    async def aclose(self) -> None:
        """Wait for the pending settles, then let the store go (at shutdown)."""
        ...
