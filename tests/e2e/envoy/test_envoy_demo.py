"""`igw demo --dataplane envoy`: the demo's trace through real Envoy, every policy, each
on a fresh fleet, with Envoy, the picker and the body-based router processes apart from
the pods and from the client (demo/envoy.py, demo/stack.py)."""

from __future__ import annotations

import dataclasses
import os

from inference_gateway.demo.envoy import (
    least_request_bootstrap,
    picker_plane,
    round_robin_plane,
)
from inference_gateway.demo.stack import POOL, run_policy
from inference_gateway.demo.trace import MODEL, Outcome, make_trace, replay
from inference_gateway.envoyproxy.settings import Address, GatewaySettings, PoolRoute

FLEET = {
    "base_port": 0,
    "pods": [
        {"name": "h100", "gpu": "H100", "model": MODEL, "replicas": 1,
         "labels": {"igw.dev/pool": POOL}},
        {"name": "a10g", "gpu": "A10G", "model": MODEL, "replicas": 1,
         "labels": {"igw.dev/pool": POOL}},
    ],
}  # fmt: skip
#: eight of the demo's requests, all at once (the trace's timing is not what is tested)
TRACE = [dataclasses.replace(i, t=0.0) for i in make_trace(duration=3.0, rate=3.0, seed=1)[:8]]


class Quiet:
    def advance(self) -> None:
        return None


async def drive(url: str) -> Outcome:
    return await replay(url, TRACE, Quiet())


async def test_the_demo_trace_runs_through_envoy_with_and_without_the_picker() -> None:
    for policy, plane, processes in (
        ("envoy+picker", picker_plane, {"envoy", "igw picker", "igw bbr"}),
        ("envoy-round-robin", round_robin_plane, {"envoy"}),
    ):
        run = await run_policy(policy, plane, drive, fleet_spec=FLEET)
        assert run.outcome.errors == 0
        assert len(run.outcome.ttft) == len(TRACE) and run.outcome.tokens > 0
        assert sum(run.served_by_gpu().values()) == len(TRACE)
        assert set(run.plane_pids) == processes
        pids = {run.fleet_pid, os.getpid(), *run.plane_pids.values()}
        assert len(pids) == len(processes) + 2  # every one its own process


def test_the_least_request_baseline_balances_as_envoy_gateway_does_by_default() -> None:
    """`--envoy-baseline least-request` (the same plane as round robin but for this
    field). Envoy Gateway: "If `loadBalancer` is not specified in BackendTrafficPolicy, the
    default load balancing policy is `Least Request`" (envoyproxy/gateway
    site/content/en/latest/tasks/traffic/load-balancing.md)."""
    route = PoolRoute(route="r", pool=POOL, picker=Address("127.0.0.1", 1), models=(MODEL,))
    settings = GatewaySettings(routes=(route,), listener_address="127.0.0.1", listener_port=0)
    pods = [Address("127.0.0.1", 8001), Address("127.0.0.1", 8002)]
    clusters = least_request_bootstrap(settings, pods)["static_resources"]["clusters"]
    assert clusters and all(c["lb_policy"] == "LEAST_REQUEST" for c in clusters)
    assert all("least_request_lb_config" not in c for c in clusters)  # Envoy's defaults
    endpoints = clusters[0]["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert [e["endpoint"]["address"]["socket_address"]["port_value"] for e in endpoints] == [
        8001,
        8002,
    ]
