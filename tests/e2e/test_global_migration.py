"""Resume on break at tier 2 (issue 33's must-hold, docs/migration.md): `igw global` in
front of two real cluster gateways (`igw serve`, each over its own `igw emulate` pod,
all real processes); 10 concurrent streamed chat requests of 300 tokens at temperature 0
through the official `openai` SDK; the cluster serving the most of them is lost whole
mid-stream, its `igw serve` and its pod killed (SIGKILL) or stopped (SIGSTOP: a stall
past `streamIdleTimeoutMs`), or only its pod is killed while its `igw serve` lives on
with migration off, so the failure inside the cluster reaches tier 2 as the cluster
gateway's SSE error event (the cluster has no other pod: tier 1 could not resume it
either). Every request ends with a `finish_reason` and no error; its text is byte for
byte the same request's unbroken text (asked of the surviving pod directly); one `id`,
one `model`, one role delta, and `usage` counts the prompt once and each completion
token once, as does the router's token budget (a real `redis-server` holds it).
`igw global`'s /metrics counts each broken stream once as resumed, with `tier="2"` and
the break's reason. Bounded: one load of 10 requests per fault, every wait under a
deadline.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import yaml

from inference_gateway.shared_store.local_server import LocalRedis
from tests.e2e.serve_process import free_port, write_endpoints
from tests.e2e.test_global_fleet import Proc, processes, wait_ready
from tests.e2e.test_stream_migration import (
    assert_spliced_whole,
    busiest_mid_answer,
    charge,
    metric_sum,
    pods,
    remaining_tokens,
    start_streams,
    unbroken_texts,
    until_healthy,
)

pytestmark = pytest.mark.slow
REQUESTS = 10
TOKENS = 300
CLUSTERS = ("c1", "c2")
CLUSTER = "x-igw-cluster"
SERVE_CONFIG = {"scrape": {"intervalMs": 100, "stalenessMs": 3000, "timeoutMs": 500}}


def cluster_gateway(tmp: Path, name: str, pod_port: int, *, migration: bool = True) -> Proc:
    """`igw serve` for cluster `name` over its one pod (`migration`: tier 1 on)."""
    endpoints = write_endpoints(tmp / f"{name}-endpoints.yaml", [pod_port])
    config = tmp / f"{name}-config.yaml"
    config.write_text(yaml.safe_dump({**SERVE_CONFIG, "migration": {"enabled": migration}}))
    args = ["serve", "--endpoints", str(endpoints), "--config", str(config)]
    args += ["--emf-cluster", name]
    return Proc(args, free_port(), tmp / f"{name}.log")


def router_config(endpoints: dict[str, str], store: str) -> dict[str, Any]:
    """`igw global` over the clusters of `endpoints` (name → URL), all in one region."""
    return {
        "store": {"url": store, "timeoutMs": 1000},
        # a token budget that never refuses here, read for what it was charged
        "rateLimits": {"rules": [{"tokensPerMinute": 10_000_000}], "windowS": 600},
        "homeRegion": "r1",
        "pollIntervalMs": 200,
        "staleAfterMs": 1000,
        "rampS": 0,
        "clusters": [{"name": n, "region": "r1", "endpoint": url} for n, url in endpoints.items()],
        "streamIdleTimeoutMs": 1000,  # a stopped cluster is a stall within a second
        "migration": {"deadlineMs": 10_000},
    }


async def until_routable(session: aiohttp.ClientSession, front: Proc, clusters: int) -> None:
    """Once `igw global` answers, until it has polled `clusters` clusters routable."""
    await wait_ready(session, front, "/health")
    deadline = time.monotonic() + 30
    while True:
        async with session.get(front.url + "/health") as r:
            if len((await r.json())["clusters"]) == clusters:
                return
        assert time.monotonic() < deadline, "the clusters did not become routable"
        await asyncio.sleep(0.1)


async def assert_resumed_at_tier_2(url: str, broken: int, reason: str) -> float:
    """`igw global`'s /metrics counted each of the `broken` streams once, resumed at tier
    2 for `reason`, each with its resume gap; the mean gap in seconds."""
    total = "igw_request_migrations_total"
    resumed = await metric_sum(url, total, 'outcome="resumed"')
    assert resumed == broken == await metric_sum(url, total, 'tier="2"')
    assert await metric_sum(url, total, f'reason="{reason}"') == broken
    gaps = await metric_sum(url, "igw_request_resume_gap_seconds_count")
    assert gaps == broken
    return await metric_sum(url, "igw_request_resume_gap_seconds_sum") / gaps


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("kill", "connection"), ("stop", "stall"), ("pod-kill", "error_event")],
)
async def test_a_cluster_lost_mid_stream_is_resumed_on_the_next(
    tmp_path: Path, fault: str, reason: str
) -> None:
    with pods(tmp_path, [], []) as pod_procs, LocalRedis() as redis, processes() as procs:
        pod_ports = [p.port for p in pod_procs]  # type: ignore[attr-defined]
        await until_healthy(pod_ports)
        expected = await unbroken_texts(pod_ports[1], REQUESTS, TOKENS)
        tier_1 = fault != "pod-kill"
        gateways = {
            n: cluster_gateway(tmp_path, n, pod_ports[i], migration=tier_1)
            for i, n in enumerate(CLUSTERS)
        }
        path = tmp_path / "global.yaml"
        endpoints = {n: g.url for n, g in gateways.items()}
        path.write_text(yaml.safe_dump(router_config(endpoints, redis.url)))
        front = Proc(["global", "--config", str(path)], free_port(), tmp_path / "global.log")
        async with aiohttp.ClientSession() as session:
            for p in [*gateways.values(), front]:
                procs.append(p)
                p.start()
            for g in gateways.values():
                await wait_ready(session, g, "/status")
            await until_routable(session, front, len(CLUSTERS))

        api = openai.AsyncOpenAI(
            base_url=front.url + "/v1", api_key="unused", max_retries=0, timeout=120
        )
        remaining_before, probe_total = await remaining_tokens(api)
        outcomes, tasks = start_streams(api, REQUESTS, CLUSTER, TOKENS)
        # `Outcome.pod` holds the answering cluster here (x-igw-cluster)
        _, victim = await busiest_mid_answer(
            outcomes, tasks, lambda cluster: pod_ports[CLUSTERS.index(cluster)]
        )
        index = CLUSTERS.index(victim)
        # the whole cluster, its gateway and its pod: killed, or stopped (a black hole:
        # a stall past streamIdleTimeoutMs); or its pod alone, killed
        sent = signal.SIGSTOP if fault == "stop" else signal.SIGKILL
        gateway = gateways[victim].process
        assert gateway is not None
        if fault != "pod-kill":
            gateway.send_signal(sent)
        pod_procs[index].send_signal(sent)
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=180)
        gateways[victim].kill()  # a stopped one too
        await asyncio.sleep(1.0)  # the router writes each settlement in the background
        remaining_after, _ = await remaining_tokens(api)
        await api.close()
        # the router's token budget settled each request once: its prompt and its tokens
        charged = remaining_before - remaining_after - probe_total
        assert charged == charge(REQUESTS, TOKENS)

        broken = [o for o in outcomes if o.pod == victim]
        assert broken, "no stream was on the cluster that failed"
        assert_spliced_whole(outcomes, expected, TOKENS)
        gap_s = await assert_resumed_at_tier_2(front.url, len(broken), reason)
        print(
            f"\ncluster {fault}: {len(broken)}/{REQUESTS} streams resumed, mean gap {gap_s:.3f} s"
        )
