"""Active-active gateway replicas: share the dispatch view through a Redis-protocol store.

Every `interval_s` (5 ms by default) a background loop does one store round trip: it
writes this replica's own state under its own key, with a TTL, and reads the other live
replicas' entries back (one Lua script, so one round trip and one consistent snapshot).
What travels is what the picking of one replica would know if it were the only one
(`scheduling.shared_view`): per pod, the requests sent since the last scrape and the
prompt tokens waiting for prefill; per pool and band, the ages of the oldest admission
waiters. The others' counts are summed into `Endpoint.peer_*`, their waiters into each
pool's `FlowController.peer_waiters`, so N replicas pick and admit like one.

Nothing on a request's path waits on the store: requests read whatever the last
exchange left on the endpoints. When the store cannot be reached, the replica drops the
others' counts (its local view, as with one replica), keeps serving, sets
`igw_dispatch_store_up` to 0 and logs one line; it logs one more when the store is back.
A replica that dies stops refreshing its key, which expires after `ttl_s`, so its
counts do not stick; a replica that stops cleanly deletes it at once.

Keys (one hash tag, so a clustered store keeps them on one shard):
`{NAMESPACE:dispatch}:replicas` (set of replica ids) and
`{NAMESPACE:dispatch}:replica:ID` (this replica's JSON entry, `PX ttl`).
Entries read back are checked like any input: a malformed one is skipped and counted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from inference_gateway.background import cancel_and_wait, pending_cancels, raise_if_cancelled_since
from inference_gateway.core.scheduling.shared_view import (
    PUBLISH_INTERVAL_S,
    DispatchCounts,
    apply_peer_dispatch,
    own_dispatch,
)
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.core.traffic.flow_control import BANDS, SHARED_WAITERS, FlowController
from inference_gateway.errors import ConfigError

__all__ = [
    "DEFAULT_TTL_S",
    "STORE_ENV",
    "DispatchShare",
    "PeerEntry",
    "decode_entry",
    "for_director",
]

log = logging.getLogger(__name__)

STORE_ENV = "IGW_STORE_URL"  # what `--store` of `igw serve` / `igw picker` defaults to
DEFAULT_TTL_S = 1.0  # a dead replica's counts vanish within this
DEFAULT_TIMEOUT_S = 0.25  # one exchange; past it the store counts as unreachable
RETRY_S = 0.5  # how often an unreachable store is tried again
MAX_PEERS = 256
MAX_COUNT = 1_000_000  # per pod; larger values in an entry are clamped
MAX_AGE_S = 3600.0

# KEYS[1] the replica set, KEYS[2] this replica's entry; ARGV id, entry, ttl ms, key prefix.
# Writes this replica's entry, then returns every other live entry, dropping the ids of
# replicas whose entry expired.
EXCHANGE_LUA = """
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if id ~= ARGV[1] then
    local entry = redis.call('GET', ARGV[4] .. id)
    if entry then
      out[#out + 1] = entry
    else
      redis.call('SREM', KEYS[1], id)
    end
  end
end
return out
"""

PeerEntry = tuple[DispatchCounts, dict[str, dict[str, list[float]]]]
Controllers = Callable[[], Mapping[str, FlowController]]


def decode_entry(raw: bytes) -> PeerEntry | None:
    """Another replica's entry, `{"d": {ip:port: [requests, prefill tokens]}, "q": {pool:
    {band: [ages]}}}`, or None when it is not that shape."""
    try:
        body = orjson.loads(raw)
        dispatch: DispatchCounts = {}
        for hostport, (requests, tokens) in body.get("d", {}).items():
            if not isinstance(hostport, str) or not _is_int(requests) or not _is_int(tokens):
                return None
            dispatch[hostport] = (_clamp(requests), _clamp(tokens))
        queues: dict[str, dict[str, list[float]]] = {}
        for pool, bands in body.get("q", {}).items():
            queues[pool] = {
                band: sorted(min(max(float(a), 0.0), MAX_AGE_S) for a in ages[:SHARED_WAITERS])
                for band, ages in bands.items()
                if band in BANDS and all(_is_number(a) for a in ages)
            }
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        return None
    return dispatch, queues


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _clamp(value: int) -> int:
    return min(max(value, 0), MAX_COUNT)


class DispatchShare:
    """This replica's side of the shared dispatch view; `start()` / `stop()` bound it."""

    def __init__(
        self,
        url: str,
        endpoints: Callable[[], list[Endpoint]],
        controllers: Controllers = dict,
        *,
        interval_s: float = PUBLISH_INTERVAL_S,
        ttl_s: float = DEFAULT_TTL_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        namespace: str = "igw",
        replica_id: str | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if not 0 < interval_s < ttl_s:
            raise ConfigError("store", ["interval: must be above 0 and below the entry TTL"])
        from redis.exceptions import RedisError  # here: `igw` commands without a store skip it

        from inference_gateway.shared_store.client import connect, store_from_flag

        self.failures = (RedisError, OSError, TimeoutError)
        # the same client as the rate limits (password from $IGW_STORE_PASSWORD, TLS), with
        # this loop's own deadline; a bad URL is a ConfigError
        spec = store_from_flag(url)
        assert spec is not None
        try:
            self.redis = connect(
                spec.model_copy(update={"timeout_ms": max(1, int(timeout_s * 1000))})
            )
        except ValueError as error:  # a URL redis cannot parse (port, database)
            raise ConfigError("store", [f"--store {url!r}: {error}"]) from None
        self.endpoints = endpoints
        self.controllers = controllers
        self.interval_s = interval_s
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.replica_id = replica_id or (
            f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        )
        tag = f"{{{namespace}:dispatch}}"
        self.prefix = f"{tag}:replica:"
        self.keys = [f"{tag}:replicas", self.prefix + self.replica_id]
        self.exchange = self.redis.register_script(EXCHANGE_LUA)
        self.up: bool | None = None  # None until the first exchange
        self.peers = 0
        self.exchanged = float("-inf")  # monotonic time of the last exchange that worked
        registry = registry if registry is not None else CollectorRegistry()
        self.up_gauge = Gauge(
            "igw_dispatch_store_up",
            "1 while this replica shares its dispatch view through the store, 0 while it "
            "picks on its local view because the store is unreachable.",
            registry=registry,
        )
        self.peers_gauge = Gauge(
            "igw_dispatch_peers", "Other gateway replicas seen in the store.", registry=registry
        )
        self.errors = Counter(
            "igw_dispatch_store_errors_total",
            "Failed exchanges with the store, and malformed entries read from it.",
            ["kind"],
            registry=registry,
        )
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.exchange_once()
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        """Stop publishing and remove this replica's entry (else it expires by TTL)."""
        await cancel_and_wait(self._task)
        self._task = None
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.redis.delete(self.keys[1])
        except self.failures:
            pass  # unreachable: the entry expires by itself
        await self.redis.aclose()

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            await self.exchange_once()
            period = self.interval_s if self.up else RETRY_S
            await asyncio.sleep(max(0.0, period - (time.monotonic() - started)))

    # ------------------------------------------------------------------ one exchange

    def own_entry(self, now: float) -> bytes:
        controllers = self.controllers()
        queues = {
            pool: controller.waiter_ages(now)
            for pool, controller in controllers.items()
            if controller.queued()
        }
        return orjson.dumps({"d": own_dispatch(self.endpoints()), "q": queues})

    async def exchange_once(self) -> bool:
        """Publish, read the others, apply; on a store failure fall back to the local view."""
        now = time.monotonic()
        entry = self.own_entry(now)
        cancels_before = pending_cancels()
        try:
            async with asyncio.timeout(self.timeout_s):
                raw = await self.exchange(
                    keys=self.keys,
                    args=[self.replica_id, entry, int(self.ttl_s * 1000), self.prefix],
                )
        except self.failures as error:
            raise_if_cancelled_since(cancels_before, error)  # a cancel is no store failure
            self._local_view(error)
            return False
        raise_if_cancelled_since(cancels_before)
        peers = []
        for item in raw[:MAX_PEERS]:
            decoded = decode_entry(item)
            if decoded is None:
                self.errors.labels("malformed_entry").inc()
            else:
                peers.append(decoded)
        self._apply(peers, now)
        self.exchanged = time.monotonic()
        if self.up is not True:
            log.info(
                "dispatch store reachable: sharing the dispatch view with %d other replica(s)",
                len(peers),
            )
        self.up = True
        self.up_gauge.set(1)
        self.peers = len(peers)
        self.peers_gauge.set(len(peers))
        return True

    def _apply(self, peers: list[PeerEntry], at: float) -> None:
        apply_peer_dispatch(self.endpoints(), (dispatch for dispatch, _ in peers))
        for pool, controller in self.controllers().items():
            controller.set_peer_waiters((queues.get(pool, {}) for _, queues in peers), at)

    def _local_view(self, error: BaseException) -> None:
        self.errors.labels("unreachable").inc()
        self._apply([], time.monotonic())
        if self.up is not False:
            log.warning(
                "dispatch store unreachable (%s): picking on this replica's local view "
                "until it is back",
                error.__class__.__name__ if isinstance(error, TimeoutError) else error,
            )
        self.up = False
        self.up_gauge.set(0)
        self.peers = 0
        self.peers_gauge.set(0)


def for_director(url: str, director: Any, **options: Any) -> DispatchShare:
    """The share of a data plane's director: its endpoints, its pools' admission queues,
    its metrics registry (one call in `igw serve` and `igw picker`)."""
    return DispatchShare(
        url,
        director.endpoints,
        lambda: {pool: gate.controller for pool, gate in director.gates.items()},
        registry=director.metrics.registry,
        **options,
    )
