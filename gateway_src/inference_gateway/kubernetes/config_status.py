"""The `status` of the InferenceGatewayConfig the picker serves, so that
`kubectl get igwc` tells an operator what is wrong without reading the picker's logs.

Conditions follow the Kubernetes API conventions (type, status, reason, message,
lastTransitionTime, observedGeneration), as the managed add-on's status does:

* `Accepted`: the resource parsed and validated (False with the validation message when
  it did not: the picker keeps serving the last good config meanwhile);
* `Ready`: every pool has at least one pod with a fresh scrape;
* `Degraded`: a pool whose selector matches no pod, or whose pods are all stale.

`status.pools` carries per-pool `ready` / `stale` / `total` counts for the printer
columns, and `status.schedulers` each pool's `rolloutState` under the managed add-on's
name for it (a pool is what the managed shape calls a scheduler) and with its values:

* `Pending`: nothing to route to yet: no pod matches, or the pool is in the resource but
  not yet served (a config the picker has not accepted);
* `Progressing`: some of its pods have a fresh scrape, some not (a rollout, a scale-up);
* `Available`: every pod of the pool has a fresh scrape;
* `Degraded`: it has pods and none has a fresh scrape.

Only the leader writes (with leader election), and only when something changed, so a
fleet of pickers does not flood the API server: a merge patch on the `status`
subresource, which the API server applies to `.status` alone.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from inference_gateway.background import cancel_and_wait
from inference_gateway.core.scheduling.types import Endpoint

__all__ = [
    "ROLLOUT_STATES",
    "ConfigStatusWriter",
    "PoolCounts",
    "build_status",
    "pool_counts",
    "rollout_state",
]

#: The managed add-on's per-scheduler `rolloutState` values.
ROLLOUT_STATES = ("Pending", "Progressing", "Available", "Degraded")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolCounts:
    name: str
    ready: int
    stale: int

    @property
    def total(self) -> int:
        return self.ready + self.stale


def pool_counts(pools: Mapping[str, list[Endpoint]], declared: list[str]) -> list[PoolCounts]:
    """Counts for every declared pool (one that matched no pod shows zeros) and every pool
    the store knows, in name order."""
    names = sorted({*declared, *pools})
    out = []
    for name in names:
        pods = pools.get(name, [])
        stale = sum(1 for e in pods if e.stale)
        out.append(PoolCounts(name, len(pods) - stale, stale))
    return out


def rollout_state(counts: PoolCounts) -> str:
    """A served pool's rolloutState from its pod counts (module docstring)."""
    if counts.total == 0:
        return "Pending"
    if counts.ready == counts.total:
        return "Available"
    return "Progressing" if counts.ready else "Degraded"


def _condition(kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message}


def build_status(
    counts: list[PoolCounts],
    config_error: str | None,
    generation: int | None,
    unserved: list[str] | None = None,
) -> dict[str, Any]:
    """The status object, without transition times (the writer stamps those).
    `unserved`: pools the resource declares that the served config lacks (Pending)."""
    empty = [c.name for c in counts if c.total == 0]
    all_stale = [c.name for c in counts if c.total > 0 and c.ready == 0]
    if config_error is None:
        accepted = _condition("Accepted", True, "Accepted", "the configuration is valid")
    else:
        accepted = _condition("Accepted", False, "Invalid", config_error[:1024])
    not_ready = empty + all_stale
    if not counts:
        ready = _condition("Ready", False, "NoPools", "the configuration declares no pool")
    elif not_ready:
        ready = _condition(
            "Ready", False, "NoReadyPods", "no pod with a fresh scrape in " + ", ".join(not_ready)
        )
    else:
        ready = _condition("Ready", True, "PodsReady", "every pool has a ready pod")
    problems = [f"selector matches no pods: {n}" for n in empty]
    problems += [f"all pods stale: {n}" for n in all_stale]
    if empty:
        degraded = _condition("Degraded", True, "SelectorMatchesNoPods", "; ".join(problems))
    elif all_stale:
        degraded = _condition("Degraded", True, "AllPodsStale", "; ".join(problems))
    else:
        degraded = _condition("Degraded", False, "AsExpected", "no pool is degraded")
    conditions = [accepted, ready, degraded]
    if generation is not None:
        for condition in conditions:
            condition["observedGeneration"] = generation
    status: dict[str, Any] = {
        "conditions": conditions,
        "pools": [
            {"name": c.name, "ready": c.ready, "stale": c.stale, "total": c.total} for c in counts
        ],
        "schedulers": [
            {"name": name, "rolloutState": state}
            for name, state in sorted(
                [(c.name, rollout_state(c)) for c in counts]
                + [(n, "Pending") for n in unserved or [] if n not in {c.name for c in counts}]
            )
        ],
        "readyPods": sum(c.ready for c in counts),
        "stalePods": sum(c.stale for c in counts),
    }
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stamp(new: dict[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    """Keep a condition's lastTransitionTime while its status holds (API conventions)."""
    before = {c["type"]: c for c in (old or {}).get("conditions", [])}
    now = _now()
    for condition in new["conditions"]:
        previous = before.get(condition["type"])
        if previous is not None and previous.get("status") == condition["status"]:
            condition["lastTransitionTime"] = previous["lastTransitionTime"]
        else:
            condition["lastTransitionTime"] = now
    return new


class ConfigStatusWriter:
    """Writes the served InferenceGatewayConfig's status every `interval_s` when it changed.

    `resource()` returns the resource being served (None: nothing to write to),
    `config_error()` the last validation error (None when the served config is the
    resource's current one), `pools()` the endpoint store's pools, `declared()` the pool
    names of the applied config, `is_leader()` whether this replica may write.
    """

    def __init__(
        self,
        client: Any,
        namespace: str,
        *,
        resource: Callable[[], Mapping[str, Any] | None],
        config_error: Callable[[], str | None],
        pools: Callable[[], Mapping[str, list[Endpoint]]],
        declared: Callable[[], list[str]],
        is_leader: Callable[[], bool] = lambda: True,
        interval_s: float = 5.0,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.resource = resource
        self.config_error = config_error
        self.pools = pools
        self.declared = declared
        self.is_leader = is_leader
        self.interval_s = interval_s
        self.writes = 0
        self.failures = 0
        self._written: dict[str, Any] | None = None
        self._written_for: str | None = None
        self._task: asyncio.Task[None] | None = None

    async def write_once(self) -> bool:
        """Write the status if this replica leads and it changed; True when written."""
        resource = self.resource()
        if resource is None or not self.is_leader():
            return False
        meta = resource.get("metadata") or {}
        name = meta.get("name")
        if not name:
            return False
        counts = pool_counts(self.pools(), self.declared())
        status = build_status(
            counts, self.config_error(), meta.get("generation"), _resource_pools(resource)
        )
        if name == self._written_for and status == _unstamped(self._written):
            return False
        previous = self._written if name == self._written_for else resource.get("status")
        body = {"status": _stamp(status, previous)}
        from inference_gateway.config.spec import API_GROUP, API_VERSION

        try:
            from kubernetes_asyncio.client import CustomObjectsApi

            response = await CustomObjectsApi(self.client).patch_namespaced_custom_object_status(
                API_GROUP,
                API_VERSION,
                self.namespace,
                "inferencegatewayconfigs",
                name,
                body,
                _content_type="application/merge-patch+json",  # type: ignore[call-arg]  # a kwarg of the generated client, not in its stubs
                _preload_content=False,
            )
            response.release()
        except Exception as error:  # status is a report: RBAC or an API blip must not stop us
            self.failures += 1
            log.warning("could not write the status of InferenceGatewayConfig/%s: %r", name, error)
            return False
        self.writes += 1
        self._written, self._written_for = body["status"], name
        return True

    async def run(self) -> None:
        while True:
            await self.write_once()
            await asyncio.sleep(self.interval_s)

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None


def _resource_pools(resource: Mapping[str, Any]) -> list[str]:
    """The pool names the resource's spec declares (whether or not it was accepted)."""
    pools = (resource.get("spec") or {}).get("pools")
    if not isinstance(pools, list):
        return []
    return [p["name"] for p in pools if isinstance(p, Mapping) and isinstance(p.get("name"), str)]


def _unstamped(status: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if status is None:
        return None
    out = dict(status)
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status["conditions"]
    ]
    return out
