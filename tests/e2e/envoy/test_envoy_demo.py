"""`igw demo --dataplane envoy`: the demo's trace through real Envoy, every policy, each
on a fresh fleet, with Envoy, the picker and the body-based router processes apart from
the pods and from the client (demo/envoy.py, demo/stack.py)."""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

import yaml

from inference_gateway.demo.envoy import (
    least_request_bootstrap,
    picker_plane,
    round_robin_plane,
)
from inference_gateway.demo.stack import CONFIG, POOL, Fleet, check_fresh, proxy_plane, run_policy
from inference_gateway.demo.trace import MODEL, Outcome, make_trace, replay, warm_up
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


async def test_the_demo_trace_runs_through_envoy_with_the_picker() -> None:
    run = await run_policy("envoy+picker", picker_plane, drive, fleet_spec=FLEET)
    assert run.outcome.errors == 0
    assert len(run.outcome.ttft) == len(TRACE) and run.outcome.tokens > 0
    assert sum(run.served_by_gpu().values()) == len(TRACE)
    assert set(run.plane_pids) == {"envoy", "igw picker", "igw bbr"}
    pids = {run.fleet_pid, os.getpid(), *run.plane_pids.values()}
    assert len(pids) == 5  # the pods, Envoy, the picker, the router, the client


async def test_both_round_robin_baselines_start_at_the_first_pod(tmp_path: Path) -> None:
    """Envoy starts its rotation at a random pod (`EdfLoadBalancerBase` picks `seed_ %
    hosts` times first, envoyproxy/envoy source/extensions/load_balancing_policies/
    common/load_balancer_impl.cc); `align_rotation` moves it to where `igw serve`'s round
    robin starts, so the two baselines send the same requests to the same pods. Four
    pods: unaligned, Envoy would start at the first one a quarter of the time."""
    four = {**FLEET, "pods": [{**FLEET["pods"][0], "replicas": 4}]}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    orders = {}
    for name, plane in (
        ("igw serve", functools.partial(proxy_plane, "round-robin")),
        ("envoy", round_robin_plane),
    ):
        async with Fleet(tmp_path, four) as fleet, plane(fleet, tmp_path / "config.yaml") as on:
            await warm_up(on.url)
            if on.before_replay is not None:
                await on.before_replay()
            check_fresh(await fleet.state())  # the alignment's requests touched no engine
            orders[name] = [await _served_by(fleet, on.url) for _ in range(5)]
    assert orders["envoy"] == orders["igw serve"] == ["h100-0", "h100-1", "h100-2", "h100-3",
                                                       "h100-0"]  # fmt: skip


async def _served_by(fleet: Fleet, url: str) -> str:
    """Send one request; the pod whose finished-requests counter moved."""
    before = {p.name: p.served for p in await fleet.state()}
    await replay(url, TRACE[:1], Quiet())
    after = await fleet.state()
    (pod,) = [p.name for p in after if p.served > before[p.name]]
    return pod


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
