"""Traffic control through the real gateway on loopback, against emulated pods:
canary rewrites (and live reload), rate limits, saturation (429 / 503), all-stale 503."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from inference_gateway.assembly.serve import WATCHER
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.emulator.fleet import EmulatedFleet

FLEET = {
    "base_port": 0,
    "pods": [
        {
            "name": "v1",
            "gpu": "H100",
            "model": "llama-3.1-8b",
            "replicas": 2,
            "served_model_name": "chat-v1",
        },
        {
            "name": "v2",
            "gpu": "H100",
            "model": "llama-3.1-8b",
            "replicas": 1,
            "served_model_name": "chat-v2",
        },
    ],
}


def config(**extra: object) -> dict[str, object]:
    base: dict[str, object] = {
        "pools": [{"name": "v1"}, {"name": "v2"}],
        "models": [{"name": "chat-v1", "pool": "v1"}, {"name": "chat-v2", "pool": "v2"}],
        "objectives": [{"name": "batch", "priority": -1}, {"name": "vip", "priority": 5}],
    }
    base.update(extra)
    return base


def rewrite_doc(v1: int, v2: int) -> dict[str, object]:
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
        "kind": "InferenceModelRewrite",
        "metadata": {"name": "chat-canary"},
        "spec": {
            "rules": [
                {
                    "matches": [{"model": {"type": "Exact", "value": "chat"}}],
                    "targets": [
                        {"modelRewrite": "chat-v1", "weight": v1},
                        {"modelRewrite": "chat-v2", "weight": v2},
                    ],
                }
            ]
        },
    }


@pytest.fixture
async def fleet() -> EmulatedFleet:
    async with EmulatedFleet(FLEET) as fleet:
        yield fleet


async def test_canary_split_rewrites_back_and_reloads_live(
    fleet: EmulatedFleet, gateway_on: Callable[..., Any], tmp_path: Path
) -> None:
    rules = tmp_path / "rewrites.yaml"
    rules.write_text(yaml.safe_dump(rewrite_doc(50, 50)))
    v2_port = next(str(e.port) for e in fleet.endpoints if e.name == "v2")
    async with gateway_on(fleet, config=parse_config(config()), rewrites=rules, seed=3) as (
        url,
        _,
        app,
    ):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        seen = set()
        for _ in range(12):
            reply = await client.with_raw_response.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
            assert reply.parse().model == "chat"  # written back to the client's name
            seen.add(reply.headers["x-gateway-destination-endpoint"].rsplit(":", 1)[1] == v2_port)
        assert seen == {True, False}
        stream = await client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
        )
        assert {chunk.model async for chunk in stream} == {"chat"}

        rules.write_text(yaml.safe_dump(rewrite_doc(0, 100)))  # promote the canary
        watcher = app[WATCHER]
        await asyncio.sleep(0.05)
        assert await watcher.check() or watcher.reloads >= 1
        for _ in range(5):
            reply = await client.with_raw_response.completions.create(
                model="chat", prompt="x", max_tokens=1
            )
            assert reply.headers["x-gateway-destination-endpoint"].endswith(":" + v2_port)

        rules.write_text(yaml.safe_dump(rewrite_doc(0, 0)))  # invalid: weights sum to zero
        await asyncio.sleep(0.05)
        assert not await watcher.check() and watcher.failures == 1
        reply = await client.with_raw_response.completions.create(
            model="chat", prompt="x", max_tokens=1
        )
        assert reply.headers["x-gateway-destination-endpoint"].endswith(":" + v2_port)
        await client.close()


async def test_rate_limit_answers_429_with_headers(
    fleet: EmulatedFleet, gateway_on: Callable[..., Any]
) -> None:
    spec = parse_config(config(rateLimits=[{"apiKey": "tenant-a", "requestsPerMinute": 2}]))
    async with gateway_on(fleet, config=spec) as (url, _, _app):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="tenant-a", max_retries=0)
        for _ in range(2):
            await client.completions.create(model="chat-v1", prompt="x", max_tokens=1)
        with pytest.raises(openai.RateLimitError) as error:
            await client.completions.create(model="chat-v1", prompt="x", max_tokens=1)
        headers = error.value.response.headers
        assert int(headers["retry-after"]) >= 1
        assert headers["x-ratelimit-limit-requests"] == "2"
        assert headers["x-ratelimit-remaining-requests"] == "0"
        other = openai.AsyncOpenAI(base_url=url + "/v1", api_key="tenant-b", max_retries=0)
        await other.completions.create(model="chat-v1", prompt="x", max_tokens=1)
        await client.close()
        await other.close()


async def test_saturated_pool_sheds_sheddable_and_times_out_the_queue(
    fleet: EmulatedFleet,
    gateway_on: Callable[..., Any],
) -> None:
    # One scrape at start, then none for a minute: the picker's own count of what it sent
    # and has not started answering is all it sees, so two long prefills saturate the pool.
    spec = parse_config(
        config(
            scrape={"intervalMs": 60_000, "stalenessMs": 600_000},
            flowControl={
                "saturation": {"queueThreshold": 1},
                "bands": {
                    "standard": {"maxQueue": 4, "ttlS": 0.3},
                    "critical": {"maxQueue": 4, "ttlS": 0.3},
                    "sheddable": {"maxQueue": 0, "ttlS": 1},
                },
            },
        )
    )
    async with (
        gateway_on(fleet, config=spec) as (url, _, _app),
        aiohttp.ClientSession() as session,
    ):
        body = {"model": "chat-v1", "prompt": "x", "max_tokens": 1}

        async def hold(word: str) -> None:
            # a 100k-token prompt prefills for seconds: sent, no first token yet (distinct
            # prompts, so prefix affinity does not put both on one pod)
            long = {"model": "chat-v1", "prompt": f"{word} " * 80_000, "max_tokens": 1}
            async with session.post(url + "/v1/completions", json=long) as response:
                await response.read()

        held = [asyncio.create_task(hold(w)) for w in ("alpha", "omega")]  # one per v1 pod
        await asyncio.sleep(0.3)
        async with session.post(
            url + "/v1/completions",
            json=body,
            headers={"x-gateway-inference-objective": "batch"},
        ) as r:
            assert r.status == 429
            assert int(r.headers["retry-after"]) >= 1
            assert (await r.json())["error"]["code"] == "pool_saturated"
        async with session.post(url + "/v1/completions", json=body) as r:
            assert r.status == 503
            assert (await r.json())["error"]["code"] == "queue_timeout"
        async with session.get(url + "/metrics") as r:
            text = await r.text()
        assert (
            'inference_objective_request_rejected_total{model_name="chat-v1",'
            'reason="pool_saturated"} 1.0' in text
        )
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }
        # the autoscaling signals: v1 is full (two prefills in flight, threshold 1), v2 idle
        assert samples[("inference_pool_saturation", (("name", "v1"),))] >= 1.0
        assert samples[("inference_pool_saturation", (("name", "v2"),))] < 1.0
        for band in ("critical", "standard", "sheddable"):
            queued = (
                "inference_extension_flow_control_queue_size",
                (("band", band), ("name", "v1")),
            )
            assert samples[queued] == 0.0  # the 503'd request left the queue
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)


@pytest.mark.parametrize("prefill_threshold_s", [0.5, None])
async def test_pending_prefill_saturates_the_pool_for_noncritical_requests(
    fleet: EmulatedFleet,
    gateway_on: Callable[..., Any],
    prefill_threshold_s: float | None,
) -> None:
    # The queue term is lax here (5 per pod) and scrapes stop after the first, so only the
    # prefill term can see two long prompts that are prefilling (vLLM counts them running)
    spec = parse_config(
        config(
            scrape={"intervalMs": 60_000, "stalenessMs": 600_000},
            flowControl={
                "saturation": {
                    "prefillThresholdS": None,
                    "noncriticalQueueThreshold": 5,
                    "noncriticalKvThreshold": 0.8,
                    "noncriticalPrefillThresholdS": prefill_threshold_s,
                    "criticalReserveS": None,  # keep the headroom without critical traffic
                }
            },
        )
    )
    async with (
        gateway_on(fleet, config=spec) as (url, gateway, _app),
        aiohttp.ClientSession() as session,
    ):

        async def complete(prompt: str, objective: str = "") -> int:
            body = {"model": "chat-v1", "prompt": prompt, "max_tokens": 1, "stream": True}
            headers = {"x-gateway-inference-objective": objective} if objective else {}
            async with session.post(url + "/v1/completions", json=body, headers=headers) as r:
                await r.read()
                return r.status

        # calibrate: a few concurrent short requests measure each pod's prefill speed
        assert await asyncio.gather(*(complete(f"warm {i} " * 50) for i in range(6))) == [200] * 6
        pods = [e for e in gateway.store.endpoints if e.pool == "v1"]
        assert all(e.prefill_s_per_token > 0 for e in pods), "a pod got no warm-up request"
        held = [asyncio.create_task(complete(f"{w} " * 80_000)) for w in ("alpha", "omega")]
        await asyncio.sleep(0.3)
        assert all(e.prefill_tokens > 0 for e in pods)
        body = {"model": "chat-v1", "prompt": "x", "max_tokens": 1, "stream": True}
        async with session.post(
            url + "/v1/completions",
            json=body,
            headers={"x-gateway-inference-objective": "batch"},
        ) as r:
            if prefill_threshold_s is None:  # upstream detector: the pool looks free
                assert r.status == 200
            else:
                assert r.status == 429
                assert (await r.json())["error"]["code"] == "pool_saturated"
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)


async def test_every_pod_stale_holds_then_answers_503_with_retry_after(
    fleet: EmulatedFleet, gateway_on: Callable[..., Any]
) -> None:
    """A pool with no ready pod holds the request in its band's queue (scale from zero)
    and, past the band's TTL, answers 503 `no_ready_endpoint` with Retry-After."""
    spec = parse_config(
        config(
            scrape={"intervalMs": 20, "stalenessMs": 100, "timeoutMs": 50},
            flowControl={"bands": {"standard": {"maxQueue": 8, "ttlS": 0.5}}},
        )
    )
    async with gateway_on(fleet, config=spec) as (url, gateway, _app):
        for name in ("v1-0", "v1-1"):
            await fleet.stop_pod(name)
        await asyncio.sleep(0.4)
        assert all(e.stale for e in gateway.store.endpoints if e.pool == "v1")
        async with aiohttp.ClientSession() as session:
            body = {"model": "chat-v1", "prompt": "x", "max_tokens": 1}
            async with session.post(url + "/v1/completions", json=body) as r:
                assert r.status == 503
                error = (await r.json())["error"]
                assert error["code"] == "no_ready_endpoint", error
                assert "ready model server" in error["message"]
                assert int(r.headers["retry-after"]) >= 1
