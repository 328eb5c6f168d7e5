"""Local rate limits: requests and tokens per window (a minute unless a rule sets
`windowS`) per client and model, for one gateway replica (the store's limiter,
store/ratelimit.py, keeps the same rules exact across replicas, with the same windows).

The rule that must hold: no client receives more tokens (or requests) in ANY
window-long interval than its limit. Three parts make it hold:

* Sliding windows, not token buckets. A bucket of capacity C refilled at C per minute
  lets 2C through in one minute (a full bucket, then the refill). Here a bucket is a
  count per slot (`SLOTS` slots per window); a slot counts until one whole window has
  passed since its END, so what is counted at any moment covers every interval of one
  window ending then (conservative by at most one slot).
* Reservations. A request is charged its prompt at once and its output bound (the
  larger of `max_tokens` / `max_completion_tokens`, times `n`, or `DEFAULT_MAX_TOKENS`
  when it sets none) as a reservation that counts, whatever its age, until the request
  settles. A stream longer than a window therefore keeps its budget taken while it runs;
  a charge in one slot would have lapsed after one window while the stream went on.
* Streaming charges. Tokens are counted as they pass (core/request/budget.py); when a stream
  outgrows its reservation the gateway asks `extend` for more before it relays another
  token, and ends the stream with an SSE error event when the window has no room.
  `settle` then commits what was really delivered (the answer's `usage`, else what was
  counted) to the slot of that moment and drops the reservation.

A request whose prompt and output bound together exceed a rule's whole limit can never
fit: `check` says `too_large` and the caller answers 429 "Request too large" (OpenAI's
answer), with no state kept for it.

Bounded state. Buckets are keyed by a 16-byte digest of (rule, kind, client, model),
never by what the client sent (a bearer token may be 8 KB), kept in least-recently-used
order, dropped once idle for a window (nothing live, nothing reserved; later checks
sweep up to 64 each), and capped at `max_buckets`: past the cap the least recently used goes and
`on_evict` is told (the gateway counts `igw_ratelimit_evictions_total`). An evicted
client starts from an empty bucket, so the cap trades exactness for memory only under
a flood of distinct clients, and says so in the metric.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from inference_gateway.config.spec import RateLimitSpec

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_WINDOW_S",
    "MAX_BUCKETS",
    "SLOTS",
    "LimitDecision",
    "RateLimiter",
    "TooLarge",
    "bucket_digest",
]

DEFAULT_WINDOW_S = 60.0
DEFAULT_MAX_TOKENS = 256  # the output reservation of a request that sets no bound
SLOTS = 60  # slots per window: one per second of a minute
MAX_BUCKETS = 100_000  # ~300 B each: 30 MB at the cap
SWEEP_PER_CALL = 64  # expired buckets dropped per check at most (O(1) amortised)


def bucket_digest(rule: int, kind: str, client: str, model: str) -> bytes:
    """The fixed-size key of one bucket (the store's keys use the same text)."""
    return hashlib.blake2b(f"{rule}\0{kind}\0{client}\0{model}".encode(), digest_size=16).digest()


@dataclass(slots=True)
class _Window:
    """One bucket: amounts per slot, reservations per request (internal ids)."""

    limit: int
    slot_s: float
    slots: int
    counts: dict[int, int] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)
    touched: float = 0.0

    def slot(self, now: float) -> int:
        return math.floor(now / self.slot_s)

    def used(self, now: float) -> int:
        first = self.slot(now) - self.slots
        if any(s < first for s in self.counts):
            self.counts = {s: c for s, c in self.counts.items() if s >= first}
        return sum(self.counts.values()) + sum(self.held.values())

    def seconds_until(self, amount: int, now: float) -> float:
        """How long until `amount` more fits (reservations only leave by settling, so
        this is a lower bound then: the client retries)."""
        over = self.used(now) + amount - self.limit
        if over <= 0:
            return 0.0
        freed = 0
        for s in sorted(self.counts):
            freed += self.counts[s]
            if freed >= over:
                return max(0.0, (s + self.slots + 1) * self.slot_s - now)
        return self.slots * self.slot_s  # held by reservations: about one window

    def idle(self, now: float) -> bool:
        return not self.held and self.used(now) == 0


@dataclass(frozen=True, slots=True)
class TooLarge:
    """The request can never fit this limit (prompt + output bound > the whole window)."""

    limit: int
    requested: int
    window_s: float

    def message(self, model: str) -> str:
        """OpenAI's "Request too large" text, with this window in place of its minute."""
        per = "tokens per min (TPM)" if self.window_s == 60 else f"tokens per {self.window_s:g} s"
        return (
            f"Request too large for {model} on {per}: Limit {self.limit}, Requested "
            f"{self.requested}. The input or output tokens must be reduced in order to run "
            "successfully."
        )


@dataclass(frozen=True, slots=True)
class LimitDecision:
    allowed: bool
    headers: dict[str, str]
    retry_after_s: int = 0
    too_large: TooLarge | None = None
    reserved: int = 0  # output tokens reserved for the request (admitted only)


class RateLimiter:
    def __init__(
        self,
        rules: list[RateLimitSpec],
        *,
        window_s: float = DEFAULT_WINDOW_S,
        slots: int = SLOTS,
        max_buckets: int = MAX_BUCKETS,
    ) -> None:
        self.rules = rules
        self.window_s = window_s  # for rules that set no windowS
        self.slots = slots
        self.max_buckets = max_buckets
        self.on_evict: Callable[[int], object] | None = None  # buckets dropped at the cap
        self._buckets: OrderedDict[bytes, _Window] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def rule_window_s(self, rule: RateLimitSpec) -> float:
        return rule.window_s if rule.window_s is not None else self.window_s

    def _matching(self, client: str, model: str) -> list[tuple[int, RateLimitSpec, str]]:
        """(rule index, rule, the model its buckets are scoped to) of every rule that applies."""
        return [
            (i, rule, model if rule.model is not None else "*")
            for i, rule in enumerate(self.rules)
            if (rule.client if rule.client is not None else rule.api_key) in (None, client)
            and (rule.model is None or rule.model == model)
        ]

    def _windows(
        self, client: str, model: str, kind: str, now: float, *, create: bool
    ) -> list[_Window]:
        out = []
        for i, rule, scope_model in self._matching(client, model):
            limit = rule.requests_per_minute if kind == "requests" else rule.tokens_per_minute
            if not limit:
                continue
            key = bucket_digest(i, kind, client, scope_model)
            window = self._buckets.get(key)
            if window is None:
                if not create:
                    continue
                window = _Window(limit, self.rule_window_s(rule) / self.slots, self.slots)
                self._buckets[key] = window
            else:
                self._buckets.move_to_end(key)
            window.touched = now
            out.append(window)
        return out

    def check(
        self,
        client: str,
        model: str,
        prompt_tokens: int,
        output_tokens: int,
        now: float,
        *,
        request_id: str = "",
        bounded: bool = True,
    ) -> LimitDecision:
        """Charge one request, `prompt_tokens` now and `output_tokens` reserved for
        `request_id` (until `settle`), if every matching bucket has room; all or none.
        `bounded`: the request set its output bound; else `output_tokens` is a default,
        cut to what the tightest limit leaves beside the prompt (the stream may still
        `extend` it as it goes)."""
        if prompt_tokens < 0 or output_tokens < 0:
            raise ValueError(f"a token charge cannot be negative ({prompt_tokens + output_tokens})")
        matching = self._matching(client, model)
        limits = [r.tokens_per_minute for _, r, _ in matching if r.tokens_per_minute]
        if not bounded and limits:
            output_tokens = max(0, min(output_tokens, min(limits) - prompt_tokens))
        wanted = prompt_tokens + output_tokens
        for _, rule, _ in matching:
            if rule.tokens_per_minute and wanted > rule.tokens_per_minute:
                too_large = TooLarge(rule.tokens_per_minute, wanted, self.rule_window_s(rule))
                return LimitDecision(False, {}, 0, too_large)
        self._sweep(now)
        requests = self._windows(client, model, "requests", now, create=True)
        tokens = self._windows(client, model, "tokens", now, create=True)
        wait = max(
            [w.seconds_until(1, now) for w in requests]
            + [w.seconds_until(wanted, now) for w in tokens],
            default=0.0,
        )
        allowed = wait <= 0
        if allowed:
            for w in requests:
                w.counts[w.slot(now)] = w.counts.get(w.slot(now), 0) + 1
            for w in tokens:
                w.counts[w.slot(now)] = w.counts.get(w.slot(now), 0) + prompt_tokens
                if output_tokens:
                    w.held[request_id] = w.held.get(request_id, 0) + output_tokens
        headers = {**_headers("requests", requests, now), **_headers("tokens", tokens, now)}
        self._cap()
        if not allowed:
            return LimitDecision(False, headers, max(1, math.ceil(wait)))
        return LimitDecision(True, headers, reserved=output_tokens if tokens else 0)

    def extend(self, request_id: str, client: str, model: str, more: int, now: float) -> bool:
        """Reserve `more` output tokens for a request that outgrew its reservation: True
        when every token bucket has room (all or none)."""
        windows = self._windows(client, model, "tokens", now, create=True)
        if any(w.used(now) + more > w.limit for w in windows):
            return False
        for w in windows:
            w.held[request_id] = w.held.get(request_id, 0) + more
        return True

    def settle(self, request_id: str, client: str, model: str, delivered: int, now: float) -> None:
        """The request ended: its reservation goes, and `delivered` (output tokens, plus
        any prompt tokens beyond what was charged) counts in this moment's slot."""
        for w in self._windows(client, model, "tokens", now, create=False):
            w.held.pop(request_id, None)
            if delivered > 0:
                w.counts[w.slot(now)] = w.counts.get(w.slot(now), 0) + delivered

    def _sweep(self, now: float) -> None:
        """Drop a few of the least recently used buckets that went idle."""
        for _ in range(SWEEP_PER_CALL):
            if not self._buckets:
                return
            key, window = next(iter(self._buckets.items()))
            if now - window.touched < window.slot_s * (window.slots + 1):
                return  # the oldest is recent: so is every other
            if window.idle(now):
                del self._buckets[key]
            else:  # a long request still holds it: look again a window later
                window.touched = now
                self._buckets.move_to_end(key)

    def _cap(self) -> None:
        evicted = 0
        while len(self._buckets) > self.max_buckets:
            self._buckets.popitem(last=False)
            evicted += 1
        if evicted and self.on_evict is not None:
            self.on_evict(evicted)


def _headers(kind: str, windows: list[_Window], now: float) -> dict[str, str]:
    """OpenAI's `x-ratelimit-*` headers from the tightest bucket of the kind."""
    if not windows:
        return {}
    tightest = min(windows, key=lambda w: w.limit - w.used(now))
    return {
        f"x-ratelimit-limit-{kind}": str(tightest.limit),
        f"x-ratelimit-remaining-{kind}": str(max(0, tightest.limit - tightest.used(now))),
    }
