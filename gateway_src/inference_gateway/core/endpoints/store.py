"""The endpoint store: the pods of every pool, their last scrape, and their staleness.

Scraping reaches pods through an injected `fetch(endpoint, path) -> str` coroutine, so
tests and other drivers can feed the same store without HTTP. A pod whose last good
scrape is older than `staleness_s` is marked stale (never routed to) and returns by
itself on its next good scrape.

Scraping has a CPU budget, `max_cpu_fraction` of a core (default a quarter): the loop
measures what each scrape cycle costs and, when the configured interval would spend more
than the budget (many pods, large pages, a slow machine), stretches the interval to fit
and logs a warning; it returns to the configured interval by itself when the cost falls.
`current_interval_s` is the interval in force. The cost is the scrape's own work, timed
where it runs, when the fetch can say what its transport spent (a `cpu_seconds()`
attribute on the fetch function, as the data planes' HTTP fetches have): the parse and
bookkeeping here plus the client's writes and answer parsing, times `LOOP_OVERHEAD` for
the event loop's share they cannot see (socket reads, tasks, timers). The parse and the
answer's reading are each one synchronous step, timed on the monotonic clock: their CPU
time unless the thread is preempted in them (a CPU-time clock is a system call, about
0.5 us on our VM: six a scrape were 5 % of an idle picker's CPU at 1,024 pods). The
request's write keeps the thread's CPU clock: it wakes the pod, and where the pod runs on
the same machine the scheduler may run it before the write returns.
Request traffic in the same process then never counts, however steady. Otherwise it is
the process CPU of each cycle, the lowest of the recent ones. A page equal to the pod's
previous one (an idle engine's) is not parsed again.

Where the engine can filter its page (`adapters.FILTERED_PATHS`: vLLM), a scrape asks
for only the families routing reads. A pod whose filtered answer lacks them (an empty
page in prometheus_client's multiprocess mode) or fails while its whole page answers (a
server without the route) is read whole from `/metrics`, and asked for the filtered page
again `FILTER_RECHECK` rounds later (a pod can be replaced by another build).

A round's scrapes start in slices of `SLICE_PODS` pods spread over most of the interval
(`SPREAD`, `run`), not all at once: on the one event loop that also decides, a thousand
pages coming back together held every request that arrived behind them. The next round
starts an interval later whether or not every answer is in: a scrape still out goes on
under its deadline and its pod is left out of rounds until it ends, so one slow pod ages
its own view, not every pod's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

import orjson

from inference_gateway.background import Stragglers, cancel_and_wait
from inference_gateway.core.endpoints.adapters import (
    FILTERED_PATHS,
    PageLayout,
    parse_metrics,
    routing_families_present,
)
from inference_gateway.core.scheduling.types import Endpoint, PodMetrics

__all__ = ["EndpointStore", "Fetch"]

log = logging.getLogger(__name__)

Fetch = Callable[[Endpoint, str], Awaitable[str]]  # may carry `cpu_seconds() -> float`

COST_WINDOW = 20  # cycles whose lowest cost is taken as the scrape cost
# process CPU per scrape over the timed work, measured by bench/scrape_cost.py with an idle
# picker on uvloop: 2.2-3.0 at 4-128 pods
LOOP_OVERHEAD = 2.5
HYSTERESIS = 0.2  # relative saving before a stretched interval shrinks (and is re-logged)
FILTER_RECHECK = 200  # rounds a pod read whole waits before its filtered page is tried again
SPREAD = 0.9  # share of the interval a round's scrapes are spread over (`EndpointStore.run`)
SLICE_PODS = 16  # pods whose scrapes start together in a spread round (1-2 ms of pages)
OVERRUN = 1.5  # intervals a round may take before the next starts all at once (`run`)


class EndpointStore:
    def __init__(
        self,
        endpoints: list[Endpoint],
        fetch: Fetch | None,
        *,
        interval_s: float = 0.05,
        timeout_s: float = 1.0,
        staleness_s: float = 2.0,
        engine: str = "vllm",
        models_every: int = 20,
        clock: Callable[[], float] = time.monotonic,
        max_cpu_fraction: float | None = 0.25,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        """`fetch` None: the driver records scrapes itself (the simulator, through
        `Endpoint.record_scrape`) and never runs the loop. `max_cpu_fraction`: the share
        of a core scraping may use before the interval stretches (None: never stretch)."""
        self.endpoints = endpoints
        self.fetch = fetch
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.staleness_s = staleness_s
        self.engine = engine
        self.models_every = models_every
        self.clock = clock
        self.max_cpu_fraction = max_cpu_fraction
        self.cpu_clock = cpu_clock
        self.current_interval_s = interval_s
        self._said_interval_s = interval_s  # the interval the last log line announced
        self.round_cpu_s = 0.0  # the CPU one scrape cycle costs (lowest of the recent ones)
        self._round_costs: deque[float] = deque(maxlen=COST_WINDOW)
        # last page, its parse, where its families were (`adapters.PageLayout`)
        self._pages: dict[Endpoint, tuple[str, PodMetrics, PageLayout]] = {}
        self._fetch_cpu: Callable[[], float] | None = getattr(fetch, "cpu_seconds", None)
        self._own_s = 0.0  # thread CPU of the parsing, timed where it runs
        self.scrapes = 0
        self.connection_failures = 0  # reports that marked a pod down
        self._failed: dict[Endpoint, float] = {}  # pod -> when a data plane saw it fail
        self._filtered_path = FILTERED_PATHS.get(engine)
        self._whole_since: dict[Endpoint, int] = {}  # pod read whole -> since which round
        self._task: asyncio.Task[None] | None = None
        self.spread = SPREAD  # 0: a round's scrapes start together
        self._in_flight: dict[Endpoint, object] = {}  # pod -> its scrape's slice (`_together`)
        self._left = Stragglers()  # slices a round stopped waiting for

    def ready(self) -> list[Endpoint]:
        return [e for e in self.endpoints if not e.stale]

    def connection_failed(self, endpoint: Endpoint) -> None:
        """A data plane could not reach `endpoint`: not picked again until a scrape that
        starts from now on succeeds."""
        if endpoint not in self._failed:
            log.warning(
                "pod %s (%s) refused or dropped a connection: not picked until a fresh "
                "scrape says it is back",
                endpoint.name,
                endpoint.hostport,
            )
        self._failed[endpoint] = self.clock()
        endpoint.stale = True
        self.connection_failures += 1

    def max_view_age_s(self) -> float:
        """The oldest view of a routable pod: time since its last good scrape began (0
        with none routable; a stale pod is not routed to, so its view is used by none)."""
        now = self.clock()
        return max((now - e.scraped_at for e in self.endpoints if not e.stale), default=0.0)

    def pools(self) -> dict[str, list[Endpoint]]:
        out: dict[str, list[Endpoint]] = {}
        for e in self.endpoints:
            out.setdefault(e.pool, []).append(e)
        return out

    async def scrape_once(self, spread_s: float = 0.0, answers_by: float | None = None) -> None:
        """Scrape every pod concurrently, then re-mark staleness. `spread_s` > 0: the
        pods in slices of `SLICE_PODS`, slice k starting `k / slices` of the way through
        it, not all at once (see `run`). `answers_by` (loop time; the loop's rounds): once
        every slice has started, wait for answers until then only; the scrapes still out
        go on under their deadline, and their pods are left out of rounds until they end.

        Each pod's model list is read again every `models_every` rounds, a share of the
        pods each round: read for every pod in one round, it doubled that round's
        requests, and at 1,024 pods on a full core of budget the round overran, and the
        rounds started at once after it left views 35-48 ms late on their answers."""
        every, phase = self.models_every, self.scrapes % self.models_every
        jobs = [(e, i % every == phase) for i, e in enumerate(self.endpoints)]
        loop = asyncio.get_running_loop()
        if spread_s > 0 and len(jobs) > SLICE_PODS:
            slices = [jobs[i : i + SLICE_PODS] for i in range(0, len(jobs), SLICE_PODS)]
        else:
            slices = [jobs]
        start, step = loop.time(), spread_s / len(slices)
        started: list[asyncio.Task[None]] = []
        try:
            for k, chunk in enumerate(slices):
                delay = start + k * step - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                started.append(loop.create_task(self._together(chunk, answers_by is not None)))
        except BaseException:
            self._left.cancel(started)
            raise
        await self._left.wait(started, answers_by)  # `stop` ends those still out
        self.scrapes += 1
        now = self.clock()
        failed = self._failed
        if failed and len(failed) > len(self.endpoints):  # pods were removed: forget theirs
            current = set(self.endpoints)
            self._failed = failed = {e: t for e, t in failed.items() if e in current}
        if len(self._whole_since) > len(self.endpoints):
            current = set(self.endpoints)
            self._whole_since = {e: n for e, n in self._whole_since.items() if e in current}
        for e in self.endpoints:
            e.stale = now - e.scraped_at > self.staleness_s or e in failed

    async def _together(self, jobs: list[tuple[Endpoint, bool]], skip_out: bool) -> None:
        """Scrape `jobs` (with their model lists where marked) at once, under one
        deadline `timeout_s` away: they start together, so one timer serves them all (a
        timer and a `Timeout` a scrape were about 5 % of an idle picker's CPU at 1,024
        pods). A scrape still running at the deadline is cancelled and leaves its pod's
        view as it was. `skip_out` (the loop's rounds): a pod whose last scrape has not
        ended is left out, so a slow pod gets one request at a time from the loop; an
        explicit scrape (at start, of pods discovery just added) asks every pod."""
        in_flight = self._in_flight
        if skip_out:
            jobs = [job for job in jobs if job[0] not in in_flight]
        mark = object()  # this slice's claim on its pods: each scrape gives it up as it ends
        for e, _ in jobs:
            in_flight[e] = mark
        try:
            async with asyncio.timeout(self.timeout_s):
                await asyncio.gather(*(self._scrape(e, models, mark) for e, models in jobs))
        except TimeoutError:
            cut = "scrapes of %d pods ran past %.1f s: the unanswered were cut"
            log.debug(cut, len(jobs), self.timeout_s)
        finally:  # a scrape cancelled before it began never ran to give its pod up
            for e, _ in jobs:
                if in_flight.get(e) is mark:
                    del in_flight[e]

    async def _scrape(self, endpoint: Endpoint, with_models: bool, mark: object) -> None:
        """One pod's page (and model list where asked), under its caller's deadline; then
        the pod is given up by its slice's `mark` (`_together`)."""
        fetch = self.fetch
        assert fetch is not None, "a store without a fetch is fed by its driver"
        try:
            try:
                started = self.clock()
                text = await self._page(fetch, endpoint)
                parsing = time.perf_counter()  # one synchronous step: see `spent_s`
                metrics = self._parse(endpoint, text)
                self._own_s += time.perf_counter() - parsing
                if with_models or not endpoint.models:
                    text = await fetch(endpoint, "/v1/models")
                    body = orjson.loads(text)
                    endpoint.models = frozenset(m["id"] for m in body.get("data", []))
            except Exception as error:  # a dead pod must not stop the loop
                log.debug("scrape of %s failed: %r", endpoint.name, error)
                return
            failed_at = self._failed.get(endpoint)
            if failed_at is not None:
                if started <= failed_at:  # began before the failure: says nothing about now
                    return
                del self._failed[endpoint]
                log.info("pod %s answers scrapes again: back in rotation", endpoint.name)
            endpoint.record_scrape(metrics, started)
        finally:
            if self._in_flight.get(endpoint) is mark:
                del self._in_flight[endpoint]

    async def _page(self, fetch: Fetch, endpoint: Endpoint) -> str:
        """The pod's metrics page: filtered where the engine and the pod allow, else whole."""
        path = self._filtered_path
        since = self._whole_since.get(endpoint)
        if path is None or (since is not None and self.scrapes - since < FILTER_RECHECK):
            return await fetch(endpoint, "/metrics")
        try:
            text = await fetch(endpoint, path)
            if routing_families_present(text, self.engine):
                self._whole_since.pop(endpoint, None)
                return text
            why = "its answer lacks the routing families (a multiprocess registry?)"
        except Exception as error:  # a pod down fails the whole page too, below
            why = f"it failed: {error!r}"
        text = await fetch(endpoint, "/metrics")
        if since is None:  # said once a store at INFO: a whole fleet may be old vLLMs
            log.log(
                logging.DEBUG if self._whole_since else logging.INFO,
                "pod %s does not filter its metrics page (%s): read whole, asked again "
                "every %d rounds",
                endpoint.name,
                why,
                FILTER_RECHECK,
            )
        self._whole_since[endpoint] = self.scrapes
        return text

    def _parse(self, endpoint: Endpoint, text: str) -> PodMetrics:
        """The page's metrics, parsed again only when it differs from the last one (a
        length check first, then one memory compare)."""
        last = self._pages.get(endpoint)
        if last is not None and last[0] == text:
            return last[1]
        layout = last[2] if last is not None else PageLayout()
        metrics = parse_metrics(text, self.engine, layout)
        if len(self._pages) > len(self.endpoints):  # pods were removed: forget theirs
            current = set(self.endpoints)
            self._pages = {e: page for e, page in self._pages.items() if e in current}
        self._pages[endpoint] = (text, metrics, layout)
        return metrics

    def spent_s(self) -> float:
        """Cumulative scrape cost: the scrape's own timed work when the fetch reports its
        transport's, else the process's CPU."""
        if self._fetch_cpu is None:
            return self.cpu_clock()
        return (self._fetch_cpu() + self._own_s) * LOOP_OVERHEAD

    async def run(self) -> None:
        """Scrape rounds every interval in force. A round's scrapes are spread over
        `SPREAD` of that interval: started together, a round's pages all came back
        together, and a request arriving behind a thousand of them waited for the whole
        batch to be read (`docs/sizing.md`, "What a request waits"). Each pod is still
        scraped once an interval, so its view is no older. Slices of `SLICE_PODS` pods
        keep the loop's timers few (one a pod cost 20-50 % more CPU) and its turns short:
        a slice's answers are read one after another, and a request due meanwhile waits
        for all of them. At 1,024 pods and 500 req/s, requests waited 2.4-4.8 ms at p99
        from when they were due with slices of 32, 1.7-2.7 ms with 16, for no more CPU
        (`docs/sizing.md`).

        Spread over nine tenths rather than half: where scraping takes most of the
        interval (1,024 pods on 0.8-1 core), half an interval of slices brought answers
        faster than the loop reads them, and a pod's answer queued behind the others'
        before its view was renewed; spread wider, each slice's answers are read as they
        come (views at most 122-126 ms old against 153-161, at an 81-91 ms interval, and
        less CPU). The last tenth is the last slice's time to answer.

        A round that took over `OVERRUN` intervals (a loop saturated by KV events, where
        each slice's timer and answers wait a long turn and a spread round only lasts
        longer) is followed by one started at once. Not one that merely ran past its
        interval: a round started at once has every answer queue behind the others, so
        where scraping takes most of the interval it ran past it too, and the next, and
        so on (a scrape trace at 1,024 pods on a full core: twelve such rounds in a row,
        each pod's view renewed 40-75 ms after its scrape began, against about 1 ms
        spread).

        A round waits for answers until the interval is over, not for the last one: it
        waited for its slowest, so one pod slow to answer (an API server busy
        tokenizing) held every pod's next scrape; among 32 pods, one answering in 400 ms
        left the others' views up to 406 ms old at a 50 ms interval, one that never
        answered up to its 1 s deadline. The slices still out go on (`_together` leaves
        their pods out of later rounds), and `stop` ends them."""
        spent = self.spent_s()
        overran = False
        loop = asyncio.get_running_loop()
        while True:
            started, interval = self.clock(), self.current_interval_s
            answers_by = loop.time() + interval
            await self.scrape_once(0.0 if overran else interval * self.spread, answers_by)
            took = self.clock() - started
            overran = took > interval * OVERRUN
            await asyncio.sleep(max(0.0, interval - took))
            now = self.spent_s()
            self.adapt(now - spent)  # the whole cycle: the round and whatever it left to do
            spent = now

    def adapt(self, cycle_cpu_s: float) -> None:
        """Fit the interval to the CPU budget after a scrape cycle that took `cycle_cpu_s`.

        Over budget, the interval grows at once; under it, it shrinks only when the
        saving is worth it (HYSTERESIS) or back to the configured interval, so it does
        not flap. Logged when it leaves or regains the configured interval, and when a
        stretched interval moves by more than HYSTERESIS since last said."""
        if self.max_cpu_fraction is None:
            self.current_interval_s = self.interval_s
            return
        self._round_costs.append(cycle_cpu_s)
        self.round_cpu_s = cost = min(self._round_costs)
        needed = max(self.interval_s, cost / self.max_cpu_fraction)
        current = self.current_interval_s
        if needed > current or needed == self.interval_s or needed < current * (1 - HYSTERESIS):
            self.current_interval_s = needed
        if self.current_interval_s != current:
            self._say(current)

    def _say(self, was: float) -> None:
        now, said = self.current_interval_s, self._said_interval_s
        if now == self.interval_s:
            if was != self.interval_s:
                log.info("scrape interval back to the configured %.0f ms", now * 1000)
            self._said_interval_s = now
        elif said == self.interval_s or abs(now - said) > HYSTERESIS * said:
            self._said_interval_s = now
            log.warning(
                "scraping %d pods takes %.1f ms of CPU a cycle: interval %.0f ms instead of "
                "the configured %.0f ms, to stay within %.0f%% of a core",
                len(self.endpoints),
                self.round_cpu_s * 1000,
                now * 1000,
                self.interval_s * 1000,
                (self.max_cpu_fraction or 0) * 100,
            )

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await self._left.stop()  # no scrape outlives the store's loop
