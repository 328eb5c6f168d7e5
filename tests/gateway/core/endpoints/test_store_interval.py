"""The scrape loop keeps to its CPU budget: when scraping every pod at the configured
interval would take more than `max_cpu_fraction` of a core, the interval stretches to fit,
says so in a warning and in `igw_scrape_interval_seconds`, and returns by itself when the
cost falls. CPU is charged by a scripted clock, so the figures are exact."""

from __future__ import annotations

import asyncio
import logging

import pytest

from inference_gateway.core.endpoints.store import (
    COST_WINDOW,
    OVERRUN,
    SLICE_PODS,
    SPREAD,
    EndpointStore,
)
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.telemetry.metrics import GatewayMetrics

PAGE = "vllm:num_requests_waiting 0\nvllm:num_requests_running 1\n"


class Cpu:
    """A process-CPU clock that the fetch function charges."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def pods(count: int) -> list[Endpoint]:
    return [Endpoint(f"pod-{i}", "127.0.0.1", 8000 + i, pool="p") for i in range(count)]


def store_with(cpu: Cpu, cost_s: float, count: int = 4, **kwargs: object) -> EndpointStore:
    async def fetch(endpoint: Endpoint, path: str) -> str:
        cpu.now += cost_s if path == "/metrics" else 0.0
        return PAGE if path == "/metrics" else '{"data": [{"id": "m"}]}'

    return EndpointStore(pods(count), fetch, interval_s=0.05, cpu_clock=cpu, **kwargs)  # type: ignore[arg-type]


async def run_rounds(store: EndpointStore, rounds: int, *, timeout_s: float) -> None:
    """Run the store's own loop until `rounds` rounds are done (bounded), then stop it."""
    store.start()
    try:
        async with asyncio.timeout(timeout_s):
            while store.scrapes < rounds:
                await asyncio.sleep(0.01)
    finally:
        await store.stop()


def interval_metric(metrics: GatewayMetrics) -> float | None:
    return metrics.registry.get_sample_value("igw_scrape_interval_seconds")


async def test_an_expensive_round_stretches_the_interval_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cpu = Cpu()
    store = store_with(cpu, cost_s=0.02)  # 4 pods x 20 ms = 80 ms a round
    metrics = GatewayMetrics()
    metrics.watch_scrapes(store)
    with caplog.at_level(logging.WARNING):
        await run_rounds(store, 2, timeout_s=5)
    # 80 ms of CPU a round within a quarter of a core: one round every 320 ms
    assert store.current_interval_s == pytest.approx(0.32)
    assert interval_metric(metrics) == pytest.approx(0.32)
    assert metrics.registry.get_sample_value("igw_scrape_round_cpu_seconds") == pytest.approx(0.08)
    assert any(
        "interval 320 ms instead of the configured 50 ms" in r.getMessage() for r in caplog.records
    )
    assert all(not e.stale for e in store.endpoints)


def test_the_interval_comes_back_when_rounds_get_cheap(caplog: pytest.LogCaptureFixture) -> None:
    store = store_with(Cpu(), cost_s=0.0)
    store.adapt(0.1)
    assert store.current_interval_s == pytest.approx(0.4)
    for _ in range(COST_WINDOW - 1):
        store.adapt(0.1)  # request traffic in the same process makes single rounds dear…
    store.adapt(0.03)  # …the cheapest recent round is the scrape's own cost
    assert store.current_interval_s == pytest.approx(0.12)
    with caplog.at_level(logging.INFO):
        for _ in range(COST_WINDOW):
            store.adapt(0.001)
    assert store.current_interval_s == pytest.approx(0.05)
    assert any("back to the configured 50 ms" in r.getMessage() for r in caplog.records)


def test_small_changes_do_not_flap() -> None:
    store = store_with(Cpu(), cost_s=0.0)
    store.adapt(0.02)  # needs 80 ms
    assert store.current_interval_s == pytest.approx(0.08)
    store.adapt(0.019)  # 76 ms: within the hysteresis, kept
    assert store.current_interval_s == pytest.approx(0.08)
    for _ in range(COST_WINDOW):
        store.adapt(0.021)  # every recent cycle dearer: over budget grows at once
    assert store.current_interval_s == pytest.approx(0.084)


def test_a_cheap_fleet_keeps_the_configured_interval() -> None:
    store = store_with(Cpu(), cost_s=0.0)
    store.adapt(0.01)  # 10 ms a round at 50 ms: a fifth of a core
    assert store.current_interval_s == 0.05


def test_no_budget_means_a_fixed_interval() -> None:
    store = store_with(Cpu(), cost_s=0.0, max_cpu_fraction=None)
    store.adapt(1.0)
    assert store.current_interval_s == 0.05


async def test_an_unchanged_page_is_not_parsed_again() -> None:
    pages = {"/metrics": PAGE, "/v1/models": '{"data": [{"id": "m"}]}'}

    async def fetch(endpoint: Endpoint, path: str) -> str:
        return pages[path]

    store = EndpointStore(pods(2), fetch)
    await store.scrape_once()
    first = store.endpoints[0].metrics
    await store.scrape_once()
    assert store.endpoints[0].metrics is first  # the same parse, reused
    assert store.endpoints[0].scrape_seq == 2  # still a fresh scrape
    pages["/metrics"] = PAGE.replace("running 1", "running 7")
    await store.scrape_once()
    assert store.endpoints[0].metrics is not first
    assert store.endpoints[0].metrics.running == 7  # type: ignore[union-attr]
    store.endpoints.pop()  # discovery removed a pod: its last page is dropped
    pages["/metrics"] = PAGE
    await store.scrape_once()
    assert list(store._pages) == store.endpoints


async def test_the_oldest_routable_view_is_exported() -> None:
    """`igw_scrape_view_age_max_seconds`: time since the oldest good scrape of a pod that
    is not stale, read at export; it falls when the pod is scraped again."""
    now = [100.0]
    pages = {"/metrics": PAGE, "/v1/models": '{"data": [{"id": "m"}]}'}

    async def fetch(endpoint: Endpoint, path: str) -> str:
        if endpoint.name == "pod-1" and now[0] > 100.0:
            raise ConnectionError("down")
        return pages[path]

    store = EndpointStore(pods(2), fetch, clock=lambda: now[0], staleness_s=2.0)
    metrics = GatewayMetrics()
    metrics.watch_scrapes(store)
    age = metrics.registry.get_sample_value
    assert age("igw_scrape_view_age_max_seconds") == 0.0  # nothing routable yet
    await store.scrape_once()
    now[0] = 101.5
    await store.scrape_once()  # pod-1 fails: its view is 1.5 s old, pod-0's is new
    assert age("igw_scrape_view_age_max_seconds") == 1.5
    now[0] = 103.0
    await store.scrape_once()  # pod-1 is stale now: not routable, not counted
    assert store.endpoints[1].stale and age("igw_scrape_view_age_max_seconds") == 0.0


async def test_each_pods_model_list_is_read_again_every_n_rounds_a_share_each_round() -> None:
    """Every pod's `/v1/models` is read again once every `models_every` rounds, but a
    share of the pods each round, never all in one: at 1,024 pods a round that read
    every model list doubled its requests, overran, and the rounds started at once after
    it left views 35-48 ms late (bench/scale.py, a scrape trace)."""
    read: list[list[str]] = []

    async def fetch(endpoint: Endpoint, path: str) -> str:
        if path == "/v1/models":
            read[-1].append(endpoint.name)
            return '{"data": [{"id": "m"}]}'
        return PAGE

    store = EndpointStore(pods(8), fetch, models_every=4)
    for _ in range(9):
        read.append([])
        await store.scrape_once()
    assert len(read[0]) == 8, "a pod without a model list is asked at once"
    for first in (1, 5):  # two cycles of four rounds
        cycle = read[first : first + 4]
        assert [len(names) for names in cycle] == [2, 2, 2, 2]
        assert sorted(name for names in cycle for name in names) == sorted(
            e.name for e in store.endpoints
        )


@pytest.mark.parametrize("spread_s", [0.0, 0.02])
async def test_a_pod_that_never_answers_is_cut_at_the_timeout_and_holds_no_other(
    spread_s: float,
) -> None:
    """A pod whose scrape never answers costs its round `timeout_s`, not more: the round
    ends, the pods that answered are fresh, the silent one is not, and its fetch was
    cancelled (nothing of it outlives the round), in a burst round and a spread one."""
    cancelled: list[str] = []

    async def fetch(endpoint: Endpoint, path: str) -> str:
        if endpoint.name == "pod-1" and path != "/v1/models":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(endpoint.name)
                raise
        return PAGE if path != "/v1/models" else '{"data": [{"id": "m"}]}'

    store = EndpointStore(pods(3 * SLICE_PODS), fetch, timeout_s=0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(5):
        await store.scrape_once(spread_s)
    assert 0.2 <= loop.time() - started < 2.0
    assert cancelled == ["pod-1"]
    assert [e.name for e in store.endpoints if e.metrics is None] == ["pod-1"]
    assert [e.name for e in store.endpoints if e.stale] == ["pod-1"]


@pytest.mark.parametrize(("spread_s", "timers"), [(0.0, 1), (0.02, 6)])
async def test_scrapes_started_together_share_one_deadline_timer(
    spread_s: float, timers: int
) -> None:
    """The scrapes of a burst round, or of one slice, start together and so share one
    deadline: one timer, not one (and a `Timeout`) a scrape, which at 1,024 pods cost
    about 5 % of an idle picker's CPU. A spread round of three slices schedules one
    timer to start each slice and one deadline each (the first slice starts at once)."""
    loop = asyncio.get_running_loop()
    scheduled: list[float] = []
    call_at = loop.call_at

    def counting_call_at(when, callback, *args, context=None):  # type: ignore[no-untyped-def]
        scheduled.append(when)
        return call_at(when, callback, *args, context=context)

    async def fetch(endpoint: Endpoint, path: str) -> str:
        return PAGE if path != "/v1/models" else '{"data": [{"id": "m"}]}'

    store = EndpointStore(pods(3 * SLICE_PODS), fetch, timeout_s=5)
    loop.call_at = counting_call_at  # type: ignore[method-assign]
    try:
        await store.scrape_once(spread_s)
    finally:
        del loop.call_at
    assert len(scheduled) <= timers
    assert all(e.metrics is not None for e in store.endpoints)


async def test_the_config_sets_the_scrape_cpu_budget_and_a_reload_changes_it() -> None:
    """`scrape.cpuBudgetCores` (default a quarter of a core) is the store's budget, at
    build and at every reload."""
    from inference_gateway.assembly.core import build_core
    from inference_gateway.config.spec import GatewayConfigSpec
    from inference_gateway.core.traffic.rewrites import RewriteSet

    async def fetch(endpoint: Endpoint, path: str) -> str:
        return PAGE

    core = build_core(pods(1), GatewayConfigSpec(), fetch=fetch)
    assert core.store.max_cpu_fraction == 0.25
    wider = GatewayConfigSpec.model_validate({"scrape": {"cpuBudgetCores": 1.0}})
    core.apply_config(wider, RewriteSet.empty())
    assert core.store.max_cpu_fraction == 1.0
    with pytest.raises(ValueError):
        GatewayConfigSpec.model_validate({"scrape": {"cpuBudgetCores": 0}})


async def started_at(pods_count: int, spread: float) -> tuple[list[float], EndpointStore]:
    """When each pod's scrape began in the running store's second round (loop time)."""
    rounds: list[dict[str, float]] = [{}, {}]
    loop = asyncio.get_running_loop()
    store: EndpointStore

    async def fetch(endpoint: Endpoint, path: str) -> str:
        if path != "/v1/models" and store.scrapes < 2:
            rounds[store.scrapes].setdefault(endpoint.name, loop.time())
        return PAGE if path != "/v1/models" else '{"data": [{"id": "m"}]}'

    store = EndpointStore(pods(pods_count), fetch, interval_s=0.1, max_cpu_fraction=None)
    store.spread = spread
    await run_rounds(store, 2, timeout_s=10)
    return [rounds[1][e.name] for e in store.endpoints], store


async def test_a_rounds_scrapes_are_spread_over_the_interval_in_slices() -> None:
    """A round's pages all came back together, and a decision queued behind a thousand
    of them waited for all (bench/scale.py: wait p99 66 ms at 1,024 pods, 4 ms spread).
    Spread: slices of SLICE_PODS start `SPREAD` of the interval apart in all, each pod
    once a round; the bounds are lower ones (a timer never fires early), load-proof."""
    starts, store = await started_at(3 * SLICE_PODS, SPREAD)
    first = min(starts)
    slices = [starts[k * SLICE_PODS : (k + 1) * SLICE_PODS] for k in range(3)]
    step = 0.1 * SPREAD / 3
    for k, chunk in enumerate(slices):
        assert min(chunk) - first >= k * step - 0.002, (k, min(chunk) - first)
    assert max(slices[0]) < min(slices[1]), "a slice starts together, before the next"
    assert all(not e.stale for e in store.endpoints)


async def turns_per_round(
    count: int,
    spread: float,
    rounds: int,
    overrun: int | None = None,
    overrun_s: float = 1.0,
    interval_s: float = 0.1,
) -> list[int]:
    """How many turns of the event loop each round's scrapes took to start (a ticker
    counts the turns; a spread round's slices start many turns apart). Round `overrun`
    takes `overrun_s` more of the store's clock."""
    loop = asyncio.get_running_loop()
    turn, offset = [0], [0.0]

    def tick() -> None:
        turn[0] += 1
        ticker[0] = loop.call_soon(tick)

    ticker = [loop.call_soon(tick)]
    turns: list[dict[str, int]] = [{} for _ in range(rounds)]

    async def fetch(endpoint: Endpoint, path: str) -> str:
        if path == "/v1/models":
            return '{"data": [{"id": "m"}]}'
        if store.scrapes < rounds:
            turns[store.scrapes].setdefault(endpoint.name, turn[0])
            if store.scrapes == overrun and len(turns[overrun]) == 1:
                offset[0] += overrun_s
        return PAGE

    store = EndpointStore(
        pods(count),
        fetch,
        interval_s=interval_s,
        max_cpu_fraction=None,
        staleness_s=60.0,
        clock=lambda: loop.time() + offset[0],
    )
    store.spread = spread
    try:
        await run_rounds(store, rounds, timeout_s=10)
    finally:
        ticker[0].cancel()
    assert all(len(t) == count for t in turns)
    return [max(t.values()) - min(t.values()) for t in turns]


async def test_with_no_spread_a_round_starts_together() -> None:
    assert all(spread <= 1 for spread in await turns_per_round(3 * SLICE_PODS, 0.0, 2))


async def test_a_round_that_overran_its_interval_is_followed_by_one_started_at_once() -> None:
    """Saturated by KV events, a loop's every turn is long: a spread round then only
    lasted longer (bench/scale.py: views up to 0.78 s old against 0.54), so after a
    round that overran, the next starts at once; the one after spreads again."""
    first, overran, after, again = await turns_per_round(3 * SLICE_PODS, SPREAD, 4, overrun=1)
    assert first > 1 and overran > 1, "spread rounds"
    assert after <= 1, "started at once after the overrun"
    assert again > 1, "spread again"


async def test_a_round_just_past_its_interval_is_followed_by_a_spread_one() -> None:
    """Started at once, every answer of a round queues behind the others: where scraping
    takes most of the interval such a round runs past it too, and the next, and so on
    (a trace at 1,024 pods: twelve in a row, views renewed 40-75 ms late). So only a
    round past `OVERRUN` intervals is followed by one started at once."""
    # three slices 0.12 s apart (a timer never fires early): the round takes at least
    # 0.24 + 0.18 s, past its 0.4 s interval, and under 1.5 of it unless 0.18 s late
    assert OVERRUN >= 1.5
    turns = await turns_per_round(
        3 * SLICE_PODS, SPREAD, 3, overrun=1, overrun_s=0.18, interval_s=0.4
    )
    assert all(t > 1 for t in turns), turns


async def test_a_slow_pod_holds_back_neither_the_others_rounds_nor_the_stores_stop() -> None:
    """Rounds start an interval apart whether or not a round's slowest answer is in: a
    pod slow to answer (its API server busy) held every round until it answered or its
    deadline came, and every pod's view aged with it. The slow pod is not asked again
    while its scrape is out, and `stop` ends that scrape (nothing outlives the store)."""
    loop = asyncio.get_running_loop()
    asked = {f"pod-{i}": 0 for i in range(4)}
    cancelled: list[str] = []

    async def fetch(endpoint: Endpoint, path: str) -> str:
        if path == "/v1/models":
            return '{"data": [{"id": "m"}]}'
        asked[endpoint.name] += 1
        if endpoint.name == "pod-1" and asked["pod-1"] > 1:  # slow from its second scrape
            try:
                await asyncio.sleep(5.0)
            except asyncio.CancelledError:
                cancelled.append(endpoint.name)
                raise
        return PAGE

    store = EndpointStore(
        pods(4), fetch, interval_s=0.05, timeout_s=3.0, staleness_s=10.0, max_cpu_fraction=None
    )
    store.start()
    ages: list[float] = []
    try:
        async with asyncio.timeout(10):
            while asked["pod-1"] < 2:
                await asyncio.sleep(0.01)
            until = loop.time() + 1.0
            while loop.time() < until:
                await asyncio.sleep(0.02)
                now = store.clock()
                ages.append(max(now - e.scraped_at for e in store.endpoints if e.name != "pod-1"))
    finally:
        await store.stop()
    assert max(ages) < 0.5, f"the other pods' views aged with the slow pod's: {max(ages):.2f} s"
    assert asked["pod-1"] == 2, "asked again while its scrape was out"
    assert min(asked[name] for name in ("pod-0", "pod-2", "pod-3")) >= 5
    assert cancelled == ["pod-1"]
