"""The status poller: `GET /status` of every cluster each `pollIntervalMs`, fed to the
registry (`core/scheduling/cluster_registry.py`, which holds the health, drain and
ramp-back rules this router and the simulator share).

Each poll first applies the operator's drain set (`planned`, from `drains.py`), so a
planned cluster is never admitted by the status that comes with it; then it asks every
cluster at once, each under the epoch it was sent with (an answer that crossed a drain
is dropped by the registry). A status is hostile input like any other: at most
`MAX_STATUS_BYTES`, validated as `ClusterStatus`; a poll that fails to connect
(`connect_failed`), times out (`status_timeout`, `statusTimeoutMs`) or answers something
that is not a valid status (`status_invalid`) drains the cluster instead of crashing the
router.

A round waits for answers until the next round is due, not for its slowest: a poll still
out goes on under `statusTimeoutMs` and its cluster is not asked again until it ends, so
one slow cluster's status is late, not every cluster's. Waiting for the slowest, a
cluster gateway slow to answer held every other cluster's status as long, at the moment
traffic fails over to them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
from pydantic import ValidationError

from inference_gateway.background import Stragglers, cancel_and_wait
from inference_gateway.core.scheduling.cluster_registry import (
    MAX_STATUS_BYTES,
    ClusterRegistry,
    ClusterState,
    ClusterStatus,
)

__all__ = ["ClusterPoller"]

log = logging.getLogger(__name__)


@dataclass
class ClusterPoller:
    registry: ClusterRegistry
    planned: Callable[[], Awaitable[frozenset[str]]] | None = None  # the drain set (drains.py)
    _session: aiohttp.ClientSession | None = field(default=None, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _asked: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False)  # polls out
    _left: Stragglers = field(default_factory=Stragglers, init=False)

    async def poll_once(self, answers_by: float | None = None) -> None:
        """Ask every cluster for its status and wait for the answers. `answers_by` (loop
        time; the loop's rounds, `_run`): wait until then only, and leave out the
        clusters whose poll is still out; the polls out go on."""
        registry = self.registry
        if self.planned is not None:  # first, so a planned cluster is never admitted
            registry.set_planned(await self.planned())
        loop, asked = asyncio.get_running_loop(), self._asked
        polls = []
        for state in registry.states.values():
            if answers_by is None or state.name not in asked:
                poll = asked[state.name] = loop.create_task(self._poll(state))
                poll.add_done_callback(functools.partial(self._ended, state.name))
                polls.append(poll)
        await self._left.wait(polls, answers_by)  # `stop` ends those still out
        registry.check_staleness()

    def _ended(self, name: str, poll: asyncio.Task[None]) -> None:
        """The loop may ask `name` again once its poll has ended (cancelled before it
        began too); a later explicit poll's entry stays."""
        if self._asked.get(name) is poll:
            del self._asked[name]

    async def _poll(self, state: ClusterState) -> None:
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(total=self.registry.spec.status_timeout_ms / 1000)
        epoch = state.epoch
        try:
            async with self._session.get(
                state.spec.base_url + "/status", timeout=timeout
            ) as response:
                if response.status != 200:
                    raise ValueError(f"HTTP {response.status}")
                raw = await response.content.read(MAX_STATUS_BYTES + 1)
                if len(raw) > MAX_STATUS_BYTES:
                    raise ValueError("status larger than 256 KiB")
            status = ClusterStatus.model_validate_json(raw)
        except TimeoutError as error:  # accepted, but no heartbeat in time (a hung gateway)
            self.registry.drain(state.name, "status_timeout")
            log.debug("status of %s: %s", state.name, error)
            return
        except (aiohttp.ClientError, OSError) as error:
            self.registry.drain(state.name, "connect_failed")
            log.debug("status of %s: %s", state.name, error)
            return
        except (ValueError, ValidationError) as error:
            self.registry.drain(state.name, "status_invalid")
            log.debug("status of %s: %s", state.name, error)
            return
        self.registry.heartbeat(state.name, status, epoch)

    async def _run(self) -> None:
        interval = self.registry.spec.poll_interval_ms / 1000
        clock = self.registry.clock
        loop = asyncio.get_running_loop()
        while True:
            started = clock()
            await self.poll_once(loop.time() + interval)
            await asyncio.sleep(max(0.0, interval - (clock() - started)))

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        await self.poll_once()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await self._left.stop()  # no poll outlives the poller (nor its session)
        if self._session is not None:
            await self._session.close()
            self._session = None
