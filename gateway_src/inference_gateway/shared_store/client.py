"""One async Redis-protocol client from a URL, and the store's health state.

`StoreSpec` (its schema, `config/store.py`) says where the store is (`redis://` or
`rediss://` for TLS, as ElastiCache Valkey with in-transit encryption wants), who we are
(`username`, a password read from an environment variable so no secret sits in a config
file) and how long one round trip may take. `connect` builds the client with a bounded
pool (a burst of requests shares `maxConnections` sockets instead of opening one each)
and one retry, only for a socket the server had closed (`ConnectionError`: a store that
restarted leaves every pooled connection dead, and the first burst after it would
otherwise fall back to local counting once per stale socket); never after a timeout, so
a request on the hot path waits for at most one round trip, then the caller uses its
local view.

`StoreHealth` is that decision in one place. Every store call is wrapped in `call`: a
failure flips the state to "local fallback" (gauge `igw_store_up` 0, one warning line),
and while it is down calls are not attempted at all except one probe every `retry_s`,
so a dead store costs nothing per request. The first call that succeeds flips it back
(gauge 1, one info line). A call is also bounded as a whole (`deadline_s`, from
`StoreHealth.for_spec`: the client's own timeouts for a free connection, a connect and a
round trip, and the one reconnect, 4 x `timeoutMs`), so no path inside the client (a
reconnect racing a store that restarts, a pool wait) can hold a request longer: a CI run
saw a request through the global router wait its client's whole 300 s once just after
the store came back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import ValidationError
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from inference_gateway.background import pending_cancels, raise_if_cancelled_since
from inference_gateway.config.store import StoreSpec
from inference_gateway.errors import ConfigError, InferenceGatewayError

__all__ = ["StoreHealth", "StoreSpec", "StoreUnavailable", "connect", "store_from_flag"]

PASSWORD_ENV = "IGW_STORE_PASSWORD"  # the password of a store given by `--store URL`

log = logging.getLogger(__name__)
T = TypeVar("T")


def store_from_flag(url: str | None, source: str = "--store") -> StoreSpec | None:
    """The store of a `--store URL` flag (`igw serve`, `igw picker`): None when absent,
    the password from `$IGW_STORE_PASSWORD` when set; `ConfigError` on a bad URL. One
    helper, so every flag that names the store parses it the same way."""
    if url is None:
        return None
    password_env = PASSWORD_ENV if PASSWORD_ENV in os.environ else None
    try:
        return StoreSpec(url=url, password_env=password_env)
    except ValidationError as error:
        raise ConfigError(source, [f"--store: {e['msg']}" for e in error.errors()]) from None


class StoreUnavailable(InferenceGatewayError):
    """The store is down (or was just found down): use the local view."""


def connect(spec: StoreSpec) -> Redis:
    """The client for `spec`; connecting is lazy, so an unreachable store at start is not
    an error here (the health state reports it on the first call)."""
    password = os.environ.get(spec.password_env) if spec.password_env else None
    timeout = spec.timeout_ms / 1000
    options: dict[str, object] = {
        "max_connections": spec.max_connections,
        "timeout": timeout,  # wait for a free connection at most this long
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        # a dead pooled socket (the store restarted) costs no round trip: reconnect once;
        # a timeout is never retried (that would double the wait on the hot path)
        "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        "username": spec.username,
        "password": password,
    }
    if spec.url.startswith("rediss://") and spec.ca_file:
        options["ssl_ca_certs"] = spec.ca_file
    pool = BlockingConnectionPool.from_url(spec.url, **options)
    return Redis(connection_pool=pool)


_FAMILIES: weakref.WeakKeyDictionary[CollectorRegistry, tuple[Gauge, Counter]] = (
    weakref.WeakKeyDictionary()
)


def _families(registry: CollectorRegistry | None) -> tuple[Gauge, Counter]:
    """The metric families of one registry, made once: a process with two stores (the
    global router's regional one and its rate-limit one) registers them a single time and
    tells the stores apart by `component`."""
    if registry is not None and registry in _FAMILIES:
        return _FAMILIES[registry]
    families = (
        Gauge(
            "igw_store_up",
            "1 while the shared store answers, 0 while this replica runs on its local view.",
            ["component"],
            registry=registry,
        ),
        Counter(
            "igw_store_fallback_total",
            "Times this replica switched to its local view because the store was unreachable.",
            ["component"],
            registry=registry,
        ),
    )
    if registry is not None:
        _FAMILIES[registry] = families
    return families


class StoreHealth:
    """Shared or local fallback, with the metric and the log line that say which."""

    def __init__(
        self,
        name: str,
        *,
        retry_s: float = 1.0,
        deadline_s: float | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.retry_s = retry_s
        self.deadline_s = deadline_s  # one call's bound, all retries included (None: none)
        self.clock = clock
        self.up = True
        self._next_probe = 0.0
        up, fallbacks = _families(registry)
        self.up_gauge = up.labels(name)
        self.fallbacks = fallbacks.labels(name)
        self.up_gauge.set(1)

    @classmethod
    def for_spec(
        cls, name: str, spec: StoreSpec, registry: CollectorRegistry | None = None
    ) -> StoreHealth:
        """The health of a client made by `connect(spec)`: its probe period and its
        calls bounded by what the client's own timeouts allow (module docstring)."""
        deadline = 4 * spec.timeout_ms / 1000
        return cls(name, retry_s=spec.retry_ms / 1000, deadline_s=deadline, registry=registry)

    async def call(self, operation: Callable[[], Awaitable[T]]) -> T:
        """Run one store operation; `StoreUnavailable` when down or when it fails."""
        if not self.up and self.clock() < self._next_probe:
            raise StoreUnavailable(f"{self.name}: store down, using the local view")
        cancels_before = pending_cancels()
        try:
            # a deadline in the caller's task (no task per call, as `wait_for` makes)
            async with asyncio.timeout(self.deadline_s):
                result = await operation()
        except (RedisError, OSError, TimeoutError) as error:
            raise_if_cancelled_since(cancels_before, error)  # a cancel is no store failure
            self._down(error)
            raise StoreUnavailable(f"{self.name}: {error}") from error
        raise_if_cancelled_since(cancels_before)
        if not self.up:
            self.up = True
            self.up_gauge.set(1)
            log.info("%s: shared store reachable again, back on the shared view", self.name)
        return result

    def _down(self, error: BaseException) -> None:
        self._next_probe = self.clock() + self.retry_s
        if self.up:
            self.up = False
            self.up_gauge.set(0)
            self.fallbacks.inc()
            log.warning(
                "%s: shared store unreachable (%s); local fallback engaged", self.name, error
            )
