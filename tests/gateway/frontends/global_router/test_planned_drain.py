"""Planned drains while the routers run: `igw global drain` / `undrain` write the drain
set to a real `redis-server` (or to `drainFile` without a store); two running router
replicas drain the cluster within their poll interval, no failover event is counted,
and an undrain brings it back ramping from zero."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from inference_gateway.cli.main import main
from inference_gateway.shared_store.local_server import LocalRedis

from .conftest import FakeCluster, running_router
from .test_router import config, post


def write(tmp_path: Path, cfg: dict[str, Any]) -> str:
    path = tmp_path / "global.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


async def igw(*argv: str) -> int:
    return await asyncio.to_thread(main, ["global", *argv])  # asyncio.run inside: a thread


async def test_drain_and_undrain_through_the_store_reach_every_replica(
    fake_clusters: list[FakeCluster], redis_server: LocalRedis, tmp_path: Path
) -> None:
    cfg = config(fake_clusters, store={"url": redis_server.url, "timeoutMs": 2000}, rampS=30)
    path = write(tmp_path, cfg)
    async with (
        running_router(cfg) as (url1, r1),
        running_router(cfg) as (url2, r2),
        aiohttp.ClientSession() as s,
    ):
        assert await igw("drain", "b", "--config", path) == 0
        await asyncio.sleep(0.35)  # pollIntervalMs 100
        for router in (r1, r2):
            assert not router.registry.states["b"].routable
            assert router.metrics.planned.labels("b")._value.get() == 1
            assert sum(s.value for s in router.metrics.failovers.collect()[0].samples) == 0
        answers = [await post(s, u) for _ in range(10) for u in (url1, url2)]
        assert all(status == 200 for status, _, _ in answers)
        assert "b" not in {h["x-igw-cluster"] for _, h, _ in answers}
        assert sum(fake_clusters[1].hits.values()) == 0
        assert await igw("undrain", "b", "--config", path) == 0
        await asyncio.sleep(0.35)
        for router in (r1, r2):
            b = router.registry.states["b"]
            assert b.routable
            assert 0 <= b.ramp_fraction(router.registry.clock(), 30) < 0.1  # from zero


async def test_a_router_that_starts_keeps_a_drained_cluster_out(
    fake_clusters: list[FakeCluster], redis_server: LocalRedis, tmp_path: Path
) -> None:
    cfg = config(fake_clusters, store={"url": redis_server.url, "timeoutMs": 2000})
    assert await igw("drain", "--region", "r1", "--config", write(tmp_path, cfg)) == 0
    async with running_router(cfg) as (url, router), aiohttp.ClientSession() as s:
        assert [st.name for st in router.registry.routable()] == ["c"]
        status, headers, _ = await post(s, url)
        assert status == 200 and headers["x-igw-cluster"] == "c"
        assert sum(fake_clusters[0].hits.values()) + sum(fake_clusters[1].hits.values()) == 0


async def test_without_a_store_the_drain_file_carries_the_set(
    fake_clusters: list[FakeCluster], tmp_path: Path
) -> None:
    drained = tmp_path / "drained"
    cfg = config(fake_clusters, drainFile=str(drained))
    path = write(tmp_path, cfg)
    async with running_router(cfg) as (_, router):
        assert await igw("drain", "a", "c", "--config", path) == 0
        await asyncio.sleep(0.35)
        assert [st.name for st in router.registry.routable()] == ["b"]
        assert await igw("undrain", "c", "--config", path) == 0
        await asyncio.sleep(0.35)
        assert sorted(st.name for st in router.registry.routable()) == ["b", "c"]
    assert [n for n in drained.read_text().splitlines() if not n.startswith("#")] == ["a"]


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["drain", "nope"], {"drainFile": "/tmp/x"}),  # unknown cluster
        (["drain", "--region", "r9"], {"drainFile": "/tmp/x"}),  # unknown region
        (["drain"], {"drainFile": "/tmp/x"}),  # nothing named
        (["drain", "a"], {}),  # neither a store nor a drain file
        (["serve", "a"], {}),  # a name without drain / undrain
    ],
)
def test_drain_cli_refuses_bad_input(
    fake_clusters: list[FakeCluster], tmp_path: Path, argv: list[str], extra: dict[str, Any]
) -> None:
    path = write(tmp_path, config(fake_clusters, **extra))
    assert main(["global", *argv, "--config", path]) == 2


def test_drain_cli_with_the_store_down_and_no_file_exits_1(
    fake_clusters: list[FakeCluster], tmp_path: Path
) -> None:
    path = write(tmp_path, config(fake_clusters, store={"url": "redis://127.0.0.1:1/0"}))
    assert main(["global", "drain", "a", "--config", path]) == 1


async def test_draining_the_last_cluster_is_refused_without_force(
    fake_clusters: list[FakeCluster], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """With a and b drained, draining c would turn every request into a 503: refused
    (exit 2, the set unchanged) unless `--force` says it is meant."""
    drained = tmp_path / "drained"
    path = write(tmp_path, config(fake_clusters, drainFile=str(drained)))

    def names() -> list[str]:
        return [n for n in drained.read_text().splitlines() if not n.startswith("#")]

    assert await igw("drain", "a", "b", "--config", path) == 0
    assert await igw("drain", "c", "--config", path) == 2
    assert "drains every cluster" in capfd.readouterr().err
    assert names() == ["a", "b"]
    assert await igw("drain", "--region", "r2", "--config", path) == 2  # c, by its region
    assert await igw("drain", "c", "--force", "--config", path) == 0
    assert names() == ["a", "b", "c"]


async def test_a_drain_leaving_only_silent_clusters_warns(
    fake_clusters: list[FakeCluster], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The clusters left do not answer `GET /status` from here: the drain goes ahead
    (they may only be unreachable from this machine) and says so."""
    path = write(tmp_path, config(fake_clusters, drainFile=str(tmp_path / "drained")))
    fake_clusters[2].status_body = b"not a status"
    await fake_clusters[1].stop()
    assert await igw("drain", "a", "--config", path) == 0
    err = capfd.readouterr().err
    assert "warning: no cluster left (b, c) answered GET /status" in err
    fake_clusters[2].status_body = None
    assert await igw("drain", "b", "--config", path) == 0
    assert "warning" not in capfd.readouterr().err  # c answers: no warning
