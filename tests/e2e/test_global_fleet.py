"""The fleet tier on loopback with real processes: cluster gateways (`igw serve`) in front
of emulated pods, `igw global` replicas, and a real `redis-server`.

* Fault test: three clusters (c1 and c2 in region r1, c3 in r2), two router replicas
  sharing one store, streaming load from both. c1's gateway is killed mid-load (traffic
  leaves it within 5 s, nothing that had not started streaming is lost), then c2 (the
  whole home region: c3 takes over, cross-region), then both come back and their share
  grows over the ramp window instead of jumping.
* Planned drain: `igw global drain c1` / `undrain` against the store while two router
  replicas run: c1 gets nothing within a poll interval, then ramps back.
* Rate limit: two router replicas, one store, a limit of 100 requests per window; the
  window is shortened to 10 s here (`rateLimits.windowS`) and the load lasts one window;
  admitted stays within 2 % of the limit. With the store stopped the routers keep
  serving on their local fallback.
* Cost: in cost mode sheddable traffic goes to the cheaper of two clusters that both
  meet the budget (>= 90 %), and leaves it while its /status shows it saturated.

Emulated pods run in the test's process (EmulatedFleet); every load loop is bounded in
count and time, and every process is stopped in a `finally`.
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest
import yaml
from aiohttp import web

from inference_gateway.assembly.serve import build_gateway
from inference_gateway.core.request.prompt_cost import prompt_estimate
from inference_gateway.core.scheduling.cluster_registry import ClusterStatus
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.frontends.auth import Authenticator, Identity
from inference_gateway.frontends.global_router import build_global_router, parse_router_config
from inference_gateway.shared_store.local_server import LocalRedis, free_port

pytestmark = pytest.mark.slow
MODEL = "llama-3.1-8b"


@dataclass
class Proc:
    """One `igw` subprocess on a known port, killable and restartable on that port."""

    args: list[str]
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [sys.executable, "-m", "inference_gateway.cli.main", *self.args]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None


async def wait_ready(
    session: aiohttp.ClientSession, proc: Proc, path: str, timeout_s: float = 60.0
) -> None:
    url = proc.url + path
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.process is None or proc.process.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited: {proc.log.read_text()[-2000:]}")
        try:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=1)) as r:
                if r.status == 200:
                    return
        except (aiohttp.ClientError, TimeoutError):
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{url} not ready within {timeout_s} s")


@contextmanager
def processes() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    try:
        yield started
    finally:
        for p in started:
            p.stop()


async def start_tier(
    session: aiohttp.ClientSession, procs: list[Proc], gateways: list[Proc], routers: list[Proc]
) -> None:
    """Start the cluster gateways and the routers (registered for cleanup), then wait for
    every gateway's heartbeat and every router's readiness."""
    for p in [*gateways, *routers]:
        procs.append(p)
        p.start()
    for g in gateways:
        await wait_ready(session, g, "/status")
    for r in routers:
        await wait_ready(session, r, "/health")


def cluster_gateway(
    tmp: Path, fleet: EmulatedFleet, name: str, cost: float, config: dict[str, Any] | None = None
) -> Proc:
    document = fleet.endpoints_document()
    mine = [
        e for e in document["endpoints"] if e["name"].rsplit("-", 1)[0] == name or e["name"] == name
    ]
    endpoints = tmp / f"{name}-endpoints.yaml"
    endpoints.write_text(yaml.safe_dump({"endpoints": mine}))
    args = ["serve", "--endpoints", str(endpoints), "--emf-cluster", name]
    args += ["--hourly-cost", str(cost)]
    if config is not None:
        path = tmp / f"{name}-config.yaml"
        path.write_text(yaml.safe_dump(config))
        args += ["--config", str(path)]
    return Proc(args, free_port(), tmp / f"{name}.log")


def router(tmp: Path, name: str, config: dict[str, Any]) -> Proc:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return Proc(["global", "--config", str(path)], free_port(), tmp / f"{name}.log")


def fleet_spec(groups: dict[str, int]) -> dict[str, Any]:
    return {
        "base_port": 0,
        "pods": [
            {"name": g, "gpu": "H100", "model": MODEL, "replicas": n} for g, n in groups.items()
        ],
    }


@asynccontextmanager
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as s:
        yield s


@dataclass
class Outcome:
    sent: float
    cluster: str = ""
    result: str = ""


async def stream_one(s: aiohttp.ClientSession, url: str, i: int, out: list[Outcome]) -> None:
    """One streamed completion; its outcome: ok, broken_after_start (an SSE error event
    after the first byte: allowed), or anything else (lost)."""
    o = Outcome(time.monotonic())
    out.append(o)
    body = {"model": MODEL, "prompt": f"request {i}: tell me a story", "max_tokens": 12}
    body["stream"] = True
    try:
        async with s.post(url + "/v1/completions", json=body) as r:
            o.cluster = r.headers.get("x-igw-cluster", "")
            if r.status != 200:
                o.result = f"status_{r.status}"
                return
            events = [line[6:].strip() async for line in r.content if line.startswith(b"data: ")]
    except (aiohttp.ClientError, TimeoutError) as error:
        o.result = f"client_error_{type(error).__name__}"
        return
    if events and events[-1] == b"[DONE]":
        o.result = "ok"
    elif events and "error" in orjson.loads(events[-1]):
        o.result = "broken_after_start"
    else:
        o.result = "silently_truncated"


def share(outcomes: list[Outcome], start: float, end: float, clusters: set[str]) -> float:
    window = [o for o in outcomes if start <= o.sent < end and o.cluster]
    return sum(o.cluster in clusters for o in window) / len(window) if window else float("nan")


async def metric_total(s: aiohttp.ClientSession, url: str, name: str, **labels: str) -> float:
    async with s.get(url + "/metrics") as r:
        text = await r.text()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


# ---------------------------------------------------------------------------- fault test


async def test_cluster_and_region_failover_then_ramp_back(tmp_path: Path) -> None:
    rate, ramp_s = 12.0, 6.0
    fleet = EmulatedFleet(fleet_spec({"c1": 2, "c2": 2, "c3": 2}))
    with LocalRedis() as redis, processes() as procs:
        async with fleet, session() as s:
            gateways = {
                "c1": cluster_gateway(tmp_path, fleet, "c1", 98.0),
                "c2": cluster_gateway(tmp_path, fleet, "c2", 98.0),
                "c3": cluster_gateway(tmp_path, fleet, "c3", 60.0),
            }
            regions = {"c1": "r1", "c2": "r1", "c3": "r2"}
            config = {
                "homeRegion": "r1",
                "rampS": ramp_s,
                "store": {"url": redis.url, "timeoutMs": 1000},
                "rateLimits": {"rules": [{"requestsPerMinute": 100_000}]},
                "clusters": [
                    {"name": n, "region": regions[n], "endpoint": g.url, "priority": i}
                    for i, (n, g) in enumerate(gateways.items())
                ],
            }
            routers = [router(tmp_path, f"global-{i}", config) for i in range(2)]
            await start_tier(s, procs, list(gateways.values()), routers)
            await asyncio.sleep(1.5)  # every router has polled every cluster

            outcomes: list[Outcome] = []
            tasks: list[asyncio.Task[None]] = []
            marks: dict[str, float] = {}

            async def restart() -> None:
                for name in ("c1", "c2"):
                    gateways[name].start()
                for name in ("c1", "c2"):
                    await wait_ready(s, gateways[name], "/status", timeout_s=30)
                marks["back"] = time.monotonic()

            start = time.monotonic()
            plan = {4.0: "kill_c1", 9.0: "kill_c2", 14.0: "restart"}
            i = 0
            restarting: asyncio.Task[None] | None = None
            # load at `rate` until the ramp has had its window and 3 s more (60 s at most)
            while time.monotonic() < start + 60 and (
                "back" not in marks or time.monotonic() < marks["back"] + ramp_s + 3
            ):
                now = time.monotonic() - start
                for at, event in list(plan.items()):
                    if now >= at:
                        del plan[at]
                        marks[event] = time.monotonic()
                        if event == "restart":
                            restarting = asyncio.create_task(restart())
                        else:
                            gateways[event[-2:]].kill()
                url = routers[i % 2].url
                tasks.append(asyncio.create_task(stream_one(s, url, i, outcomes)))
                i += 1
                await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            marks["end"] = time.monotonic()
            assert restarting is not None
            await restarting
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
            failovers = [
                await metric_total(s, r.url, "igw_global_failover_events_total") for r in routers
            ]
            cross = [
                await metric_total(s, r.url, "igw_global_requests_total", cross_region="true")
                for r in routers
            ]

    results = Counter(o.result for o in outcomes)
    lost = {k: v for k, v in results.items() if k not in ("ok", "broken_after_start")}
    after_c1 = [
        o for o in outcomes if marks["kill_c1"] <= o.sent < marks["restart"] and o.cluster == "c1"
    ]
    c1_moved_s = max((o.sent for o in after_c1), default=marks["kill_c1"]) - marks["kill_c1"]
    after_c2 = [o for o in outcomes if marks["kill_c2"] <= o.sent < marks["restart"] and o.cluster]
    c2_moved_s = (
        max((o.sent for o in after_c2 if o.cluster != "c3"), default=marks["kill_c2"])
        - marks["kill_c2"]
    )
    back = marks["back"]
    early = share(outcomes, back, back + 2, {"c1", "c2"})
    late = share(outcomes, back + ramp_s + 1, marks["end"], {"c1", "c2"})
    per_second = [
        round(share(outcomes, back + t, back + t + 1, {"c1", "c2"}), 2)
        for t in range(int(marks["end"] - back))
    ]
    print(
        f"\nfault test: {len(outcomes)} requests {dict(results)}; traffic off c1 "
        f"{c1_moved_s:.2f} s after its kill, off region r1 {c2_moved_s:.2f} s after c2's; "
        f"failover events per router {failovers}; cross-region answers {cross}; "
        f"r1 share after the return: first 2 s {early:.2f}, after the ramp {late:.2f}, "
        f"per second {per_second}"
    )
    assert not lost, f"requests lost: {lost}"
    assert results["ok"] >= 0.95 * len(outcomes)
    assert c1_moved_s < 5.0 and c2_moved_s < 5.0
    assert all(o.cluster == "c3" for o in after_c2 if o.sent > marks["kill_c2"] + 5)
    assert all(f >= 2 for f in failovers)  # c1 and c2, seen by each replica
    assert sum(cross) > 0
    assert early < 0.5 and late >= 0.8


async def test_hung_gateway_is_drained_by_its_stale_heartbeat(tmp_path: Path) -> None:
    """A gateway that stops answering without closing anything (SIGSTOP: the kernel
    still accepts connections) is found by its heartbeat alone: the status poll times
    out and the cluster is drained; the requests already sent there are retried elsewhere
    the moment it is drained (not after `readTimeoutMs`, left at its 300 s default here,
    which the 30 s bound below would not survive), so none is lost."""
    rate = 10.0
    fleet = EmulatedFleet(fleet_spec({"c1": 1, "c2": 1}))
    with processes() as procs:
        async with fleet, session() as s:
            c1 = cluster_gateway(tmp_path, fleet, "c1", 98.0)
            c2 = cluster_gateway(tmp_path, fleet, "c2", 98.0)
            config = {
                "homeRegion": "r1",
                "clusters": [
                    {"name": "c1", "region": "r1", "endpoint": c1.url, "priority": 0},
                    {"name": "c2", "region": "r1", "endpoint": c2.url, "priority": 1},
                ],
            }
            front = router(tmp_path, "global", config)
            await start_tier(s, procs, [c1, c2], [front])
            await asyncio.sleep(1.2)
            outcomes: list[Outcome] = []
            tasks = []
            start = time.monotonic()
            stopped_at = drained_at = 0.0
            assert c1.process is not None
            try:
                for i in range(int(rate * 8)):
                    await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
                    tasks.append(asyncio.create_task(stream_one(s, front.url, i, outcomes)))
                    if i == int(rate * 2):
                        c1.process.send_signal(signal.SIGSTOP)
                        stopped_at = time.monotonic()
                    if stopped_at and not drained_at and i % 2 == 0:
                        healthy = await metric_total(
                            s, front.url, "igw_global_cluster_healthy", cluster="c1"
                        )
                        drained_at = time.monotonic() if healthy == 0 else 0.0
                await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
                failovers = await metric_total(
                    s, front.url, "igw_global_failover_events_total", cluster="c1"
                )
                timeouts = await metric_total(
                    s, front.url, "igw_global_failover_events_total", reason="status_timeout"
                )
            finally:
                c1.process.send_signal(signal.SIGCONT)
    results = Counter(o.result for o in outcomes)
    late_c1 = [o for o in outcomes if o.sent > drained_at and o.cluster == "c1"]
    print(
        f"\nhung gateway: drained {drained_at - stopped_at:.2f} s after SIGSTOP "
        f"(poll every 1 s, status timeout 0.5 s); {dict(results)}; failover events {failovers}"
    )
    assert drained_at and drained_at - stopped_at < 5.0
    assert set(results) == {"ok"}
    assert not late_c1 and failovers == 1 and timeouts == 1


async def igw_cli(*args: str) -> int:
    """`igw ARGS` as an operator runs it, in its own process."""
    command = [sys.executable, "-m", "inference_gateway.cli.main", *args]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    return await asyncio.wait_for(process.wait(), timeout=30)


async def test_planned_drain_reaches_running_routers_and_ramps_back(tmp_path: Path) -> None:
    """`igw global drain c1` against the shared store: both running router replicas stop
    sending to c1 within a poll interval (no restart, no failover event); `undrain`
    brings it back with its share growing over `rampS`, not at once."""
    rate, ramp_s = 12.0, 6.0
    fleet = EmulatedFleet(fleet_spec({"c1": 2, "c2": 2}))
    with LocalRedis() as redis, processes() as procs:
        async with fleet, session() as s:
            gateways = {n: cluster_gateway(tmp_path, fleet, n, 98.0) for n in ("c1", "c2")}
            config = {
                "homeRegion": "r1",
                "rampS": ramp_s,
                "store": {"url": redis.url, "timeoutMs": 1000},
                "clusters": [
                    {"name": n, "region": "r1", "endpoint": g.url, "priority": i}
                    for i, (n, g) in enumerate(gateways.items())
                ],
            }
            routers = [router(tmp_path, f"global-{i}", config) for i in range(2)]
            config_path = str(tmp_path / "global-0.yaml")
            await start_tier(s, procs, list(gateways.values()), routers)
            await asyncio.sleep(ramp_s + 1)  # past the start-up ramp
            outcomes: list[Outcome] = []
            tasks: list[asyncio.Task[None]] = []
            marks: dict[str, float] = {}
            plan = {2.0: "drain", 8.0: "undrain"}
            start = time.monotonic()
            i = 0
            # until 4 s past the ramp after the undrain took effect: the CLI's own start
            # (a Python process) takes seconds on a loaded machine, and the traffic waits
            # for it, so the end is counted from the undrain, not from the plan
            while "undrain" not in marks or time.monotonic() < marks["undrain"] + ramp_s + 4:
                now = time.monotonic() - start
                for at, action in list(plan.items()):
                    if now >= at:
                        del plan[at]
                        assert await igw_cli("global", action, "c1", "--config", config_path) == 0
                        marks[action] = time.monotonic()
                tasks.append(asyncio.create_task(stream_one(s, routers[i % 2].url, i, outcomes)))
                i += 1
                await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            marks["end"] = time.monotonic()
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
            failovers = [
                await metric_total(s, r.url, "igw_global_failover_events_total") for r in routers
            ]
    results = Counter(o.result for o in outcomes)
    drained = [
        o
        for o in outcomes
        if marks["drain"] + 1.5 <= o.sent < marks["undrain"] and o.cluster == "c1"
    ]
    back = marks["undrain"]
    before = share(outcomes, start, marks["drain"], {"c1"})
    early = share(outcomes, back, back + 2, {"c1"})
    late = share(outcomes, back + ramp_s + 0.5, marks["end"], {"c1"})
    print(
        f"\nplanned drain: {len(outcomes)} requests {dict(results)}; c1 share before "
        f"{before:.2f}, during 0 ({len(drained)} sent there after the poll interval), "
        f"first 2 s after undrain {early:.2f}, after the ramp {late:.2f}; "
        f"failover events per router {failovers}"
    )
    assert set(results) == {"ok"}
    assert not drained  # both replicas drained it within a poll interval (+ slack)
    assert failovers == [0, 0]  # a planned drain pages nobody
    # c1 takes its share (0.4-0.75 in runs here) before; comes back from 0, not at once
    assert before > 0.3 and late > 0.3 and early < 0.5 * late


# ---------------------------------------------------------------------------- rate limit


async def test_two_routers_share_one_limit_and_survive_the_store(tmp_path: Path) -> None:
    limit, window_s, rate = 100, 10.0, 25.0
    fleet = EmulatedFleet(fleet_spec({"c1": 1}))
    with LocalRedis() as redis, processes() as procs:
        async with fleet, session() as s:
            gateway = cluster_gateway(tmp_path, fleet, "c1", 98.0)
            config = {
                "clusters": [{"name": "c1", "region": "r1", "endpoint": gateway.url}],
                "store": {"url": redis.url, "timeoutMs": 2000, "retryMs": 200},
                "rateLimits": {
                    "rules": [{"requestsPerMinute": limit}],
                    "windowS": window_s,
                    "fallbackReplicas": 2,
                },
            }
            routers = [router(tmp_path, f"global-{i}", config) for i in range(2)]
            await start_tier(s, procs, [gateway], routers)

            async def one(i: int) -> tuple[int, str]:
                body = {"model": MODEL, "prompt": f"q{i}", "max_tokens": 2}
                headers = {"authorization": "Bearer tenant-a"}
                url = routers[i % 2].url + "/v1/completions"
                async with s.post(url, json=body, headers=headers) as r:
                    await r.read()
                    return r.status, r.headers.get("x-ratelimit-scope", "")

            start = time.monotonic()
            tasks = []
            for i in range(int(rate * (window_s - 0.5))):  # one window of load, then stop
                await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
                tasks.append(asyncio.create_task(one(i)))
            answers = await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
            redis.stop()
            fallback = [await one(i) for i in range(20)]
            hits = [
                await metric_total(s, r.url, "igw_global_rate_limit_hits_total") for r in routers
            ]

    admitted = sum(status == 200 for status, _ in answers)
    print(
        f"\nrate limit: {len(answers)} offered over {window_s:.0f} s to 2 routers, "
        f"{admitted} admitted (limit {limit}); 429 hits per router {hits}; "
        f"store stopped: {Counter(fallback)}"
    )
    assert {status for status, _ in answers} <= {200, 429}
    assert abs(admitted - limit) <= 0.02 * limit
    assert {scope for _, scope in answers} == {"global"}
    assert all(status == 200 and scope == "local" for status, scope in fallback)
    for r in routers:  # said once, in one line, by each replica
        assert r.log.read_text().count("local fallback engaged") == 1


# ---------------------------------------------------------------------------- cost


async def test_cost_mode_prefers_the_cheaper_cluster_until_it_saturates(tmp_path: Path) -> None:
    spec = fleet_spec({"dear": 1, "cheap": 1})
    spec["pods"][1]["max_num_seqs"] = 2  # a few long streams make its queue build
    fleet = EmulatedFleet(spec)
    # the cheap cluster counts a pod full at 2 waiting requests (default 5)
    small = {"flowControl": {"saturation": {"queueThreshold": 2, "noncriticalQueueThreshold": 2}}}
    with processes() as procs:
        async with fleet, session() as s:
            dear = cluster_gateway(tmp_path, fleet, "dear", 98.0)
            cheap = cluster_gateway(tmp_path, fleet, "cheap", 40.0, small)
            config = {
                "profile": "cost",
                "homeRegion": "r1",
                "sheddableObjectives": ["batch"],
                "clusters": [
                    {"name": "dear", "region": "r1", "endpoint": dear.url, "hourlyCostUsd": 98},
                    {"name": "cheap", "region": "r1", "endpoint": cheap.url, "hourlyCostUsd": 40},
                ],
            }
            front = router(tmp_path, "global", config)
            await start_tier(s, procs, [dear, cheap], [front])
            await asyncio.sleep(1.2)

            async def shed(i: int) -> str:
                body = {"model": MODEL, "prompt": f"batch job {i}", "max_tokens": 4}
                headers = {"x-gateway-inference-objective": "batch"}
                async with s.post(front.url + "/v1/completions", json=body, headers=headers) as r:
                    await r.read()
                    assert r.status == 200
                    return r.headers["x-igw-cluster"]

            calm = Counter([await shed(i) for i in range(40)])

            pod_url = f"http://127.0.0.1:{fleet.pods['cheap'].port}"

            async def hog(i: int) -> None:  # another client of the cheap cluster's pod
                body = {"model": MODEL, "prompt": f"long {i}", "max_tokens": 3000}
                body["stream"] = True
                async with s.post(pod_url + "/v1/completions", json=body) as r:
                    async for _ in r.content.iter_any():
                        pass

            hogs = [asyncio.create_task(hog(i)) for i in range(8)]
            try:
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    async with s.get(cheap.url + "/status") as r:
                        if (await r.json())["saturation"] >= 1:
                            break
                    await asyncio.sleep(0.2)
                await asyncio.sleep(1.2)  # the router polls it
                busy = Counter([await shed(i) for i in range(20)])
                # moved by the status, not by refusals: (almost) nothing was retried off it
                retried = await metric_total(
                    s, front.url, "igw_global_retries_total", cluster="cheap"
                )
            finally:
                for task in hogs:
                    task.cancel()
                await asyncio.gather(*hogs, return_exceptions=True)

    print(
        f"\ncost mode: calm {dict(calm)}, cheap cluster saturated {dict(busy)} "
        f"({retried:.0f} retried off it)"
    )
    assert calm["cheap"] >= 0.9 * 40
    assert busy["dear"] >= 0.9 * 20
    assert retried <= 2


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_openai_sdk_through_the_global_router() -> None:
    """The official openai SDK against `igw global` → `igw serve` → emulated pods (in
    one process): chat, streaming with usage (which settles the token bucket), models,
    a cluster's 404 passed through, and the global limit's 429 as `RateLimitError`."""
    fleet = EmulatedFleet(fleet_spec({"c1": 2}))
    with LocalRedis() as redis:
        async with fleet:
            endpoints = [
                Endpoint(e.name, e.host, e.port, pool="default", labels=e.labels, index=i)
                for i, e in enumerate(fleet.endpoints)
            ]
            cluster_app, _ = build_gateway(endpoints, emf_cluster="c1")
            async with serving(cluster_app) as cluster_url:
                spec = parse_router_config(
                    {
                        "clusters": [{"name": "c1", "region": "r1", "endpoint": cluster_url}],
                        "store": {"url": redis.url, "timeoutMs": 2000},
                        "rateLimits": {
                            "rules": [{"requestsPerMinute": 3, "tokensPerMinute": 5000}]
                        },
                    }
                )
                router_app, _ = build_global_router(spec)
                async with serving(router_app) as url:
                    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
                    reply = await client.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8
                    )
                    assert reply.choices[0].message.content and reply.usage is not None
                    stream = await client.chat.completions.create(
                        model=MODEL,
                        messages=[{"role": "user", "content": "stream"}],
                        max_tokens=30,
                        stream=True,
                        stream_options={"include_usage": True},
                    )
                    chunks = [c async for c in stream]
                    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens
                    models = await client.models.list()
                    assert MODEL in {m.id for m in models.data}
                    await asyncio.sleep(1.0)  # usage settles after the answer is sent
                    raw = await client.chat.completions.with_raw_response.create(
                        model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=600
                    )
                    assert raw.headers["x-ratelimit-scope"] == "global"
                    # both earlier answers were settled to their `usage`, not the estimates
                    used = reply.usage.total_tokens + chunks[-1].usage.total_tokens
                    remaining = int(raw.headers["x-ratelimit-remaining-tokens"])
                    # this one charged as tier 1 charges: prompt estimate + output bound
                    prompt = prompt_estimate({"messages": [{"role": "user", "content": "x"}]})
                    assert remaining == 5000 - used - (prompt + 600)
                    with pytest.raises(openai.RateLimitError) as refused:
                        await client.chat.completions.create(
                            model=MODEL, messages=[{"role": "user", "content": "y"}], max_tokens=2
                        )
                    assert int(refused.value.response.headers["retry-after"]) >= 1
                    other = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k2", max_retries=0)
                    with pytest.raises(openai.NotFoundError):
                        await other.chat.completions.create(
                            model="nope", messages=[{"role": "user", "content": "x"}], max_tokens=2
                        )
                    await client.close()
                    await other.close()


async def test_status_answer_is_what_the_router_reads() -> None:
    """The cluster gateway's /status validates as the router's `ClusterStatus` (the two
    sides of the heartbeat contract cannot drift), its cost is the seed formula, and it
    is readable without a credential on a gateway that authenticates (as /metrics)."""
    fleet = EmulatedFleet(fleet_spec({"c1": 2}))
    async with fleet:
        endpoints = [
            Endpoint(e.name, e.host, e.port, pool="default", labels=e.labels, index=i)
            for i, e in enumerate(fleet.endpoints)
        ]
        keys = {hashlib.sha256(b"secret").digest(): Identity("team-a")}
        app, _ = build_gateway(
            endpoints, emf_cluster="c1", hourly_cost_usd=10.0, auth=Authenticator(keys)
        )
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        try:
            async with session() as s:
                async with s.get(url + "/status") as r:
                    assert (await r.json())["costPerMillionTokens"] is None  # idle: no rate
                for i in range(3):
                    body = {"model": MODEL, "prompt": f"p{i}", "max_tokens": 4}
                    auth = {"authorization": "Bearer secret"}
                    async with s.post(url + "/v1/completions", json=body, headers=auth) as r:
                        assert r.status == 200
                await asyncio.sleep(0.3)
                async with s.get(url + "/status") as r:
                    status = dict(await r.json())
        finally:
            await runner.cleanup()
    parsed = ClusterStatus.model_validate(status)
    assert status["cluster"] == "c1" and parsed.readyPods == 2 and parsed.stalePods == 0
    assert set(status["queue"]) == {"critical", "standard", "sheddable"}
    assert parsed.tokensPerSecond > 0 and status["hourlyCostUsd"] == 10.0
    assert status["costPerMillionTokens"] == pytest.approx(
        10.0 / (parsed.tokensPerSecond * 3600) * 1e6
    )
