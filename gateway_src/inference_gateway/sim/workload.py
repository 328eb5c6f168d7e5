"""Request streams for a scenario: arrivals, lengths, shared prefixes, adapters, bands.

Everything is drawn from one `random.Random(seed)`, so a scenario and seed always give
the same requests. Shared-prefix groups get fixed block ids that the engine (as prompt
block hashes) and the router (as prefix-index hashes) both use, the way identical
system prompts hash identically in production.
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
    Fixed,
    LogNormal,
    PoissonArrival,
    TraceArrival,
    Workload,
)

__all__ = ["SimRequest", "generate", "prefix_block_ids"]

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
        return r


def sample_requests(workload: Workload, n: int, seed: int) -> list[SimRequest]:
    """`n` requests of the workload's shape with no arrival times (capacity probes)."""
    sampler = _Sampler(workload, random.Random(seed))
    return [sampler.request(0.0) for _ in range(n)]


def generate(
    workload: Workload, duration_s: float, seed: int, capacity_rps: float
) -> Iterator[SimRequest]:
    """Requests in arrival order until `duration_s`."""
    arrival = workload.arrival
    if isinstance(arrival, TraceArrival):
        yield from _trace(arrival.path, duration_s)
        return
    rnd = random.Random(seed)
    sampler = _Sampler(workload, random.Random(seed + 1))
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
