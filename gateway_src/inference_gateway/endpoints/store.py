"""The endpoint store: the pods of every pool, their last scrape, and their staleness.

Scraping reaches pods through an injected `fetch(endpoint, path) -> str` coroutine, so
tests and other drivers can feed the same store without HTTP. A pod whose last good
scrape is older than `staleness_s` is marked stale (never routed to) and returns by
itself on its next good scrape.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import orjson

from ..background import cancel_and_wait
from ..scheduling.types import Endpoint
from .adapters import parse_metrics

__all__ = ["EndpointStore", "Fetch"]

log = logging.getLogger(__name__)

Fetch = Callable[[Endpoint, str], Awaitable[str]]


class EndpointStore:
    def __init__(
        self,
        endpoints: list[Endpoint],
        fetch: Fetch,
        *,
        interval_s: float = 0.05,
        timeout_s: float = 1.0,
        staleness_s: float = 2.0,
        engine: str = "vllm",
        models_every: int = 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.endpoints = endpoints
        self.fetch = fetch
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.staleness_s = staleness_s
        self.engine = engine
        self.models_every = models_every
        self.clock = clock
        self.scrapes = 0
        self._task: asyncio.Task[None] | None = None

    def ready(self) -> list[Endpoint]:
        return [e for e in self.endpoints if not e.stale]

    def pools(self) -> dict[str, list[Endpoint]]:
        out: dict[str, list[Endpoint]] = {}
        for e in self.endpoints:
            out.setdefault(e.pool, []).append(e)
        return out

    async def scrape_once(self) -> None:
        """Scrape every pod concurrently, then re-mark staleness."""
        with_models = self.scrapes % self.models_every == 0
        await asyncio.gather(*(self._scrape(e, with_models) for e in self.endpoints))
        self.scrapes += 1
        now = self.clock()
        for e in self.endpoints:
            e.stale = now - e.scraped_at > self.staleness_s

    async def _scrape(self, endpoint: Endpoint, with_models: bool) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                started = self.clock()
                text = await self.fetch(endpoint, "/metrics")
                metrics = parse_metrics(text, self.engine)
                if with_models or not endpoint.models:
                    body = orjson.loads(await self.fetch(endpoint, "/v1/models"))
                    endpoint.models = frozenset(m["id"] for m in body.get("data", []))
        except Exception as error:  # a dead pod must not stop the loop
            log.debug("scrape of %s failed: %r", endpoint.name, error)
            return
        endpoint.metrics = metrics
        endpoint.scraped_at = started
        endpoint.sent_requests = 0
        endpoint.sent_tokens = 0
        endpoint.scrape_seq += 1

    async def run(self) -> None:
        while True:
            started = self.clock()
            await self.scrape_once()
            await asyncio.sleep(max(0.0, self.interval_s - (self.clock() - started)))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
