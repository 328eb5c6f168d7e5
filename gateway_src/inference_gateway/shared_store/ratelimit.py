"""Global rate limits: requests and tokens per window (a minute unless a rule or the spec
sets `windowS`) per client and per model, exact across every replica that shares the
store, with the local limiter's rules (core/traffic/ratelimit.py says why each part is there).

One atomic Lua script per step checks every bucket the request falls into and charges
all of them, or none. A bucket is a hash of per-slot counts (`slots` slots per window,
60 by default) plus one reservation field per request in flight; the scripts read the
server's own clock (`TIME`), so replicas with skewed clocks still agree. A slot counts
until one whole window has passed since its END, a reservation until it is settled, so
what any window-long interval delivers is at most the limit. `Retry-After` is the time
until enough old slots leave the window for this request to fit (the script measures it
in milliseconds; core/traffic/retry_after.py makes it the client's whole seconds).

The steps of a request: `check` commits the prompt estimate and reserves the output
bound (a request bigger than the whole limit is `too_large`, nothing stored); `extend`
reserves more for a stream that outgrew its reservation (core/request/budget.py asks,
in steps, before relaying more); `settle` drops the reservation and counts what the
answer really delivered in the slot of that moment (an overestimated prompt comes back
off its admission slot). A reservation carries a lease (the gateway's maximum request
lifetime): one left by a replica that died mid-request stops counting when it ends.

When the store is away (`StoreHealth` says so), `check` falls back to the local
limiter with the same windows and each limit divided by `fallbackReplicas`, so the
fleet as a whole stays near the limit; the answer carries `x-ratelimit-scope: local`.

`igw serve` replicas share limits the same way (`SharedLimits`, `--store URL`): the
gateway config's `rateLimits` become one store limiter, rebuilt when a reload changes
the rules; with the store away the gateway uses its own local limiter (`check_shared`
answers None). Settling is written in the background (the answer has been sent; the
write is bounded by the store's `timeoutMs`).

Keys are a digest of rule, kind, client id and model name (a client sends them; they
never appear in a key as such, and a key's length is fixed); all keys share one hash
tag, so the scripts run on one shard in cluster mode, and every key expires a window
after its last slot (or when its last lease ends).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from redis.asyncio import Redis

from inference_gateway.config.spec import RateLimitSpec
from inference_gateway.config.store import GlobalRateLimitSpec
from inference_gateway.core.traffic import retry_after
from inference_gateway.core.traffic.ratelimit import (
    DEFAULT_MAX_TOKENS,
    RateLimiter,
    TooLarge,
    bucket_digest,
)
from inference_gateway.core.traffic.shared_limits import Admission, Ticket
from inference_gateway.shared_store.client import StoreHealth, StoreUnavailable

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "Admission",
    "GlobalRateLimitSpec",
    "GlobalRateLimiter",
    "SharedLimits",
    "Ticket",
]

# The three scripts share one reading of a bucket (`SCAN`): numeric fields are slots
# (count per slot), `r:<request id>` fields are reservations ("amount:expiry_ms", an
# expired one no longer counts: a replica that died mid-request frees its reservation
# when the lease ends). Old slots and expired reservations are deleted as they are read.
SCAN = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function scan(key, window, slots)
  local slot_ms = window / slots
  local slot = math.floor(now / slot_ms)
  local first = slot - slots
  local fields = redis.call('HGETALL', key)
  local total = 0
  local old = {}
  local live = {}
  for j = 1, #fields, 2 do
    local f = fields[j]
    local v = fields[j + 1]
    if string.sub(f, 1, 2) == 'r:' then
      local amount, expiry = string.match(v, '^(%d+):(%d+)$')
      if amount == nil or tonumber(expiry) < now then
        old[#old + 1] = f
      else
        total = total + tonumber(amount)
      end
    else
      local s = tonumber(f)
      if s < first then
        old[#old + 1] = f
      else
        total = total + tonumber(v)
        live[#live + 1] = {s, tonumber(v)}
      end
    end
  end
  if #old > 0 then redis.call('HDEL', key, unpack(old)) end
  return total, live, slot, slot_ms
end
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, math.ceil(ms)) end
end
"""

# KEYS: bucket keys. ARGV: request id, lease_ms, slots, then (limit, commit, reserve,
# window_ms) per key. Commits `commit` to this slot and reserves `reserve` for the request
# in every bucket, or nothing. Returns {wait_ms, now_ms, used_1, ..., used_n}.
CHECK_SCRIPT = (
    SCAN
    + """
local rid = ARGV[1]
local lease = tonumber(ARGV[2])
local slots = tonumber(ARGV[3])
local wait = 0
local used = {}
for i, key in ipairs(KEYS) do
  local limit = tonumber(ARGV[4 * i])
  local cost = tonumber(ARGV[4 * i + 1]) + tonumber(ARGV[4 * i + 2])
  local window = tonumber(ARGV[4 * i + 3])
  local total, live, _, slot_ms = scan(key, window, slots)
  used[i] = total
  if total + cost > limit then
    table.sort(live, function(a, b) return a[1] < b[1] end)
    local freed = 0
    local w = window + slot_ms  -- held by reservations: about a window
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
    local commit = tonumber(ARGV[4 * i + 1])
    local reserve = tonumber(ARGV[4 * i + 2])
    local window = tonumber(ARGV[4 * i + 3])
    local slot_ms = window / slots
    local s = math.floor(now / slot_ms)
    if commit > 0 then redis.call('HINCRBY', key, s, commit) end
    local ttl = window + 2 * slot_ms
    if reserve > 0 then
      redis.call('HSET', key, 'r:' .. rid, reserve .. ':' .. (now + lease))
      if lease > ttl then ttl = lease end
    end
    keep(key, ttl)
    used[i] = used[i] + commit + reserve
  end
end
local out = {math.ceil(wait), now}
for i = 1, #used do out[#out + 1] = used[i] end
return out
"""
)

# KEYS: token bucket keys. ARGV: request id, lease_ms, slots, then (limit, more, window_ms)
# per key. Adds `more` to the request's reservation everywhere (renewing its lease), or
# nowhere: 1 or 0.
EXTEND_SCRIPT = (
    SCAN
    + """
local rid = 'r:' .. ARGV[1]
local lease = tonumber(ARGV[2])
local slots = tonumber(ARGV[3])
local held = {}
for i, key in ipairs(KEYS) do
  local limit = tonumber(ARGV[3 * i + 1])
  local more = tonumber(ARGV[3 * i + 2])
  local total = scan(key, tonumber(ARGV[3 * i + 3]), slots)
  if total + more > limit then return 0 end
  local current = redis.call('HGET', key, rid)
  held[i] = (current and tonumber(string.match(current, '^(%d+):')) or 0) + more
end
for i, key in ipairs(KEYS) do
  redis.call('HSET', key, rid, held[i] .. ':' .. (now + lease))
  keep(key, lease)
end
return 1
"""
)

# KEYS: token bucket keys. ARGV: request id, admission time (ms), slots, then (delta,
# window_ms) per key. Drops the request's reservation; a positive delta (tokens delivered beyond the
# commit) counts in this slot, a negative one (the prompt was overestimated) comes off the
# admission slot while it is still in the window.
SETTLE_SCRIPT = (
    SCAN
    + """
local rid = 'r:' .. ARGV[1]
local admitted_ms = tonumber(ARGV[2])
local slots = tonumber(ARGV[3])
for i, key in ipairs(KEYS) do
  local delta = tonumber(ARGV[2 * i + 2])
  local window = tonumber(ARGV[2 * i + 3])
  local total, live, slot, slot_ms = scan(key, window, slots)
  redis.call('HDEL', key, rid)
  if delta > 0 then
    redis.call('HINCRBY', key, slot, delta)
    keep(key, window + 2 * slot_ms)
  elseif delta < 0 then
    local admitted = math.floor(admitted_ms / slot_ms)
    local there = tonumber(redis.call('HGET', key, admitted) or '0')
    if there > 0 then redis.call('HINCRBY', key, admitted, math.max(delta, -there)) end
  end
end
return 1
"""
)

DEFAULT_LEASE_S = 3600.0  # a reservation's life: the gateway's maximum request lifetime


@dataclass(frozen=True, slots=True)
class _Bucket:
    key: str
    kind: str  # "requests" or "tokens"
    limit: int
    commit: int
    reserve: int
    window_ms: int


class GlobalRateLimiter:
    """The store's limits for one rule list: the core's `SharedLimiter`
    (core/traffic/shared_limits.py, where `Admission` and `Ticket` are defined)."""

    def __init__(
        self,
        spec: GlobalRateLimitSpec,
        redis: Redis,
        health: StoreHealth,
        *,
        lease_s: float = DEFAULT_LEASE_S,
    ) -> None:
        self.spec = spec
        self.redis = redis
        self.health = health
        self.lease_ms = int(lease_s * 1000)
        self._check = redis.register_script(CHECK_SCRIPT)
        self._extend = redis.register_script(EXTEND_SCRIPT)
        self._settle = redis.register_script(SETTLE_SCRIPT)
        # the fallback: the same rules and windows, each limit shared by the replicas
        share = 1.0 / spec.fallback_replicas
        self.local = RateLimiter(
            [
                rule.model_copy(
                    update={
                        "requests_per_minute": _share(rule.requests_per_minute, share),
                        "tokens_per_minute": _share(rule.tokens_per_minute, share),
                    }
                )
                for rule in spec.rules
            ],
            window_s=spec.window_s,
            slots=spec.slots,
        )

    def buckets(
        self, client: str, model: str, prompt_tokens: int, output_tokens: int = 0
    ) -> list[_Bucket]:
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
            window_ms = int((rule.window_s or self.spec.window_s) * 1000)
            if rule.requests_per_minute:
                key = self._key(i, "requests", client, scope_model)
                out.append(_Bucket(key, "requests", rule.requests_per_minute, 1, 0, window_ms))
            if rule.tokens_per_minute:
                key = self._key(i, "tokens", client, scope_model)
                limit = rule.tokens_per_minute
                out.append(_Bucket(key, "tokens", limit, prompt_tokens, output_tokens, window_ms))
        return out

    def _key(self, rule: int, kind: str, client: str, model: str) -> str:
        digest = bucket_digest(rule, kind, client, model).hex()
        return f"{{{self.spec.key_prefix}:rl}}:{digest}"

    async def check(
        self,
        client: str,
        model: str,
        prompt_tokens: int,
        output_tokens: int = 0,
        *,
        request_id: str = "",
        bounded: bool = True,
    ) -> Admission:
        """Charge one request, `prompt_tokens` now and `output_tokens` reserved (until
        `settle`) to every matching bucket, or to none. A caller that cannot follow the
        answer passes its whole estimate as `prompt_tokens`. `bounded`: the request set
        its output bound (else `output_tokens` is a default, cut to fit the limit)."""
        admission = await self.check_shared(
            client, model, prompt_tokens, output_tokens, request_id=request_id, bounded=bounded
        )
        if admission is None:
            return self._local(client, model, prompt_tokens, output_tokens, request_id, bounded)
        return admission

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
        """`check` in the store only: None when the store is away (the caller's own
        local buckets decide then)."""
        limits = [b.limit for b in self.buckets(client, model, 0) if b.kind == "tokens"]
        if not bounded and limits:
            output_tokens = max(0, min(output_tokens, min(limits) - prompt_tokens))
        buckets = self.buckets(client, model, prompt_tokens, output_tokens)
        if not buckets:
            return Admission(True)
        wanted = prompt_tokens + output_tokens
        for b in buckets:
            if b.kind == "tokens" and wanted > b.limit:  # never fits: nothing stored
                return Admission(False, too_large=TooLarge(b.limit, wanted, b.window_ms / 1000))
        if output_tokens and not request_id:
            raise ValueError("a reservation needs the request's id")
        args: list[int | str] = [request_id or "-", self.lease_ms, self.spec.slots]
        for b in buckets:
            args += [b.limit, b.commit, b.reserve, b.window_ms]
        try:
            result = await self.health.call(
                lambda: self._check(keys=[b.key for b in buckets], args=args)
            )
        except StoreUnavailable:
            return None
        wait_ms, now_ms, *used = (int(v) for v in result)
        headers = _headers(buckets, used, wait_ms)
        if wait_ms > 0:
            return Admission(False, headers, retry_after.seconds_from_ms(wait_ms))
        tokens = [b for b in buckets if b.kind == "tokens"]
        ticket = Ticket(
            request_id,
            now_ms,
            tuple(b.key for b in tokens),
            tuple(b.limit for b in tokens),
            tuple(b.window_ms for b in tokens),
            prompt_tokens if tokens else 0,
            output_tokens if tokens else 0,
        )
        return Admission(True, headers, ticket=ticket)

    async def extend(self, ticket: Ticket, more: int) -> bool | None:
        """Reserve `more` output tokens for a request that outgrew its reservation: True
        or False from the store, None when the store is away."""
        if not ticket.token_keys:
            return True
        args: list[int | str] = [ticket.request_id, self.lease_ms, self.spec.slots]
        for limit, window_ms in zip(ticket.token_limits, ticket.windows_ms, strict=True):
            args += [limit, more, window_ms]
        keys = list(ticket.token_keys)
        try:
            granted = await self.health.call(lambda: self._extend(keys=keys, args=args))
        except StoreUnavailable:
            return None
        return bool(int(granted))

    async def settle(self, ticket: Ticket, used_tokens: int) -> None:
        """The request ended: drop its reservation and count what it really cost
        (`used_tokens`, prompt and output) beyond what admission committed."""
        if not ticket.token_keys:
            return
        delta = used_tokens - ticket.charged
        if delta == 0 and not ticket.reserved:
            return
        args: list[int | str] = [ticket.request_id or "-", ticket.admitted_ms, self.spec.slots]
        for window_ms in ticket.windows_ms:
            args += [delta, window_ms]
        keys = list(ticket.token_keys)
        try:
            await self.health.call(lambda: self._settle(keys=keys, args=args))
        except StoreUnavailable:
            return  # the reservation lapses with its lease; the commit stands

    def _local(
        self, client: str, model: str, prompt: int, output: int, request_id: str, bounded: bool
    ) -> Admission:
        decision = self.local.check(
            client, model, prompt, output, time.monotonic(), request_id=request_id, bounded=bounded
        )
        headers = {**decision.headers, "x-ratelimit-scope": "local"}
        ticket = Ticket(request_id, charged=prompt, reserved=decision.reserved)
        return Admission(
            decision.allowed,
            headers,
            decision.retry_after_s,
            scope="local",
            ticket=ticket if decision.allowed else Ticket(),
            too_large=decision.too_large,
        )


class SharedLimits:
    """`igw serve`'s per-minute `rateLimits` (the core's `SharedLimitsView`), kept in the
    store for every replica: one
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
            headers[f"x-ratelimit-reset-{b.kind}"] = f"{retry_after.seconds_from_ms(wait_ms)}s"
    return headers
