"""Kubernetes discovery: the pods of each pool, watched by label selector, feed the store.

    Source      one collection of the API (pods by selector, or custom objects), reached
                through `kubernetes-asyncio`; the one seam tests replace with a fake
                API server on loopback
    Reflector   list, then watch from the list's resourceVersion; a watch that expires
                is resumed from the last version seen, a `410 Gone` (history compacted)
                re-lists, any other failure reconnects with capped exponential backoff
    PodDiscovery
                one reflector per pool; after every event the pool's Ready pods with an
                IP become endpoints, one per target port, and the store's list is
                replaced (existing pods keep their scrape state and in-flight counts),
                so routing changes within one watch event
    LeaderElector
                optional active-passive HA through a coordination.k8s.io Lease

Only Ready pods with an IP that are not being deleted are endpoints: a pod that fails
readiness leaves routing at once, before its scrapes would go stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import orjson

from inference_gateway.background import cancel_and_wait
from inference_gateway.config.spec import LabelSelector
from inference_gateway.core.endpoints.store import EndpointStore
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.errors import InferenceGatewayError

__all__ = [
    "CustomObjectSource",
    "LeaderElector",
    "PodDiscovery",
    "PodSource",
    "PoolTarget",
    "Reflector",
    "Source",
    "WatchExpired",
    "api_client",
    "pod_endpoints",
    "pod_ready",
    "read_inference_pool",
    "selector_query",
]

log = logging.getLogger(__name__)

POOL_LABEL = "igw.dev/pool"


class WatchExpired(InferenceGatewayError):
    """The API server no longer has the history a watch asked for (HTTP 410 Gone)."""


class Source(Protocol):
    """One API collection: a consistent list, and a watch from a resourceVersion."""

    async def list(self) -> tuple[list[dict[str, Any]], str]: ...

    def watch(self, resource_version: str, timeout_s: int) -> AsyncIterator[dict[str, Any]]: ...


async def api_client(host: str | None = None, kubeconfig: str | None = None) -> Any:
    """An `ApiClient`: an explicit host (tests), in-cluster credentials, or kubeconfig."""
    from kubernetes_asyncio import client, config

    if host is not None:
        return client.ApiClient(client.Configuration(host=host))
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()  # type: ignore[no-untyped-call]  # untyped upstream
    else:
        await config.load_kube_config(config_file=kubeconfig)
    return client.ApiClient()


def selector_query(selector: LabelSelector | Mapping[str, str]) -> str:
    """The `labelSelector` query of a selector, in the API's set-based syntax
    (kubernetes.io "Labels and Selectors"): `k=v`, `k in (a,b)`, `k notin (a,b)`, `k`,
    `!k`, ANDed by commas. Label syntax allows none of `,()!=` in keys or values, so
    nothing needs quoting."""
    selector = LabelSelector.of(selector)
    terms = [f"{k}={v}" for k, v in sorted(selector.match_labels.items())]
    for requirement in selector.match_expressions:
        key, values = requirement.key, ",".join(requirement.values)
        terms.append(
            {
                "In": f"{key} in ({values})",
                "NotIn": f"{key} notin ({values})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }[requirement.operator]
        )
    return ",".join(terms)


async def _events(response: Any) -> AsyncIterator[dict[str, Any]]:
    """Watch lines → events; HTTP 410 or an ERROR event of code 410 is `WatchExpired`."""
    try:
        if response.status == 410:
            raise WatchExpired("resource version too old (HTTP 410)")
        if response.status != 200:
            raise RuntimeError(f"watch answered HTTP {response.status}")
        while True:
            line = await response.content.readline()
            if not line:
                return
            if not line.strip():
                continue
            event = orjson.loads(line)
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                if status.get("code") == 410:
                    raise WatchExpired(str(status.get("message", "resource version too old")))
                raise RuntimeError(f"watch error: {status}")
            yield event
    finally:
        response.close()


async def _list_body(response: Any) -> tuple[list[dict[str, Any]], str]:
    """A list response → (items, the list's resourceVersion)."""
    try:
        if response.status != 200:
            raise RuntimeError(f"list answered HTTP {response.status}")
        body = orjson.loads(await response.read())
    finally:
        response.release()
    return body.get("items") or [], str(body["metadata"].get("resourceVersion", ""))


class PodSource:
    """Pods of one namespace matching a label selector (a plain map is matchLabels)."""

    def __init__(
        self, client: Any, namespace: str, labels: LabelSelector | Mapping[str, str]
    ) -> None:
        from kubernetes_asyncio.client import CoreV1Api

        self.api = CoreV1Api(client)
        self.namespace = namespace
        self.selector = selector_query(labels)

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        response = await self.api.list_namespaced_pod(
            self.namespace, label_selector=self.selector, _preload_content=False
        )
        return await _list_body(response)

    async def watch(self, resource_version: str, timeout_s: int) -> AsyncIterator[dict[str, Any]]:
        response = await self.api.list_namespaced_pod(
            self.namespace,
            label_selector=self.selector,
            watch=True,
            resource_version=resource_version,
            timeout_seconds=timeout_s,
            allow_watch_bookmarks=True,
            _preload_content=False,
        )
        async for event in _events(response):
            yield event


class CustomObjectSource:
    """Custom resources (InferenceGatewayConfig, InferenceModelRewrite, …) of a namespace."""

    def __init__(self, client: Any, group: str, version: str, plural: str, namespace: str) -> None:
        from kubernetes_asyncio.client import CustomObjectsApi

        self.api = CustomObjectsApi(client)
        self.args = (group, version, namespace, plural)

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        response = await self.api.list_namespaced_custom_object(*self.args, _preload_content=False)
        return await _list_body(response)

    async def watch(self, resource_version: str, timeout_s: int) -> AsyncIterator[dict[str, Any]]:
        response = await self.api.list_namespaced_custom_object(
            *self.args,
            watch=True,
            resource_version=resource_version,
            timeout_seconds=timeout_s,
            allow_watch_bookmarks=True,
            _preload_content=False,
        )
        async for event in _events(response):
            yield event


class Reflector:
    """Keeps `objects` (name → object) equal to the collection; calls `on_change` after
    the initial list, every re-list and every event."""

    def __init__(
        self,
        source: Source,
        on_change: Callable[[dict[str, dict[str, Any]]], None],
        *,
        watch_timeout_s: int = 300,
        backoff_s: tuple[float, float] = (0.2, 30.0),
        name: str = "",
    ) -> None:
        self.source = source
        self.on_change = on_change
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.name = name
        self.objects: dict[str, dict[str, Any]] = {}
        self.resource_version = ""
        self.lists = 0
        self.synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def relist(self) -> None:
        items, self.resource_version = await self.source.list()
        self.objects = {_key(o): o for o in items}
        self.lists += 1
        self.on_change(self.objects)
        self.synced.set()

    def apply(self, event: dict[str, Any]) -> None:
        obj = event.get("object") or {}
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = str(version)
        kind = event.get("type")
        if kind == "BOOKMARK":
            return
        if kind == "DELETED":
            self.objects.pop(_key(obj), None)
        elif kind in ("ADDED", "MODIFIED"):
            self.objects[_key(obj)] = obj
        else:
            return
        self.on_change(self.objects)

    async def run(self) -> None:
        delay = self.backoff_s[0]
        need_list = True
        while True:
            try:
                if need_list:
                    await self.relist()
                    need_list = False
                async for event in self.source.watch(self.resource_version, self.watch_timeout_s):
                    self.apply(event)
                delay = self.backoff_s[0]  # the watch expired normally: resume it
                continue
            except asyncio.CancelledError:
                raise
            except WatchExpired as error:
                log.info("%s: watch expired (%s); re-listing", self.name, error)
                need_list = True
                continue
            except Exception as error:
                log.warning(
                    "%s: list/watch failed (%r); retrying in %.1f s", self.name, error, delay
                )
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(self.backoff_s[1], delay * 2)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


# ---------------------------------------------------------------------- pods → endpoints


@dataclass(frozen=True, slots=True)
class PoolTarget:
    """A pool as discovery sees it: a selector and the ports every pod serves on."""

    name: str
    selector: LabelSelector | Mapping[str, str]
    ports: tuple[int, ...] = (8000,)
    namespace: str = "default"
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_inference_pool(cls, resource: Mapping[str, Any]) -> PoolTarget:
        """An `inference.networking.k8s.io/v1` InferencePool resource. Its selector has
        `matchLabels` only: upstream v1's LabelSelector has no `matchExpressions`
        (gateway-api-inference-extension api/v1/shared_types.go)."""
        meta, spec = resource.get("metadata") or {}, resource.get("spec") or {}
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        ports = tuple(int(p["number"]) for p in spec.get("targetPorts") or [] if "number" in p)
        return cls(
            str(meta.get("name", "")),
            dict(selector),
            ports or (8000,),
            str(meta.get("namespace", "default")),
        )


async def read_inference_pool(client: Any, namespace: str, name: str) -> PoolTarget:
    """Read one InferencePool (`inference.networking.k8s.io/v1`) as a discovery target."""
    from kubernetes_asyncio.client import CustomObjectsApi

    status, body = await _call(
        CustomObjectsApi(client).get_namespaced_custom_object(
            "inference.networking.k8s.io",
            "v1",
            namespace,
            "inferencepools",
            name,
            _preload_content=False,
        )
    )
    if status != 200:
        raise RuntimeError(f"InferencePool {namespace}/{name}: HTTP {status}")
    return PoolTarget.from_inference_pool(body)


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Running, Ready, with an IP, and not on its way out."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or not status.get("podIP"):
        return False
    if status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def pod_endpoints(pods: Mapping[str, Mapping[str, Any]], pool: PoolTarget) -> list[Endpoint]:
    """Every target port of every ready pod; names are unique per pod and port."""
    out = []
    for pod in sorted(pods.values(), key=lambda p: p["metadata"]["name"]):
        if not pod_ready(pod):
            continue
        name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
        labels = {**(pod["metadata"].get("labels") or {}), POOL_LABEL: pool.name}
        for port in pool.ports:
            out.append(
                Endpoint(
                    name if len(pool.ports) == 1 else f"{name}:{port}",
                    ip,
                    port,
                    pool=pool.name,
                    labels=dict(labels),
                )
            )
    return out


class PodDiscovery:
    """Feeds an `EndpointStore` from one pod reflector per pool."""

    def __init__(
        self,
        store: EndpointStore,
        pools: list[PoolTarget],
        source: Callable[[PoolTarget], Source],
        *,
        watch_timeout_s: int = 300,
        backoff_s: tuple[float, float] = (0.2, 30.0),
    ) -> None:
        self.store = store
        self.source = source
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.pools: dict[str, PoolTarget] = {}
        self.reflectors: dict[str, Reflector] = {}
        self.per_pool: dict[str, list[Endpoint]] = {}
        self._scrape: asyncio.Task[None] | None = None
        self._pending = pools
        self.events = 0

    async def start(self) -> None:
        await self.set_pools(self._pending)

    async def set_pools(self, pools: list[PoolTarget]) -> None:
        """Start reflectors for new or changed pools, stop those of removed ones."""
        wanted = {p.name: p for p in pools}
        for name in list(self.pools):
            if wanted.get(name) != self.pools[name]:
                await self.reflectors.pop(name).stop()
                self.pools.pop(name)
                self.per_pool.pop(name, None)
        for name, pool in wanted.items():
            if name in self.pools:
                continue
            self.pools[name] = pool
            reflector = Reflector(
                self.source(pool),
                functools.partial(self._changed, pool),
                watch_timeout_s=self.watch_timeout_s,
                backoff_s=self.backoff_s,
                name=f"pods of pool {name}",
            )
            self.reflectors[name] = reflector
            reflector.start()
        self._publish()

    async def wait_synced(self, timeout_s: float = 10.0) -> None:
        async with asyncio.timeout(timeout_s):
            for reflector in self.reflectors.values():
                await reflector.synced.wait()

    def is_synced(self) -> bool:
        """Every pool's pods have been listed once (zero pods is a synced pool)."""
        return all(r.synced.is_set() for r in self.reflectors.values())

    def _changed(self, pool: PoolTarget, pods: dict[str, dict[str, Any]]) -> None:
        self.events += 1
        self.per_pool[pool.name] = pod_endpoints(pods, pool)
        self._publish()

    def _publish(self) -> None:
        """Replace the store's list; a known pod keeps its Endpoint object and state."""
        known = {(e.name, e.hostport, e.pool): e for e in self.store.endpoints}
        fresh: list[Endpoint] = []
        new = False
        for endpoints in self.per_pool.values():
            for e in endpoints:
                existing = known.get((e.name, e.hostport, e.pool))
                if existing is None:
                    new = True
                else:
                    existing.labels = e.labels
                fresh.append(existing or e)
        for i, e in enumerate(fresh):
            e.index = i
        self.store.endpoints = fresh
        if new and (self._scrape is None or self._scrape.done()):
            # a new pod is routable after its first scrape, not a scrape interval later
            self._scrape = asyncio.get_running_loop().create_task(self.store.scrape_once())

    async def stop(self) -> None:
        for reflector in self.reflectors.values():
            await reflector.stop()
        if self._scrape is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._scrape


# ---------------------------------------------------------------------- leader election


async def _call(request: Awaitable[Any]) -> tuple[int, dict[str, Any]]:
    """A raw API call → (HTTP status, JSON body); statuses are the caller's to judge."""
    response = await request
    try:
        data = await response.read()
        return response.status, orjson.loads(data) if data else {}
    finally:
        response.release()


def _written(status: int) -> bool:
    """A create or replace went through; 409 means another replica wrote first."""
    if status in (200, 201):
        return True
    if status == 409:
        return False
    raise RuntimeError(f"writing lease: HTTP {status}")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _micro(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Active-passive HA through a `coordination.k8s.io/v1` Lease.

    The holder renews every `renew_s`; another replica takes the lease once it has not
    been renewed for `lease_s`. Optimistic concurrency (the Lease's resourceVersion)
    makes a takeover race have one winner. `is_leader()` feeds the health service.
    """

    def __init__(
        self,
        client: Any,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_s: int = 15,
        renew_s: float = 5.0,
        clock: Callable[[], datetime.datetime] = _now,
    ) -> None:
        from kubernetes_asyncio.client import CoordinationV1Api

        self.api = CoordinationV1Api(client)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_s = lease_s
        self.renew_s = renew_s
        self.clock = clock
        self.leading = False
        self._task: asyncio.Task[None] | None = None

    def is_leader(self) -> bool:
        return self.leading

    def _spec(self, acquired: str | None, transitions: int) -> dict[str, Any]:
        now = _micro(self.clock())
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_s,
            "acquireTime": acquired or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def try_acquire(self) -> bool:
        """One round: create, renew, or take over an expired lease."""
        self.leading = await self._round()
        return self.leading

    async def _round(self) -> bool:
        status, current = await _call(
            self.api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
        )
        if status == 404:
            # the client serializes a plain mapping as it would a V1Lease
            body: Any = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(None, 0),
            }
            status, _ = await _call(
                self.api.create_namespaced_lease(self.namespace, body, _preload_content=False)
            )
            return _written(status)
        if status != 200:
            raise RuntimeError(f"reading lease {self.name}: HTTP {status}")
        spec = current.get("spec") or {}
        holder = spec.get("holderIdentity")
        if holder != self.identity and not self._expired(spec):
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (holder != self.identity)
        acquired = spec.get("acquireTime") if holder == self.identity else None
        current["spec"] = self._spec(acquired, transitions)
        status, _ = await _call(
            self.api.replace_namespaced_lease(
                self.name, self.namespace, cast(Any, current), _preload_content=False
            )
        )
        return _written(status)

    def _expired(self, spec: Mapping[str, Any]) -> bool:
        renewed = spec.get("renewTime")
        if not renewed:
            return True
        at = datetime.datetime.strptime(renewed, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.UTC
        )
        duration = int(spec.get("leaseDurationSeconds") or self.lease_s)
        return (self.clock() - at).total_seconds() > duration

    async def release(self) -> None:
        """Give the lease up at once (a holder that starts draining): stop renewing and,
        holding it, mark it expired a second from now (client-go's ReleaseOnCancel), so a
        standby takes over on its next round instead of after `lease_s`, while this
        replica, no longer ready, finishes its streams."""
        await cancel_and_wait(self._task)
        self._task = None
        if not self.leading:
            return
        self.leading = False
        try:
            status, current = await _call(
                self.api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
            )
            spec = current.get("spec") or {}
            if status != 200 or spec.get("holderIdentity") != self.identity:
                return
            current["spec"] = {
                **spec,
                "leaseDurationSeconds": 1,
                "renewTime": _micro(self.clock()),
            }
            status, _ = await _call(
                self.api.replace_namespaced_lease(
                    self.name, self.namespace, cast(Any, current), _preload_content=False
                )
            )
            _written(status)
        except Exception as error:  # the lease then expires by itself after lease_s
            log.warning("releasing lease %s: %r", self.name, error)

    async def run(self) -> None:
        while True:
            try:
                await self.try_acquire()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("lease %s: %r", self.name, error)
                self.leading = False
            await asyncio.sleep(self.renew_s)

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self.leading = False
