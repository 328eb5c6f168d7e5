"""The demo's fairness rules, through the real commands on loopback (demo/stack.py):

* every policy starts from the same state: a fleet started for it alone, which the demo
  checks fresh from the pods' own `/metrics` before it measures, and refuses otherwise;
* the pods, the data plane and the client are separate processes, as in a cluster, and
  none outlives its run.

One H100 pod and three requests per policy keep this to a few seconds.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from inference_gateway.demo.stack import (
    CONFIG,
    POOL,
    Fleet,
    PodState,
    check_fresh,
    proxy_plane,
    run_policy,
)
from inference_gateway.demo.trace import MODEL, Outcome, make_trace, replay

SMALL = {
    "base_port": 0,
    "pods": [{"name": "h100", "gpu": "H100", "model": MODEL, "replicas": 1,
              "labels": {"igw.dev/pool": POOL}}],
}  # fmt: skip
TRACE = [dataclasses.replace(i, t=0.0) for i in make_trace(duration=2.0, rate=3.0, seed=1)[:3]]


class Quiet:
    def advance(self) -> None:
        return None


async def drive(url: str) -> Outcome:
    return await replay(url, TRACE, Quiet())


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_each_policy_runs_on_a_fresh_fleet_in_processes_of_its_own() -> None:
    runs = [
        await run_policy(policy, functools.partial(proxy_plane, policy), drive, fleet_spec=SMALL)
        for policy in ("gateway", "round-robin")
    ]
    for run in runs:
        assert run.outcome.errors == 0 and len(run.outcome.ttft) == len(TRACE)
        assert [p.gpu for p in run.start] == ["H100"]
        assert all(p == PodState(p.name, "H100", 0.0, 0.0, 0.0, 0.0) for p in run.start)
        # the same counters the freshness check read saw this run's requests: it can fail
        assert run.served_by_gpu() == {"H100": float(len(TRACE))}
        assert run.end[0].prefix_queries > 0
        assert run.cpu_wait is not None and run.cpu_wait >= 0  # Linux's scheduler stats
        pids = {run.fleet_pid, run.plane_pids["igw serve"], os.getpid()}
        assert len(pids) == 3 and 0 not in pids  # pods, gateway, client: three processes
        assert gone(run.fleet_pid) and gone(run.plane_pids["igw serve"])
    assert runs[0].fleet_pid != runs[1].fleet_pid  # the second policy got its own fleet


async def test_a_fleet_that_served_a_request_is_refused(tmp_path: Path) -> None:
    async with Fleet(tmp_path, SMALL) as fleet:
        check_fresh(await fleet.state())  # fresh: nothing to refuse
        pod = fleet.pods[0]
        body: dict[str, Any] = {"model": MODEL, "prompt": "hello there", "max_tokens": 2}
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"http://{pod['address']}:{pod['port']}/v1/completions", json=body) as r,
        ):
            assert r.status == 200
        with pytest.raises(RuntimeError, match="not a fresh fleet"):
            check_fresh(await fleet.state())
    assert gone(fleet.pid)


def test_the_config_selects_every_pod_of_the_fleet() -> None:
    """The data planes read one config; its pool's selector must match the pods' labels,
    or a data plane would wait for pods it never sees."""
    from inference_gateway.demo.stack import FLEET

    selector = CONFIG["pools"][0]["selector"]
    for group in FLEET["pods"]:
        assert selector.items() <= group["labels"].items()
