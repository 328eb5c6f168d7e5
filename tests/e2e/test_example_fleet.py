"""The example fleet of `examples/fleet/` started as `docs/global-router.md` ("Run the
example fleet") runs it: `igw emulate --fleet pods.yaml`, three `igw serve` gateways
(use1-a, use1-b in us-east-1, usw2-a in us-west-2) on the example's endpoint files, one
`igw global` on the example's `global.yaml` and a real `redis-server` as its store.

Only the ports change (free ones: other sessions run tests on this machine): the pods
listen on ephemeral ports (`base_port: 0`, their endpoints written by the emulator), and
the files are rewritten with those ports and the store's. Then, through the official
`openai` SDK: latency traffic stays in the home region, sheddable (`batch`) traffic goes
to usw2-a, the cheaper cluster per generated token at capacity, and `igw global drain`
/ `drained` / `undrain` work against the store. Every process is stopped in a `finally`;
every wait is bounded.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import yaml

from inference_gateway.shared_store.local_server import LocalRedis, free_port

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet"
CLUSTERS = ("use1-a", "use1-b", "usw2-a")
HOURLY = {"use1-a": "12.29", "use1-b": "12.29", "usw2-a": "4.10"}  # as the docs run them


def igw(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "inference_gateway.cli", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def igw_run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "inference_gateway.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


async def wait_for(url: str, procs: list[subprocess.Popen[bytes]], log: Path) -> None:
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), log.read_text()[-3000:]
            try:
                async with s.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError(f"{url}: {log.read_text()[-3000:]}")


def example(tmp: Path, pods_file: Path, redis: LocalRedis) -> tuple[dict[str, int], Path]:
    """The example's files with this run's ports: per cluster its gateway port, and the
    global config's path."""
    written = yaml.safe_load(pods_file.read_text())["endpoints"]
    pod_port = {e["name"]: e["port"] for e in written}
    gateways = {name: free_port() for name in CLUSTERS}
    for name in CLUSTERS:
        document = yaml.safe_load((EXAMPLE / f"{name}-endpoints.yaml").read_text())
        for endpoint in document["endpoints"]:
            endpoint["port"] = pod_port[endpoint["name"]]
        (tmp / f"{name}-endpoints.yaml").write_text(yaml.safe_dump(document))
    config: dict[str, Any] = yaml.safe_load((EXAMPLE / "global.yaml").read_text())
    for cluster in config["clusters"]:
        cluster["endpoint"] = f"http://127.0.0.1:{gateways[cluster['name']]}"
    config["store"]["url"] = redis.url
    config["rampS"] = 0  # the example ramps over 10 s; this test does not wait for it
    path = tmp / "global.yaml"
    path.write_text(yaml.safe_dump(config))
    return gateways, path


async def test_the_example_fleet_runs_as_documented(tmp_path: Path) -> None:
    pods = yaml.safe_load((EXAMPLE / "pods.yaml").read_text())
    assert [p["name"] for p in pods["pods"]] == list(CLUSTERS)
    pods["base_port"] = 0
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump(pods))
    log = tmp_path / "fleet.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with LocalRedis() as redis:
            written = tmp_path / "pods-endpoints.yaml"
            procs.append(
                igw("emulate", "--fleet", str(tmp_path / "pods.yaml"), "--write-endpoints",
                    str(written), log=log)
            )  # fmt: skip
            deadline = time.monotonic() + 60
            while not written.exists():
                assert procs[0].poll() is None and time.monotonic() < deadline, log.read_text()
                await asyncio.sleep(0.1)
            gateways, config = example(tmp_path, written, redis)
            for name in CLUSTERS:
                procs.append(
                    igw("serve", "--endpoints", str(tmp_path / f"{name}-endpoints.yaml"),
                        "--emf-cluster", name, "--hourly-cost", HOURLY[name],
                        "--port", str(gateways[name]), log=log)
                )  # fmt: skip
            for name in CLUSTERS:
                await wait_for(f"http://127.0.0.1:{gateways[name]}/status", procs, log)
            port = free_port()
            procs.append(igw("global", "--config", str(config), "--port", str(port), log=log))
            url = f"http://127.0.0.1:{port}"
            await wait_for(url + "/health", procs, log)

            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="example", max_retries=0)

            async def complete(objective: str | None = None) -> str:
                headers = {"x-gateway-inference-objective": objective} if objective else {}
                raw = await client.completions.with_raw_response.create(
                    model="llama-3.1-8b", prompt="hello", max_tokens=4, extra_headers=headers
                )
                assert raw.parse().choices
                return str(raw.headers["x-igw-cluster"])

            latency = Counter([await complete() for _ in range(12)])
            assert set(latency) <= {"use1-a", "use1-b"}, latency  # the home region
            batch = Counter([await complete("batch") for _ in range(20)])
            assert batch["usw2-a"] >= 18, batch  # cheaper per generated token at capacity

            drained = igw_run("global", "drain", "use1-a", "--config", str(config))
            assert drained.returncode == 0 and "(store)" in drained.stdout, drained.stderr
            listed = igw_run("global", "drained", "--config", str(config))
            assert listed.returncode == 0 and "use1-a" in listed.stdout
            await asyncio.sleep(2.5)  # pollIntervalMs 1000: every router has read it
            after = Counter([await complete() for _ in range(8)])
            assert "use1-a" not in after, after
            undrained = igw_run("global", "undrain", "use1-a", "--config", str(config))
            assert undrained.returncode == 0
            await client.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
