"""Request streams for a scenario: arrivals, lengths, shared prefixes, adapters, bands.

Everything is drawn from one `random.Random(seed)`, so a scenario and seed always give
the same requests. Shared-prefix groups get fixed block ids that the engine (as prompt
block hashes) and the router (as prefix-index hashes) both use, the way identical
system prompts hash identically in production.

Conversations (`workload.conversations`): the arrival process starts sessions, each
planned whole when it starts (turns, every message and answer length, every think
time), so every policy sees the same conversations whatever its latencies; only the
arrival time of turn k+1 (turn k's finish + think time) depends on the policy, as a
user waits for an answer before typing the next message. A session's blocks are its
system prompt's group blocks, then blocks of its own (`session_block_ids`), so turn
k+1's prompt starts with every full block of turn k's prompt: the prefix cache reuses
them where the pod kept them. Answer tokens join the context as prompt tokens of the
next turn (the engine caches prompt blocks only, so they are prefilled once there).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from inference_gateway.errors import ConfigError
from inference_gateway.sim.scenario import (
    BurstyArrival,
    Conversations,
    Fixed,
    LogNormal,
    PoissonArrival,
    Seconds,
    TraceArrival,
    Workload,
)

__all__ = [
    "Sessions",
    "SimRequest",
    "generate",
    "prefix_block_ids",
    "session_block_ids",
    "shared_blocks",
]
SESSION_BASE = 1 << 48  # session block ids start here (group ids stay far below)
TURN_ID_BASE = 1 << 40  # request ids of follow-up turns

BLOCK_TOKENS = 16


@dataclass(slots=True)
class SimRequest:
    t: float
    prompt_tokens: int
    output_tokens: int
    prefix_group: int | None = None
    prefix_tokens: int = 0
    adapter: str | None = None
    priority: str = "standard"
    request_id: int = 0
    session: int = -1  # conversation id (-1: a single request)
    turn: int = 0
    block_ids: tuple[int, ...] = ()  # a conversation turn's shareable blocks


def shared_blocks(r: SimRequest) -> tuple[int, ...]:
    """The request's blocks that another request can share (its prompt hashes)."""
    if r.block_ids:
        return r.block_ids
    if r.prefix_group is not None:
        return prefix_block_ids(r.prefix_group, r.prefix_tokens)
    return ()


def session_block_ids(session: int, start: int, stop: int) -> tuple[int, ...]:
    """Ids of a session's own blocks `start` .. `stop - 1` (unique to the session)."""
    base = SESSION_BASE + (session << 24)
    return tuple(range(base + start, base + stop))


_BLOCK_IDS: dict[tuple[int, int], tuple[int, ...]] = {}


def prefix_block_ids(group: int, tokens: int) -> tuple[int, ...]:
    """Block ids of shared prefix `group` (one per full 16-token block), cached."""
    key = (group, tokens)
    ids = _BLOCK_IDS.get(key)
    if ids is None:
        base = (group + 1) << 24
        ids = _BLOCK_IDS[key] = tuple(range(base, base + tokens // BLOCK_TOKENS))
    return ids


def _length_sampler(spec: LogNormal | Fixed, rnd: random.Random) -> Callable[[], int]:
    """A draw function for one length spec (bound once: it runs twice per request)."""
    if isinstance(spec, Fixed):
        value = spec.value
        return lambda: value
    median, sigma, cap = spec.median, spec.sigma, spec.max
    gauss, exp = rnd.gauss, math.exp

    def draw() -> int:
        value = int(median * exp(sigma * gauss(0, 1)))
        value = value if value > 1 else 1
        return value if not cap or value < cap else cap

    return draw


def _seconds_sampler(spec: Seconds, rnd: random.Random) -> Callable[[], float]:
    median, sigma, gauss, exp = spec.median, spec.sigma, rnd.gauss, math.exp
    return lambda: median * exp(sigma * gauss(0, 1))


class Sessions:
    """Plans conversations and hands out their turns (see the module docstring)."""

    def __init__(self, spec: Conversations, workload: Workload, rnd: random.Random) -> None:
        self.spec = spec
        self._turns = _length_sampler(spec.turns, rnd)
        self._message = _length_sampler(spec.message_tokens, rnd)
        self._answer = _length_sampler(workload.output_tokens, rnd)
        self._think = _seconds_sampler(spec.think_time_s, rnd)
        self._plans: dict[int, list[tuple[int, int, float]]] = {}  # session → later turns
        self._sessions = itertools.count()
        self._ids = itertools.count(TURN_ID_BASE)

    def start(self, r: SimRequest) -> None:
        """Make `r` the first turn of a new session and plan the session's other turns."""
        r.session = session = next(self._sessions)
        turns = self._turns()
        self._plans[session] = [
            (self._message(), self._answer(), self._think()) for _ in range(turns - 1)
        ]
        r.block_ids = self._blocks(r, r.prompt_tokens)

    def _blocks(self, r: SimRequest, prompt_tokens: int) -> tuple[int, ...]:
        system = (
            prefix_block_ids(r.prefix_group, r.prefix_tokens) if r.prefix_group is not None else ()
        )
        return system + session_block_ids(r.session, len(system), prompt_tokens // BLOCK_TOKENS)

    def next_turn(self, r: SimRequest, finished_at: float) -> SimRequest | None:
        """The session's next turn after `r` finished, or None when the session is over
        (its last turn, or a context past `max_context_tokens`)."""
        plan = self._plans.get(r.session)
        if not plan or r.turn >= len(plan):
            self._plans.pop(r.session, None)
            return None
        message, answer, think = plan[r.turn]
        prompt = r.prompt_tokens + r.output_tokens + message
        if prompt + answer > self.spec.max_context_tokens:
            self._plans.pop(r.session, None)
            return None
        nxt = SimRequest(
            finished_at + think,
            prompt,
            answer,
            r.prefix_group,
            r.prefix_tokens,
            r.adapter,
            r.priority,
            next(self._ids),
            r.session,
            r.turn + 1,
        )
        nxt.block_ids = self._blocks(nxt, prompt)
        return nxt

    def end(self, r: SimRequest) -> None:
        """A turn was refused: the user gives up on the session."""
        self._plans.pop(r.session, None)


class _Sampler:
    def __init__(self, workload: Workload, rnd: random.Random) -> None:
        self.w = workload
        self.rnd = rnd
        self._prompt_length = _length_sampler(workload.prompt_tokens, rnd)
        self._output_length = _length_sampler(workload.output_tokens, rnd)
        adapters = workload.adapters
        if adapters:
            weights = [1 / (i + 1) ** adapters.zipf for i in range(len(adapters.names))]
            total = sum(weights)
            self._adapter_cdf = list(itertools.accumulate(w / total for w in weights))
        bands = workload.priorities
        if bands:
            names = ["critical", "standard", "sheddable"]
            values = [bands.critical, bands.standard, bands.sheddable]
            total = sum(values) or 1
            self._band_names = names
            self._band_cdf = list(itertools.accumulate(v / total for v in values))
        self.sessions = (
            Sessions(workload.conversations, workload, random.Random(rnd.random()))
            if workload.conversations
            else None
        )

    def request(self, t: float) -> SimRequest:
        w, rnd = self.w, self.rnd
        r = SimRequest(t, self._prompt_length(), self._output_length())
        shared = w.shared_prefixes
        if shared and rnd.random() < shared.share:
            r.prefix_group = rnd.randrange(shared.groups)
            r.prefix_tokens = shared.tokens
            r.prompt_tokens += shared.tokens
        adapters = w.adapters
        if adapters and rnd.random() < adapters.share:
            i = bisect.bisect_left(self._adapter_cdf, rnd.random())
            r.adapter = adapters.names[min(i, len(adapters.names) - 1)]
        if w.priorities:
            i = bisect.bisect_left(self._band_cdf, rnd.random())
            r.priority = self._band_names[min(i, 2)]
        if self.sessions is not None:
            self.sessions.start(r)
        return r


def sample_requests(workload: Workload, n: int, seed: int) -> list[SimRequest]:
    """`n` requests of the workload's shape with no arrival times (capacity probes)."""
    sampler = _Sampler(workload, random.Random(seed))
    return [sampler.request(0.0) for _ in range(n)]


def generate(
    workload: Workload,
    duration_s: float,
    seed: int,
    capacity_rps: float,
    sessions: list[Sessions] | None = None,
) -> Iterator[SimRequest]:
    """Requests in arrival order until `duration_s` (with conversations: the first turns,
    the sampler's `Sessions` appended to `sessions` for the driver's follow-ups)."""
    arrival = workload.arrival
    if isinstance(arrival, TraceArrival):
        yield from _trace(arrival.path, duration_s)
        return
    rnd = random.Random(seed)
    sampler = _Sampler(workload, random.Random(seed + 1))
    if sessions is not None and sampler.sessions is not None:
        sessions.append(sampler.sessions)
    counter = itertools.count()
    if isinstance(arrival, PoissonArrival):
        if arrival.rate_rps is not None:
            rate = arrival.rate_rps
        else:
            assert arrival.load is not None  # the spec validates exactly one of the two
            rate = arrival.load * capacity_rps
        t = 0.0
        expovariate, request = rnd.expovariate, sampler.request
        while True:
            t += expovariate(rate)
            if t >= duration_s:
                return
            r = request(t)
            r.request_id = next(counter)
            yield r
    assert isinstance(arrival, BurstyArrival)
    mean = arrival.load * capacity_rps
    duty = arrival.burst_s / arrival.period_s
    base = mean / (1 + (arrival.burst_factor - 1) * duty)
    t = 0.0
    while t < duration_s:
        phase = t % arrival.period_s
        in_burst = phase < arrival.burst_s
        rate = base * arrival.burst_factor if in_burst else base
        edge = t - phase + (arrival.burst_s if in_burst else arrival.period_s)
        step = rnd.expovariate(rate)
        if t + step >= edge:
            t = edge  # memoryless: redraw at the rate change
            continue
        t += step
        if t >= duration_s:
            return
        r = sampler.request(t)
        r.request_id = next(counter)
        yield r


def _trace(path: str, duration_s: float) -> Iterator[SimRequest]:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        raise ConfigError(path, [f"workload.arrival.path: {error.strerror}"]) from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            r = SimRequest(
                t=float(row["t"]),
                prompt_tokens=int(row["prompt_tokens"]),
                output_tokens=max(1, int(row["output_tokens"])),
                prefix_group=row.get("prefix_group"),
                prefix_tokens=int(row.get("prefix_tokens") or 0),
                adapter=row.get("adapter"),
                priority=row.get("priority") or "standard",
            )
        except (ValueError, KeyError, TypeError) as error:
            raise ConfigError(path, [f"line {number}: {error!r}"]) from None
        if r.t < duration_s:
            rows.append(r)
    rows.sort(key=lambda r: r.t)
    for i, r in enumerate(rows):
        r.request_id = i
        yield r
