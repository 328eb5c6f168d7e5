"""Local rate limits: requests and tokens per window (a minute unless a rule sets
`windowS`) per client and model, for one gateway replica (the store's limiter,
shared_store/ratelimit.py, keeps the same rules exact across replicas, with the same windows).

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

Bounded state. A bucket (one per client and rule, requests and tokens in one) is keyed
by a 16-byte digest of (rule, client, model), never by what the client sent (a bearer
token may be 8 KB), kept in least-recently-used order, dropped once idle for a window
(nothing live, nothing reserved; each check sweeps up to 64, and reading `/metrics`
sweeps them all), and capped at `max_buckets`: past the cap the least recently used
goes and `on_evict` is told (the gateway counts `igw_ratelimit_evictions_total`). An evicted
client starts from an empty bucket, so the cap trades exactness for memory only under
a flood of distinct clients, and says so in the metric.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from inference_gateway.config.spec import RateLimitSpec
from inference_gateway.core.traffic import retry_after

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


@dataclass(frozen=True, slots=True)
class _Shape:
    """What the buckets of one rule share: its limits (0: none) and its slots."""

    requests: int
    tokens: int
    slot_s: float
    slots: int


class _Window:
    """The bucket of one client under one rule, kept small (there may be 100,000): its
    live slots as one flat `[slot, requests, tokens, slot, …]` list in slot order
    (usually one triple), and the token reservations per request id, made only when a
    request reserves."""

    __slots__ = ("counts", "held", "shape", "touched")

    def __init__(self, shape: _Shape, now: float) -> None:
        self.shape = shape
        self.counts: list[int] = []
        self.held: dict[str, int] | None = None
        self.touched = now

    def slot(self, now: float) -> int:
        return math.floor(now / self.shape.slot_s)

    def used(self, now: float) -> tuple[int, int]:
        """(requests, tokens) in the window now, reservations included."""
        counts = self.counts
        first = self.slot(now) - self.shape.slots
        if counts and counts[0] < first:
            keep = next((k for k in range(0, len(counts), 3) if counts[k] >= first), len(counts))
            del counts[:keep]
        held = sum(self.held.values()) if self.held else 0
        return sum(counts[1::3]), sum(counts[2::3]) + held

    def add(self, now: float, requests: int, tokens: int) -> None:
        slot = self.slot(now)
        if self.counts and self.counts[-3] == slot:
            self.counts[-2] += requests
            self.counts[-1] += tokens
        else:
            self.counts += (slot, requests, tokens)

    def hold(self, request_id: str, amount: int) -> None:
        if self.held is None:
            self.held = {}
        self.held[request_id] = self.held.get(request_id, 0) + amount

    def release(self, request_id: str) -> None:
        if self.held is not None:
            self.held.pop(request_id, None)
            if not self.held:
                self.held = None

    def seconds_until(self, requests: int, tokens: int, now: float) -> float:
        """How long until `requests` and `tokens` more fit (reservations only leave by
        settling, so this is a lower bound then: the client retries)."""
        shape = self.shape
        used = self.used(now)
        wait = 0.0
        for kind, limit, amount in ((1, shape.requests, requests), (2, shape.tokens, tokens)):
            over = used[kind - 1] + amount - limit
            if not limit or not amount or over <= 0:
                continue
            freed = 0
            until = shape.slots * shape.slot_s  # held by reservations: about one window
            for k in range(0, len(self.counts), 3):
                freed += self.counts[k + kind]
                if freed >= over:
                    until = max(0.0, (self.counts[k] + shape.slots + 1) * shape.slot_s - now)
                    break
            wait = max(wait, until)
        return wait

    def idle(self, now: float) -> bool:
        return not self.held and self.used(now) == (0, 0)


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
        self._shapes: dict[int, _Shape] = {}  # per rule index
        self._high = 0  # the most buckets held since the table was last rebuilt

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

    def _windows(self, client: str, model: str, now: float, *, create: bool) -> list[_Window]:
        """The bucket of every matching rule (one per client, rule and model scope)."""
        out = []
        for i, rule, scope_model in self._matching(client, model):
            key = bucket_digest(i, "rule", client, scope_model)
            window = self._buckets.get(key)
            if window is None:
                if not create:
                    continue
                shape = self._shapes.get(i)
                if shape is None:
                    slot_s = self.rule_window_s(rule) / self.slots
                    shape = self._shapes[i] = _Shape(
                        rule.requests_per_minute or 0,
                        rule.tokens_per_minute or 0,
                        slot_s,
                        self.slots,
                    )
                window = self._buckets[key] = _Window(shape, now)
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
        windows = self._windows(client, model, now, create=True)
        wait = max((w.seconds_until(1, wanted, now) for w in windows), default=0.0)
        allowed = wait <= 0
        tokens = [w for w in windows if w.shape.tokens]
        if allowed:
            for w in windows:
                w.add(now, 1, prompt_tokens if w.shape.tokens else 0)
            if output_tokens:
                for w in tokens:
                    w.hold(request_id, output_tokens)
        headers = _headers(windows, now)
        self._cap()
        if not allowed:
            return LimitDecision(False, headers, retry_after.seconds(wait))
        return LimitDecision(True, headers, reserved=output_tokens if tokens else 0)

    def extend(self, request_id: str, client: str, model: str, more: int, now: float) -> bool:
        """Reserve `more` output tokens for a request that outgrew its reservation: True
        when every token bucket has room (all or none)."""
        windows = [w for w in self._windows(client, model, now, create=True) if w.shape.tokens]
        if any(w.used(now)[1] + more > w.shape.tokens for w in windows):
            return False
        for w in windows:
            w.hold(request_id, more)
        return True

    def retry_after_s(self, client: str, model: str, tokens: int, now: float) -> int:
        """Whole seconds until `tokens` more fit in every token bucket of the client (at
        least 1): the Retry-After of an answer refused for its size."""
        windows = [w for w in self._windows(client, model, now, create=False) if w.shape.tokens]
        wait = max((w.seconds_until(0, tokens, now) for w in windows), default=0.0)
        return retry_after.seconds(wait)

    def settle(self, request_id: str, client: str, model: str, delivered: int, now: float) -> None:
        """The request ended: its reservation goes, and `delivered` (output tokens, plus
        any prompt tokens beyond what was charged) counts in this moment's slot."""
        for w in self._windows(client, model, now, create=False):
            if not w.shape.tokens:
                continue
            w.release(request_id)
            if delivered > 0:
                w.add(now, 0, delivered)

    def sweep(self, now: float) -> None:
        """Drop every bucket that went idle (the gateway calls it when `/metrics` is
        read, so an idle replica lets go too). A table that shrank to a quarter of its
        high-water mark is rebuilt: a dict never gives back the room of deleted keys."""
        self._sweep(now, len(self._buckets))
        if len(self._buckets) < self._high // 4:
            self._buckets = OrderedDict(self._buckets)
            self._high = len(self._buckets)

    def _sweep(self, now: float, at_most: int = SWEEP_PER_CALL) -> None:
        """Drop up to `at_most` of the least recently used buckets that went idle."""
        for _ in range(at_most):
            if not self._buckets:
                return
            key, window = next(iter(self._buckets.items()))
            if now - window.touched < window.shape.slot_s * (window.shape.slots + 1):
                return  # the oldest is recent: so is every other
            if window.idle(now):
                del self._buckets[key]
            else:  # a long request still holds it: look again a window later
                window.touched = now
                self._buckets.move_to_end(key)

    def _cap(self) -> None:
        self._high = max(self._high, len(self._buckets))
        evicted = 0
        while len(self._buckets) > self.max_buckets:
            self._buckets.popitem(last=False)
            evicted += 1
        if evicted and self.on_evict is not None:
            self.on_evict(evicted)


def _headers(windows: list[_Window], now: float) -> dict[str, str]:
    """OpenAI's `x-ratelimit-*` headers from the tightest bucket of each kind."""
    headers: dict[str, str] = {}
    for kind, index in (("requests", 0), ("tokens", 1)):
        left = [
            (limit, max(0, limit - w.used(now)[index]))
            for w in windows
            if (limit := (w.shape.requests, w.shape.tokens)[index])
        ]
        if left:
            limit, remaining = min(left, key=lambda pair: pair[1])
            headers[f"x-ratelimit-limit-{kind}"] = str(limit)
            headers[f"x-ratelimit-remaining-{kind}"] = str(remaining)
    return headers
