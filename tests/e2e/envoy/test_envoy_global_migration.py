"""Resume on break at tier 2 over a cluster in its production shape (issue 33, "In the
cluster"; docs/migration.md, "Behind Envoy"): cluster c1 is real Envoy 1.40 with `igw
picker` and `igw bbr` (`EnvoyStack`) over one emulated pod, cluster c2 is `igw serve` over
its own `igw emulate` pod, and `igw global` is in front of both (a real `redis-server`
holds its token budget). `igw global` polls c1's `GET /status` through Envoy, as the
rendered tree's `igw-status-route` sends it to the picker's metrics port.

10 concurrent streamed chat requests of 300 tokens at temperature 0 through the official
`openai` SDK go to c1 (the home region's cluster; c2 is in another region). Once they are
mid-answer c1's pod is stopped as a crash stops it (its connections cut, no `[DONE]`):
Envoy cannot start another upstream request after the response headers, so it ends each
stream to `igw global`, over HTTP/1.1 by closing the connection before the chunked body's
end (Envoy's access log: `upstream_reset_after_response_started`). `igw global` reads that
as a broken stream and resumes each on c2: every request ends with a `finish_reason` and
no error, its text byte for byte the unbroken one, and `igw global`'s /metrics counts each
broken stream once, `tier="2"`, reason `connection`, resumed. What the client sees with
no tier 2 in front is `test_envoy_faults.py`'s
`test_a_pod_killed_mid_stream_ends_the_clients_stream`. Bounded: one load, each wait
under a deadline.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import yaml
from envoy_harness import EnvoyStack

from inference_gateway.shared_store.local_server import LocalRedis
from tests.e2e.serve_process import free_port
from tests.e2e.test_global_fleet import Proc, processes, wait_ready
from tests.e2e.test_global_migration import (
    CLUSTER,
    REQUESTS,
    TOKENS,
    assert_resumed_at_tier_2,
    cluster_gateway,
    router_config,
    until_routable,
)
from tests.e2e.test_stream_migration import (
    MODEL,
    assert_spliced_whole,
    busiest_mid_answer,
    charge,
    pods,
    remaining_tokens,
    start_streams,
    unbroken_texts,
    until_healthy,
)

pytestmark = pytest.mark.slow
POD = "c1-pod"
#: c1: one pod (the same model and GPU as c2's `igw emulate`), so a stream broken there
#: can only be resumed on another cluster
FLEET: dict[str, Any] = {
    "base_port": 0,
    "pods": [
        {
            "name": POD,
            "gpu": "H100",
            "model": MODEL,
            "replicas": 1,
            "labels": {"igw.dev/pool": "plain"},
        }
    ],
}
CONFIG: dict[str, Any] = {
    "pools": [{"name": "plain", "selector": {"igw.dev/pool": "plain"}}],
    "models": [{"name": MODEL, "pool": "plain"}],
}


def was_cut(line: dict[str, Any]) -> bool:
    """An access log line of a stream Envoy ended after its response headers."""
    return str(line["details"]).startswith("upstream_reset_after_response_started")


async def test_a_pod_killed_behind_envoy_is_resumed_on_the_next_cluster(tmp_path: Path) -> None:
    with pods(tmp_path, []) as pod_procs, LocalRedis() as redis, processes() as procs:
        c2_pod = pod_procs[0].port  # type: ignore[attr-defined]
        await until_healthy([c2_pod])
        expected = await unbroken_texts(c2_pod, REQUESTS, TOKENS)
        async with EnvoyStack(FLEET, CONFIG, picker_args=["--emf-cluster", "c1"]) as c1:
            assert c1.fleet is not None and c1.envoy is not None
            c1_pod = c1.fleet.pods[POD].port
            c2 = cluster_gateway(tmp_path, "c2", c2_pod)
            config = router_config({"c1": c1.url, "c2": c2.url}, redis.url)
            config["clusters"][1]["region"] = "r2"  # c1 is home: the streams go there
            # Envoy closes a cut stream's connection only after its delayed close (1 s):
            # a shorter stream idle timeout would call that a stall and drain c1
            config["streamIdleTimeoutMs"] = 5000
            path = tmp_path / "global.yaml"
            path.write_text(yaml.safe_dump(config))
            front = Proc(["global", "--config", str(path)], free_port(), tmp_path / "global.log")
            async with aiohttp.ClientSession() as session:
                # the heartbeat through Envoy, and nothing else of the picker's port
                async with session.get(c1.url + "/status") as r:
                    assert r.status == 200 and (await r.json())["cluster"] == "c1"
                async with session.get(c1.url + "/metrics") as r:
                    assert r.status == 404
                for p in (c2, front):
                    procs.append(p)
                    p.start()
                await wait_ready(session, c2, "/status")
                await until_routable(session, front, 2)

            api = openai.AsyncOpenAI(
                base_url=front.url + "/v1", api_key="unused", max_retries=0, timeout=120
            )
            remaining_before, probe_total = await remaining_tokens(api)
            outcomes, tasks = start_streams(api, REQUESTS, CLUSTER, TOKENS)
            ports = {"c1": c1_pod, "c2": c2_pod}
            _, victim = await busiest_mid_answer(outcomes, tasks, ports.__getitem__)
            assert victim == "c1", "the streams went to c2, not through Envoy"
            await c1.fleet.stop_pod(POD)  # a crash: its connections cut mid-answer
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=180)
            await asyncio.sleep(1.0)  # the router writes each settlement in the background
            remaining_after, _ = await remaining_tokens(api)
            await api.close()
            # the router's token budget settled each request once: its prompt and its tokens
            assert remaining_before - remaining_after - probe_total == charge(REQUESTS, TOKENS)

            broken = [o for o in outcomes if o.pod == "c1"]
            assert broken, "no stream was on c1"
            assert_spliced_whole(outcomes, expected, TOKENS)
            gap_s = await assert_resumed_at_tier_2(front.url, len(broken), "connection")
            # Envoy ended each of them after its response headers; the heartbeat passed it
            lines = await c1.wait_access_log(len(broken), where=was_cut)
            cut = [line for line in lines if was_cut(line)]
            assert len(cut) == len(broken), [line for line in lines if line["model"] == MODEL]
            assert all(line["code"] == 200 and line["flags"] != "-" for line in cut)
            heartbeats = [line for line in lines if "igw-status-route" in str(line["route"])]
            assert heartbeats and all(line["code"] == 200 for line in heartbeats)
            print(
                f"\nc1 pod killed: {len(broken)}/{REQUESTS} resumed on c2, mean gap {gap_s:.3f} s"
            )
