"""Run the benchmark: every backend, the same prompts, `runs` full passes.

Per pass and backend, in this order (backends one after another, so they never compete
for the client machine; passes interleave backends, so a drift over time hits all):

1. **throughput / concurrency** — for each level `c` (1 always included), `repeats`
   rounds of `c` concurrent streamed requests of the throughput prompt at temperature 0
   with capped `max_tokens`; per request tokens/s and TTFT, per round the aggregate.
2. **tool calls** — the 20 built-in `count_ids` cases (`tasks.py`), non-streamed,
   `tool_choice: auto`, at most `tool_calls.concurrency` at a time.
3. **determinism** — `determinism.repeats` sequential requests of one prompt at
   temperature 0; the count of distinct outputs (1 is deterministic).

A `BackendError` stops that backend only: it is marked failed with the reason (and keeps
what it measured), the others go on. A missing API key variable fails it before any
request. The headline numbers pool concurrency-1 samples of all passes; tool-call scores
are the worst pass's and `distinct` the largest, so a flaky backend cannot hide.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

import aiohttp

from inference_gateway.backend_bench.client import BackendError, ChatClient, StreamResult
from inference_gateway.backend_bench.cost import cost_per_million_tokens
from inference_gateway.backend_bench.results import (
    BackendResult,
    BenchResult,
    ConcurrencyPoint,
    DeterminismResult,
    RunSummary,
    ToolCallResult,
)
from inference_gateway.backend_bench.spec import BackendSpec, BenchSettings
from inference_gateway.backend_bench.stats import relative_change_pct, summarize
from inference_gateway.backend_bench.tasks import COUNT_IDS_TOOL, score_reply, tool_cases

__all__ = ["Target", "emulated_as", "run_benchmark"]

Progress = Callable[[str], None]
T = TypeVar("T")


@dataclass(frozen=True)
class Target:
    """A backend resolved to an address: a spec's base_url, or an emulated pod's."""

    spec: BackendSpec
    base_url: str
    model: str
    hourly_usd: float


def emulated_as(spec: BackendSpec) -> str | None:
    """What an `emulate:` backend stands for, in words; None for a real endpoint."""
    if spec.emulate is None:
        return None
    told = spec.emulate.behavior != type(spec.emulate.behavior)()
    return f"emulated {spec.emulate.gpu}, {spec.emulate.model}" + (
        " (told to misbehave)" if told else ""
    )


@dataclass
class _Samples:
    tokens_per_s: dict[int, list[float]] = field(default_factory=dict)  # run → c=1 samples
    ttft_s: dict[int, list[float]] = field(default_factory=dict)
    tpot_s: list[float] = field(default_factory=list)  # c=1, every run
    levels: dict[int, list[tuple[float, list[StreamResult]]]] = field(default_factory=dict)
    tools: list[ToolCallResult] = field(default_factory=list)
    distinct: list[int] = field(default_factory=list)


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


async def _gather_all(coroutines: Iterable[Awaitable[T]]) -> list[T]:
    """Like `asyncio.gather`, but lets every request finish before raising the first
    error, so no request is left running against a backend that was just marked failed."""
    outcomes = await asyncio.gather(*coroutines, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return outcomes  # type: ignore[return-value]


async def _throughput(
    client: ChatClient, settings: BenchSettings, samples: _Samples, run: int
) -> None:
    t = settings.throughput
    messages = [{"role": "user", "content": t.prompt}]
    for level in settings.concurrency:
        for _ in range(t.repeats):
            start = time.perf_counter()
            results = await _gather_all(
                client.stream(messages, max_tokens=t.max_tokens, temperature=0)
                for _ in range(level)
            )
            wall = time.perf_counter() - start
            samples.levels.setdefault(level, []).append((wall, list(results)))
            if level == 1:
                samples.tokens_per_s.setdefault(run, []).append(results[0].tokens_per_s)
                samples.ttft_s.setdefault(run, []).append(results[0].ttft_s)
                if (tpot := results[0].tpot_s) is not None:
                    samples.tpot_s.append(tpot)


async def _tool_calls(client: ChatClient, settings: BenchSettings) -> ToolCallResult:
    cases = tool_cases(settings.tool_calls.cases)
    gate = asyncio.Semaphore(settings.tool_calls.concurrency)

    async def one(index: int) -> str:
        case = cases[index]
        async with gate:
            response = await client.complete(
                {
                    "messages": case.messages(),
                    "tools": [COUNT_IDS_TOOL],
                    "tool_choice": "auto",
                    "temperature": 0,
                    "max_tokens": 128,
                }
            )
        score = score_reply(case, response)
        return "ok" if score.filter_ok else ("call:" if score.called else "none:") + score.detail

    outcomes = await _gather_all(one(i) for i in range(len(cases)))
    failures = [
        f"case {i + 1} ({cases[i].question!r}): {o.split(':', 1)[1]}"
        for i, o in enumerate(outcomes)
        if o != "ok"
    ]
    calls = sum(1 for o in outcomes if o == "ok" or o.startswith("call:"))
    filters = sum(1 for o in outcomes if o == "ok")
    return ToolCallResult(len(cases), calls, filters, failures)


async def _determinism(client: ChatClient, settings: BenchSettings) -> int:
    d = settings.determinism
    messages = [{"role": "user", "content": d.prompt}]
    outputs = set()
    for _ in range(d.repeats):
        response = await client.complete(
            {"messages": messages, "temperature": 0, "max_tokens": d.max_tokens}
        )
        outputs.add(response["choices"][0]["message"].get("content") or "")
    return len(outputs)


async def _one_pass(
    client: ChatClient, settings: BenchSettings, samples: _Samples, run: int
) -> None:
    await _throughput(client, settings, samples, run)
    samples.tools.append(await _tool_calls(client, settings))
    samples.distinct.append(await _determinism(client, settings))


def _finish(result: BackendResult, samples: _Samples, settings: BenchSettings) -> None:
    pooled = [v for run in sorted(samples.tokens_per_s) for v in samples.tokens_per_s[run]]
    result.tokens_per_s = summarize(pooled)
    result.ttft_s = summarize([v for values in samples.ttft_s.values() for v in values])
    result.tpot_s = summarize(samples.tpot_s)
    if result.tokens_per_s.median is not None:
        result.cost_per_million_tokens = cost_per_million_tokens(
            result.hourly_usd, result.tokens_per_s.median
        )
    result.runs = [
        RunSummary(run, _median(samples.tokens_per_s[run]), _median(samples.ttft_s.get(run, [])))
        for run in sorted(samples.tokens_per_s)
    ]
    if len(result.runs) >= 2:
        result.run_to_run_change_pct = relative_change_pct(
            result.runs[0].tokens_per_s_median, result.runs[-1].tokens_per_s_median
        )
    if samples.tools:
        worst = min(samples.tools, key=lambda t: (t.filters, t.calls))
        result.tool_calls = worst
    if samples.distinct:
        result.determinism = DeterminismResult(settings.determinism.repeats, max(samples.distinct))
    for level in sorted(samples.levels):
        rounds = samples.levels[level]
        aggregates = [sum(r.completion_tokens for r in rs) / wall for wall, rs in rounds if wall]
        streams = [r for _, rs in rounds for r in rs]
        aggregate = _median(aggregates)
        result.concurrency.append(
            ConcurrencyPoint(
                level=level,
                aggregate_tokens_per_s=aggregate,
                tokens_per_s_median=_median([r.tokens_per_s for r in streams]),
                ttft_s_median=_median([r.ttft_s for r in streams]),
                tpot_s_median=_median([t for r in streams if (t := r.tpot_s) is not None]),
                cost_per_million_tokens=(
                    cost_per_million_tokens(result.hourly_usd, aggregate) if aggregate else None
                ),
            )
        )


def _api_key(spec: BackendSpec, environ: Mapping[str, str]) -> str | None:
    if spec.api_key_env is None:
        return None
    key = environ.get(spec.api_key_env)
    if not key:
        raise BackendError(f"API key variable {spec.api_key_env} is not set")
    return key


async def run_benchmark(
    settings: BenchSettings,
    targets: Sequence[Target],
    *,
    environ: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> BenchResult:
    """Benchmark every target; never raises for one backend's failure (see the module)."""
    environ = os.environ if environ is None else environ
    say = progress or (lambda _line: None)
    results = {
        t.spec.label: BackendResult(
            t.spec.label, t.model, t.base_url, t.hourly_usd, emulated=emulated_as(t.spec)
        )
        for t in targets
    }
    samples = {t.spec.label: _Samples() for t in targets}
    async with aiohttp.ClientSession() as session:
        clients: dict[str, ChatClient] = {}
        for t in targets:
            try:
                key = _api_key(t.spec, environ)
            except BackendError as error:
                results[t.spec.label].fail(error.reason)
                say(f"{t.spec.label}: {error.reason}")
                continue
            clients[t.spec.label] = ChatClient(
                session,
                base_url=t.base_url,
                model=t.model,
                api_key=key,
                timeout_s=settings.timeout_s,
            )
        for run in range(1, settings.runs + 1):
            for label, client in clients.items():
                if results[label].status != "ok":
                    continue
                say(f"run {run}/{settings.runs}: {label}")
                try:
                    await _one_pass(client, settings, samples[label], run)
                except BackendError as error:
                    results[label].fail(error.reason)
                    say(f"{label}: {error.reason}")
    for t in targets:
        _finish(results[t.spec.label], samples[t.spec.label], settings)
    return BenchResult(
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        settings=settings.model_dump(),
        backends=[results[t.spec.label] for t in targets],
    )
