"""A cancel that lands inside a store call cancels the caller (shared_store/client.py
`StoreHealth.call`, background.py `raise_if_cancelled_since`).

redis-py 8 does not always let a cancel through a command: a cancel that lands while
a connection is being made or torn down can come back as its `ConnectionError`, or the
command returns normally past it. A CI run hung for pytest's whole 300 s on that: the
global router's cluster poller was cancelled inside its drain-set read, `StoreHealth`
read the error as a store failure, the loop slept on, and `stop()` waited for ever.
The operations below stand in for the client at that moment (the real race cannot be
made to happen on demand); the store under them is never reached.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import cast

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from inference_gateway.config.global_router import GlobalRouterSpec
from inference_gateway.core.scheduling.cluster_registry import ClusterRegistry
from inference_gateway.frontends.global_router.clusters import ClusterPoller
from inference_gateway.frontends.global_router.drains import PlannedDrains
from inference_gateway.shared_store.client import StoreHealth, StoreUnavailable
from inference_gateway.telemetry.global_metrics import GlobalMetrics


def cancel_as_connection_error(started: asyncio.Event) -> Callable[[], Awaitable[int]]:
    """A command that turns the cancel it receives into the client's own error."""

    async def operation() -> int:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            raise RedisConnectionError("Connection closed by server.") from None
        return 1

    return operation


def cancel_swallowed(started: asyncio.Event) -> Callable[[], Awaitable[int]]:
    """A command that finishes normally past the cancel it received."""

    async def operation() -> int:
        started.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(30)
        return 1

    return operation


@pytest.mark.parametrize("command", [cancel_as_connection_error, cancel_swallowed])
async def test_a_cancel_inside_a_store_call_cancels_the_caller(
    command: Callable[[asyncio.Event], Callable[[], Awaitable[int]]],
) -> None:
    health = StoreHealth("t", registry=CollectorRegistry())
    started = asyncio.Event()
    call = asyncio.create_task(health.call(command(started)))
    await started.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(call, 5)
    assert health.up  # a cancel says nothing about the store


async def test_the_calls_own_deadline_is_still_a_store_failure() -> None:
    """The deadline cancels the call too; that cancel, turned into the client's error,
    is the store's failure (local fallback), not the caller's cancel."""
    health = StoreHealth("t", deadline_s=0.05, registry=CollectorRegistry())
    with pytest.raises(StoreUnavailable):
        await health.call(cancel_as_connection_error(asyncio.Event()))
    assert not health.up


class _DrainSetStore:
    """The drain-set read of `PlannedDrains` (`SMEMBERS`): answered at start, then
    cancelled mid-command by the poller's `stop()`."""

    def __init__(self) -> None:
        self.reads = 0
        self.started = asyncio.Event()

    async def smembers(self, key: str) -> set[bytes]:
        self.reads += 1
        if self.reads == 2:  # the race, once: a later cancel goes through
            await cancel_as_connection_error(self.started)()
        return set()


async def test_a_poller_cancelled_inside_its_drain_set_read_stops() -> None:
    spec = GlobalRouterSpec.model_validate(
        {
            "homeRegion": "r1",
            "pollIntervalMs": 10,
            "clusters": [{"name": "a", "region": "r1", "endpoint": "http://127.0.0.1:9"}],
        }
    )
    store = _DrainSetStore()
    health = StoreHealth("global-router", registry=CollectorRegistry())
    poller = ClusterPoller(ClusterRegistry(spec, GlobalMetrics()))
    poller.planned = PlannedDrains(spec, cast(Redis, store), health).current
    await poller.start()
    await asyncio.wait_for(store.started.wait(), 5)
    stopping = asyncio.create_task(poller.stop())
    try:
        # `asyncio.wait` does not cancel what it waits for (`wait_for` would, and its
        # second cancel would reach the loop and hide the first one's loss)
        await asyncio.wait({stopping}, timeout=5)
        assert stopping.done()  # before the fix: the cancel read as "store down", on it went
    finally:
        stopping.cancel()
    assert store.reads == 2 and health.up
