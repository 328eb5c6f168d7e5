"""The demo's trace and its replay through one data plane with the official `openai` SDK.

The trace is shaped so that the comparison is about routing, the same for every policy:

* **A lead-in at the base rate** (`LEAD_IN_S`) before the first burst: each policy's own
  routing of the same requests warms the pods' prefix caches (the shared system prompts
  land wherever that policy sends them), so the bursts meet caches each policy filled
  itself, not the empty caches of a fleet that has just started.
* **Bursts** of `BURST_FACTOR` x the base rate for `BURST_S` of every `PERIOD_S`, the
  last one ending with the trace: chat traffic is bursty, and a burst is where a router
  that sends a slow pod its equal share builds a queue there.
* **Half the requests behind one of `SYSTEM_PROMPTS` shared system prompts** (about
  2,000 tokens each, user messages about 460): a prefix cache saves most of their
  prefill on a pod that holds it.

`--rate` is the mean over the whole trace; `burst_windows` says where the bursts fall.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any, cast

__all__ = [
    "BURST_FACTOR",
    "Outcome",
    "TraceItem",
    "base_rate",
    "burst_windows",
    "demo_text",
    "make_trace",
    "replay",
    "summarise",
    "warm_up",
]

SYSTEM_PROMPTS = 8
LEAD_IN_S = 7.0
BURST_S = 5.0
PERIOD_S = 10.0
BURST_FACTOR = 3.0
MODEL = "llama-3.1-8b"
#: a model no pod serves: the warm-up's requests are refused before any engine sees them
WARM_UP_MODEL = "igw-demo-warm-up"


@dataclass(slots=True)
class TraceItem:
    t: float
    messages: list[dict[str, str]]
    max_tokens: int


@dataclass(slots=True)
class Outcome:
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    tokens: int = 0
    errors: int = 0
    wall: float = 0.0


def demo_text(rnd: random.Random) -> tuple[list[str], list[str]]:
    """The demo's shared system prompts (drawn from `rnd`) and its vocabulary."""
    words = [
        "policy",
        "latency",
        "cluster",
        "tenant",
        "region",
        "invoice",
        "quota",
        "shard",
        "replica",
        "token",
    ]
    systems = [
        f"You are assistant {g}. " + " ".join(rnd.choice(words) for _ in range(1100))
        for g in range(SYSTEM_PROMPTS)
    ]
    return systems, words


def burst_windows(duration: float) -> list[tuple[float, float]]:
    """The bursts within `duration`: `BURST_S` long, every `PERIOD_S` after the lead-in,
    placed so the last one ends with the trace (no quiet tail to wait through)."""
    windows = []
    start = LEAD_IN_S
    while start < duration:
        windows.append((start, min(start + BURST_S, duration)))
        start += PERIOD_S
    return windows


def base_rate(duration: float, rate: float) -> float:
    """The rate between bursts for a mean of `rate` requests/s over `duration`."""
    burst = sum(end - start for start, end in burst_windows(duration))
    return rate * duration / (duration + (BURST_FACTOR - 1) * burst)


def make_trace(duration: float, rate: float, seed: int) -> list[TraceItem]:
    """Poisson arrivals at `base_rate`, `BURST_FACTOR` x that in `burst_windows`; half
    the requests behind one of the shared system prompts."""
    rnd = random.Random(seed)
    systems, words = demo_text(rnd)
    base = base_rate(duration, rate)
    windows = burst_windows(duration)
    items: list[TraceItem] = []
    t = 0.0
    while True:
        burst = any(start <= t < end for start, end in windows)
        t += rnd.expovariate(base * BURST_FACTOR if burst else base)
        if t >= duration:
            return items
        user = " ".join(rnd.choice(words) for _ in range(int(rnd.lognormvariate(5.5, 0.6))))
        messages = [{"role": "user", "content": user}]
        if rnd.random() < 0.5:
            messages.insert(0, {"role": "system", "content": rnd.choice(systems)})
        items.append(TraceItem(t, messages, max(4, int(rnd.lognormvariate(3.4, 0.5)))))


async def replay(base_url: str, trace: list[TraceItem], progress: Any) -> Outcome:
    """Send every request at its time (open loop: a slow answer delays nothing else),
    streaming; TTFT is the first chunk, E2E the last; an error is counted, not raised."""
    from openai import AsyncOpenAI, AsyncStream
    from openai.types.chat import ChatCompletionChunk

    client = AsyncOpenAI(base_url=base_url, api_key="demo", max_retries=0, timeout=120)
    outcome = Outcome()
    start = time.perf_counter()

    async def one(item: TraceItem) -> None:
        await asyncio.sleep(max(0.0, item.t - (time.perf_counter() - start)))
        sent = time.perf_counter()
        try:
            answer = await client.chat.completions.create(
                model=MODEL,
                messages=item.messages,  # type: ignore[arg-type]
                max_tokens=item.max_tokens,
                stream=True,
            )
            stream = cast("AsyncStream[ChatCompletionChunk]", answer)
            first = None
            async for chunk in stream:
                if first is None:
                    first = time.perf_counter() - sent
                if chunk.choices and chunk.choices[0].delta.content:
                    outcome.tokens += 1
            outcome.ttft.append(first if first is not None else time.perf_counter() - sent)
            outcome.e2e.append(time.perf_counter() - sent)
        except Exception:  # an error is a result here: counted and shown
            outcome.errors += 1
        progress.advance()

    await asyncio.gather(*(one(item) for item in trace))
    outcome.wall = time.perf_counter() - start
    await client.close()
    return outcome


async def warm_up(base_url: str, requests: int = 3) -> None:
    """Requests for a model no pod serves, through the data plane about to be measured:
    they load what the client library and a freshly started data plane load on first use
    (lazy imports, connections, the ext_proc streams to the picker and the body-based
    router), which would otherwise land on the first few measured requests, and they
    leave every pod as it was (the data plane refuses them, or the pod does, before its
    engine; `stack.check_fresh` runs after them)."""
    from openai import APIStatusError, AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="demo", max_retries=0, timeout=30)
    try:
        for _ in range(requests):
            try:
                await client.chat.completions.create(
                    model=WARM_UP_MODEL,
                    messages=[{"role": "user", "content": "warm up"}],
                    max_tokens=1,
                    stream=True,
                )
            except APIStatusError as error:
                if error.status_code != 404:
                    raise
            else:
                raise RuntimeError(f"{base_url}: a request for {WARM_UP_MODEL!r} was served")
    finally:
        await client.close()


def summarise(outcome: Outcome) -> dict[str, float]:
    import numpy as np

    ttft = np.asarray(outcome.ttft or [float("nan")])
    e2e = np.asarray(outcome.e2e or [float("nan")])
    return {
        "ttft_p50_s": float(np.percentile(ttft, 50)),
        "ttft_p95_s": float(np.percentile(ttft, 95)),
        "ttft_p99_s": float(np.percentile(ttft, 99)),
        "e2e_p99_s": float(np.percentile(e2e, 99)),
        "tokens_per_s": outcome.tokens / max(outcome.wall, 1e-9),
        "completed": len(outcome.ttft),
        "errors": outcome.errors,
    }
