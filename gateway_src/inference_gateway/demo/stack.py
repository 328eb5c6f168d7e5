"""One policy's run: a fresh emulated fleet in its own process, the policy's data plane in
processes of its own, the pods' starting state checked, the trace replayed.

Fairness rules this module keeps, so that the policies differ only in how they route:

* **The same starting state.** Every policy gets a fleet started for it alone (`Fleet`):
  empty KV caches, nothing in flight, nothing learned by any router. Just before the
  replay the demo reads every pod's own `/metrics` and refuses to measure unless each
  says so (`check_fresh`): no prompt ever looked up in its prefix cache, no KV block in
  use, no request in flight. Reusing one fleet would hand each policy the caches the
  policies before it had filled (the demo used to, and its round-robin row then
  measured whatever the previous run had left behind).
* **Processes apart, as in a cluster.** The pods, each gateway, the picker and the
  body-based router are separate processes (`processes.IgwProcess`, Envoy its own
  binary), none of them the demo's, which only drives the client.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp
import yaml

from inference_gateway.demo.processes import (
    IgwProcess,
    cpu_wait_s,
    metric_values,
    wait_for_metric,
)
from inference_gateway.demo.trace import MODEL, Outcome, warm_up
from inference_gateway.shared_store.local_server import free_port

__all__ = [
    "CONFIG",
    "FLEET",
    "POOL",
    "Fleet",
    "Plane",
    "PodState",
    "PolicyRun",
    "check_fresh",
    "proxy_plane",
    "run_policy",
]

POOL = "llama-8b"
#: 4 H100 + 4 A10G pods of one 8B model, one pool (the README's and the headline
#: scenario's mixed fleet); ephemeral ports, so demos and tests can run side by side.
FLEET: dict[str, Any] = {
    "base_port": 0,
    "pods": [
        {"name": "h100", "gpu": "H100", "model": MODEL, "replicas": 4,
         "labels": {"igw.dev/pool": POOL}},
        {"name": "a10g", "gpu": "A10G", "model": MODEL, "replicas": 4,
         "labels": {"igw.dev/pool": POOL}},
    ],
}  # fmt: skip
#: The one InferenceGatewayConfig every data plane of the demo reads.
CONFIG: dict[str, Any] = {
    "pools": [{"name": POOL, "selector": {"igw.dev/pool": POOL}}],
    "models": [{"name": MODEL, "pool": POOL}],
}
READY_PODS = "inference_pool_ready_pods"
_STATE_METRICS = (
    "vllm:prefix_cache_queries_total",
    "vllm:kv_cache_usage_perc",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:request_success_total",
)


@dataclass(frozen=True, slots=True)
class PodState:
    """What a pod's own `/metrics` says about the state a run starts from or ends in."""

    name: str
    gpu: str
    prefix_queries: float  # prompt tokens ever looked up in its prefix cache
    kv_usage: float  # fraction of KV blocks in use
    in_flight: float  # running + waiting requests
    served: float  # requests finished


class Fleet:
    """The emulated pods (`igw emulate --fleet`) in a process of their own; `endpoints`
    is the file it wrote (the upstream file-discovery shape the data planes read)."""

    def __init__(self, folder: Path, spec: Mapping[str, Any]) -> None:
        self.folder = folder
        self.spec = spec
        self.endpoints = folder / "endpoints.yaml"
        fleet_file = folder / "fleet.yaml"
        fleet_file.write_text(yaml.safe_dump(dict(spec), sort_keys=False))
        self.process = IgwProcess(
            "emulate",
            ["--fleet", str(fleet_file), "--write-endpoints", str(self.endpoints)],
            ready=r"pod\(s\) ready",
        )
        self.pods: list[dict[str, Any]] = []

    @property
    def pid(self) -> int:
        return self.process.pid

    async def __aenter__(self) -> Self:
        await self.process.start()
        self.pods = yaml.safe_load(self.endpoints.read_text())["endpoints"]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.process.stop()

    async def state(self) -> list[PodState]:
        """Every pod's state, read from its `/metrics` (vLLM's names); not on any
        measured path, so a pod on a busy machine gets a generous time to answer."""
        out = []
        async with aiohttp.ClientSession() as session:
            for pod in self.pods:
                url = f"http://{pod['address']}:{pod['port']}/metrics"
                found = await metric_values(session, url, _STATE_METRICS, timeout_s=30.0)
                total = {name: sum(samples.values()) for name, samples in found.items()}
                out.append(
                    PodState(
                        name=pod["name"],
                        gpu=pod["labels"]["igw.dev/gpu"],
                        prefix_queries=total["vllm:prefix_cache_queries_total"],
                        kv_usage=total["vllm:kv_cache_usage_perc"],
                        in_flight=total["vllm:num_requests_running"]
                        + total["vllm:num_requests_waiting"],
                        served=total["vllm:request_success_total"],
                    )
                )
        return out


def check_fresh(pods: list[PodState]) -> None:
    """Refuse to measure from anything but a fresh fleet (see the module's docstring)."""
    used = [
        p.name
        for p in pods
        if p.prefix_queries or p.kv_usage or p.in_flight or p.served  # any trace of a request
    ]
    if used:
        raise RuntimeError(f"not a fresh fleet: pods {used} have served requests already")


@dataclass(frozen=True, slots=True)
class Plane:
    """A running data plane: its base URL for the `openai` SDK, its processes, and what
    it must do last before the replay, after the warm-up (`envoy.align_rotation`)."""

    url: str
    pids: dict[str, int]
    before_replay: Callable[[], Awaitable[None]] | None = None


#: a data plane for a fleet, given the demo's config file
PlaneFactory = Callable[[Fleet, Path], contextlib.AbstractAsyncContextManager[Plane]]


@contextlib.asynccontextmanager
async def proxy_plane(policy: str, fleet: Fleet, config: Path) -> AsyncIterator[Plane]:
    """`igw serve --policy POLICY` on the fleet's endpoints file, once it sees every pod
    ready (`round-robin` is the same proxy routing as a Kubernetes Service would)."""
    port = free_port()
    serve = IgwProcess(
        "serve",
        [
            "--endpoints", str(fleet.endpoints), "--config", str(config),
            "--policy", policy, "--port", str(port), "--drain-grace", "1",
        ],
        ready=r"listening on",
    )  # fmt: skip
    async with serve:
        url = f"http://127.0.0.1:{port}"
        await wait_for_metric(f"{url}/metrics", READY_PODS, len(fleet.pods), serve)
        yield Plane(f"{url}/v1", {"igw serve": serve.pid})


@dataclass(slots=True)
class PolicyRun:
    """One policy's result and how it was produced."""

    policy: str
    outcome: Outcome
    fleet_pid: int
    plane_pids: dict[str, int]
    start: list[PodState]
    end: list[PodState]
    cpu_wait: float | None = None  # seconds its processes waited for a CPU in the replay
    demo_pid: int = field(default_factory=os.getpid)

    def served_by_gpu(self) -> dict[str, float]:
        """Requests each GPU class finished during the run (from the pods' counters)."""
        out: dict[str, float] = {}
        for pod in self.end:
            out[pod.gpu] = out.get(pod.gpu, 0.0) + pod.served
        return out


async def run_policy(
    policy: str,
    plane: PlaneFactory,
    drive: Callable[[str], Awaitable[Outcome]],
    *,
    fleet_spec: Mapping[str, Any] = FLEET,
    config: Mapping[str, Any] = CONFIG,
    fleet_hook: Callable[[Path, Mapping[str, Any]], Mapping[str, Any]] | None = None,
) -> PolicyRun:
    """Start a fresh fleet and `plane` for it, warm the data plane up without touching a
    pod (`trace.warm_up`), check the pods are fresh, `drive` the data plane's base URL
    (the replay), then stop everything. `fleet_hook(folder, spec)`
    may adjust the spec for this run's folder (the KV-events sockets)."""
    with tempfile.TemporaryDirectory(prefix="igw-demo-") as name:
        folder = Path(name)
        config_file = folder / "config.yaml"
        config_file.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        spec = fleet_hook(folder, fleet_spec) if fleet_hook else fleet_spec
        async with Fleet(folder, spec) as fleet, plane(fleet, config_file) as running:
            await warm_up(running.url)
            if running.before_replay is not None:
                await running.before_replay()
            start = await fleet.state()
            check_fresh(start)
            pids = [fleet.pid, os.getpid(), *running.pids.values()]
            waited = cpu_wait_s(pids)
            outcome = await drive(running.url)
            waited_after = cpu_wait_s(pids)
            end = await fleet.state()
        wait = None if waited is None or waited_after is None else waited_after - waited
        return PolicyRun(policy, outcome, fleet.pid, running.pids, start, end, wait)
