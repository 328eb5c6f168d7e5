"""Global rate limits: requests and tokens per window (a minute by default) per client and
per model, exact across every replica that shares the store.

One atomic Lua script per request checks every bucket the request falls into and charges
all of them, or none. A bucket is a hash of per-slot counts (`slots` slots per window,
60 by default: one per second of a minute); the script reads the server's own clock
(`TIME`), so replicas with skewed clocks still agree. A slot counts until one whole
window has passed since its END, so the admitted amount in ANY window-long interval is
at most the limit (conservative by at most one slot, never over). `Retry-After` is the
time until enough old slots leave the window for this request to fit.

Tokens are charged up front (the prompt estimate plus `max_tokens`, or a default) and
settled from the answer's `usage` afterwards (`settle`): the difference is added to the
slot that was charged, if that slot is still in the window.

When the store is away (`StoreHealth` says so), `check` falls back to the local token
buckets of `traffic.ratelimit` with each limit (scaled to a minute) divided by
`fallbackReplicas`, so the fleet as a whole stays near the limit; the answer carries
`x-ratelimit-scope: local`.

`igw serve` replicas share limits the same way (`SharedLimits`, `--store URL`): the
gateway config's `rateLimits` (per minute) become one store limiter, rebuilt when a
reload changes the rules; with the store away the gateway uses its own local buckets
(`check_shared` answers None) and settles through `StoreSettle`, which writes the
correction in the background (the answer has been sent; the write is bounded by the
store's `timeoutMs`).

Keys hash the client id and model name (a client sends them; they never appear in
a key as such, and their length is bounded); all keys share one hash tag, so the script
runs on one shard in cluster mode.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from redis.asyncio import Redis

from inference_gateway.config.spec import RateLimitSpec
from inference_gateway.core.traffic.ratelimit import RateLimiter
from inference_gateway.store.client import StoreHealth, StoreUnavailable

__all__ = [
    "Admission",
    "GlobalRateLimitSpec",
    "GlobalRateLimiter",
    "SharedLimits",
    "StoreSettle",
    "Ticket",
]

# KEYS: bucket keys. ARGV: window_ms, slots, then (limit, cost) per key.
# Returns {wait_ms, slot, used_1, ..., used_n} (used after charging when admitted).
CHECK_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local slots = tonumber(ARGV[2])
local slot_ms = window / slots
local slot = math.floor(now / slot_ms)
local first = slot - slots
local wait = 0
local used = {}
for i, key in ipairs(KEYS) do
  local limit = tonumber(ARGV[1 + 2 * i])
  local cost = tonumber(ARGV[2 + 2 * i])
  local fields = redis.call('HGETALL', key)
  local total = 0
  local old = {}
  local live = {}
  for j = 1, #fields, 2 do
    local s = tonumber(fields[j])
    local c = tonumber(fields[j + 1])
    if s < first then
      old[#old + 1] = fields[j]
    else
      total = total + c
      live[#live + 1] = {s, c}
    end
  end
  if #old > 0 then redis.call('HDEL', key, unpack(old)) end
  used[i] = total
  if total + cost > limit then
    table.sort(live, function(a, b) return a[1] < b[1] end)
    local freed = 0
    local w = window + slot_ms
    for _, sc in ipairs(live) do
      freed = freed + sc[2]
      if total - freed + cost <= limit then
        w = (sc[1] + slots + 1) * slot_ms - now
        break
      end
    end
    if w > wait then wait = w end
  end
end
if wait == 0 then
  for i, key in ipairs(KEYS) do
    local cost = tonumber(ARGV[2 + 2 * i])
    redis.call('HINCRBY', key, slot, cost)
    redis.call('PEXPIRE', key, math.ceil(window + 2 * slot_ms))
    used[i] = used[i] + cost
  end
end
local out = {math.ceil(wait), slot}
for i = 1, #used do out[#out + 1] = used[i] end
return out
"""

# KEYS: token bucket keys. ARGV: slot, then one delta per key. Slots already gone stay gone.
SETTLE_SCRIPT = """
for i, key in ipairs(KEYS) do
  if redis.call('HEXISTS', key, ARGV[1]) == 1 then
    redis.call('HINCRBY', key, ARGV[1], ARGV[1 + i])
  end
end
return 1
"""

DEFAULT_MAX_TOKENS = 256  # charged when a request names no max_tokens


class GlobalRateLimitSpec(BaseModel):
    """The global limits; `rules` have the gateway's `RateLimitSpec` shape, their
    per-minute numbers counting per `windowS` (60 by default, a minute)."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    rules: list[RateLimitSpec] = Field(default_factory=list)
    window_s: float = Field(default=60.0, gt=0, le=3600)
    slots: int = Field(default=60, ge=1, le=600)
    fallback_replicas: int = Field(
        default=1, ge=1, description="Replicas sharing the limit when each falls back locally."
    )
    key_prefix: str = Field(default="igw", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")


@dataclass(frozen=True, slots=True)
class Ticket:
    """What a request charged to token buckets, so its `usage` can settle them."""

    slot: int = 0
    token_keys: tuple[str, ...] = ()
    charged: int = 0


@dataclass(frozen=True, slots=True)
class Admission:
    allowed: bool
    headers: dict[str, str] = field(default_factory=dict)
    retry_after_s: int = 0
    scope: str = "global"  # "global" (the store) or "local" (fallback)
    ticket: Ticket = field(default_factory=Ticket)


@dataclass(frozen=True, slots=True)
class _Bucket:
    key: str
    kind: str  # "requests" or "tokens"
    limit: int
    cost: int


class GlobalRateLimiter:
    def __init__(self, spec: GlobalRateLimitSpec, redis: Redis, health: StoreHealth) -> None:
        self.spec = spec
        self.redis = redis
        self.health = health
        self._check = redis.register_script(CHECK_SCRIPT)
        self._settle = redis.register_script(SETTLE_SCRIPT)
        # the local buckets count per minute: scale each limit to a minute, then share it
        scale = 60.0 / spec.window_s / spec.fallback_replicas
        self.local = RateLimiter(
            [
                rule.model_copy(
                    update={
                        "requests_per_minute": _share(rule.requests_per_minute, scale),
                        "tokens_per_minute": _share(rule.tokens_per_minute, scale),
                    }
                )
                for rule in spec.rules
            ]
        )
        self._window_ms = int(spec.window_s * 1000)

    def buckets(self, client: str, model: str, tokens: int) -> list[_Bucket]:
        """Every bucket a request of `client` (the authenticated client id, or the bearer
        key where nothing authenticates) for `model` is charged to."""
        out = []
        for i, rule in enumerate(self.spec.rules):
            wanted = rule.client if rule.client is not None else rule.api_key
            if wanted is not None and wanted != client:
                continue
            if rule.model is not None and rule.model != model:
                continue
            scope_model = model if rule.model is not None else "*"
            for kind, limit, cost in (
                ("requests", rule.requests_per_minute, 1),
                ("tokens", rule.tokens_per_minute, tokens),
            ):
                if limit:
                    out.append(
                        _Bucket(
                            self._key(i, kind, client, scope_model), kind, limit, min(cost, limit)
                        )
                    )
        return out

    def _key(self, rule: int, kind: str, client: str, model: str) -> str:
        digest = hashlib.sha256(f"{rule}\0{kind}\0{client}\0{model}".encode()).hexdigest()[:32]
        return f"{{{self.spec.key_prefix}:rl}}:{digest}"

    async def check(self, client: str, model: str, tokens: int) -> Admission:
        """Charge one request and `tokens` to every matching bucket, or to none."""
        admission = await self.check_shared(client, model, tokens)
        return self._local(client, model, tokens) if admission is None else admission

    async def check_shared(self, client: str, model: str, tokens: int) -> Admission | None:
        """`check` in the store only: None when the store is away (the caller's own
        local buckets decide then)."""
        buckets = self.buckets(client, model, tokens)
        if not buckets:
            return Admission(True)
        args: list[int] = [self._window_ms, self.spec.slots]
        for b in buckets:
            args += [b.limit, b.cost]
        try:
            result = await self.health.call(
                lambda: self._check(keys=[b.key for b in buckets], args=args)
            )
        except StoreUnavailable:
            return None
        wait_ms, slot, *used = (int(v) for v in result)
        headers = _headers(buckets, used, wait_ms)
        if wait_ms > 0:
            return Admission(False, headers, max(1, math.ceil(wait_ms / 1000)))
        token_keys = tuple(b.key for b in buckets if b.kind == "tokens")
        charged = next((b.cost for b in buckets if b.kind == "tokens"), 0)
        return Admission(True, headers, ticket=Ticket(slot, token_keys, charged))

    async def settle(self, ticket: Ticket, used_tokens: int) -> None:
        """Correct the token buckets by what the answer's `usage` says it really cost."""
        if not ticket.token_keys or used_tokens == ticket.charged:
            return
        delta = used_tokens - ticket.charged
        keys = list(ticket.token_keys)
        try:
            await self.health.call(
                lambda: self._settle(keys=keys, args=[ticket.slot, *([delta] * len(keys))])
            )
        except StoreUnavailable:
            return  # the local buckets were charged the estimate; nothing to correct

    def _local(self, client: str, model: str, tokens: int) -> Admission:
        decision = self.local.check(client, model, tokens, time.monotonic())
        headers = {**decision.headers, "x-ratelimit-scope": "local"}
        return Admission(decision.allowed, headers, decision.retry_after_s, scope="local")


class SharedLimits:
    """`igw serve`'s per-minute `rateLimits`, kept in the store for every replica: one
    `GlobalRateLimiter` per rule list (a config reload that changes the rules builds a
    new one), all on one client and one health state."""

    def __init__(self, redis: Redis, health: StoreHealth, key_prefix: str = "igw-serve") -> None:
        self.redis = redis
        self.health = health
        self.key_prefix = key_prefix  # apart from the global router's keys in a shared store
        self._rules: list[RateLimitSpec] | None = None
        self._limiter: GlobalRateLimiter | None = None
        self.pending: set[asyncio.Task[None]] = set()  # settles being written

    def limiter(self, rules: list[RateLimitSpec]) -> GlobalRateLimiter:
        if self._limiter is None or rules is not self._rules:
            spec = GlobalRateLimitSpec(rules=rules, key_prefix=self.key_prefix)
            self._rules, self._limiter = rules, GlobalRateLimiter(spec, self.redis, self.health)
        return self._limiter

    async def aclose(self) -> None:
        if self.pending:
            await asyncio.gather(*self.pending, return_exceptions=True)
        await self.redis.aclose()


@dataclass(frozen=True, slots=True)
class StoreSettle:
    """The lifecycle's settle hook for a store charge (the local `RateLimiter.settle`
    signature): the correction is written in the background, the request does not wait."""

    shared: SharedLimits
    limiter: GlobalRateLimiter
    ticket: Ticket

    def settle(self, api_key: str, model: str, charged: int, used: int, now: float) -> None:
        if not self.ticket.token_keys or used == self.ticket.charged:
            return
        task = asyncio.get_running_loop().create_task(self.limiter.settle(self.ticket, used))
        self.shared.pending.add(task)
        task.add_done_callback(self.shared.pending.discard)


def _share(limit: int | None, scale: float) -> int | None:
    return None if limit is None else max(1, int(limit * scale))


def _headers(buckets: list[_Bucket], used: list[int], wait_ms: int) -> dict[str, str]:
    """OpenAI's `x-ratelimit-*` headers from the tightest bucket of each kind."""
    headers: dict[str, str] = {"x-ratelimit-scope": "global"}
    tightest: dict[str, int] = {}
    for b, u in zip(buckets, used, strict=True):
        remaining = max(0, b.limit - u)
        if b.kind in tightest and tightest[b.kind] <= remaining:
            continue
        tightest[b.kind] = remaining
        headers[f"x-ratelimit-limit-{b.kind}"] = str(b.limit)
        headers[f"x-ratelimit-remaining-{b.kind}"] = str(remaining)
        if wait_ms > 0:
            headers[f"x-ratelimit-reset-{b.kind}"] = f"{math.ceil(wait_ms / 1000)}s"
    return headers
