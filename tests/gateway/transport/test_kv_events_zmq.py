"""The picker's subscriber against a real emulated pod publishing vLLM's KV events.

The pod publishes over an `ipc://` endpoint (bound, as vLLM binds `tcp://*:5557`; no
network needed), the subscriber connects a SUB socket to it as the picker does, and the
scheduler's precise scorer then scores the pod from what the pod reports it holds.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.core.scheduling.kv_events import BlockStored, KVEventBatch, encode_batch
from inference_gateway.emulator.kv_publisher import parse_kv_events_config
from inference_gateway.emulator.profiles import pod_profile
from inference_gateway.emulator.server import EmulatedPod
from inference_gateway.transport.kv_events_zmq import KVEventSubscriber

TEXT = "Answer as the support assistant of a large bank, politely. " * 30


async def wait_for(condition: object, timeout_s: float = 10.0) -> bool:
    for _ in range(int(timeout_s / 0.05)):
        if condition():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.05)
    return False


async def test_picker_indexes_what_the_pod_reports_and_scores_it(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/pod-0"
    config = parse_kv_events_config(
        {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": endpoint,
         "topic": "kv-events"}
    )  # fmt: skip
    pod = EmulatedPod(
        "pod-0", pod_profile("H100", "llama-3.1-8b"), port=0, kv_events=config, hash_seed="0"
    )
    await pod.start()
    scheduler = Scheduler(GatewayConfigSpec())
    assert scheduler.precise is not None
    endpoints = [
        Endpoint("pod-0", "127.0.0.1", pod.port, labels={"igw.dev/kv-events": endpoint}),
        Endpoint("pod-1", "127.0.0.1", 1, labels={"igw.dev/kv-events": f"ipc://{tmp_path}/x"}),
    ]
    for e in endpoints:  # as a scrape leaves them: ready, idle
        e.metrics, e.stale = PodMetrics(num_gpu_blocks=26_307), False
    subscriber = KVEventSubscriber(lambda: endpoints, lambda: scheduler.precise)
    await subscriber.start()
    try:
        await asyncio.sleep(0.3)
        body = {"model": "llama-3.1-8b", "messages": [{"role": "user", "content": TEXT}]}
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{pod.url}/v1/chat/completions", json={**body, "max_tokens": 2}) as r,
        ):
            assert r.status == 200
        index = scheduler.kv_index
        assert await wait_for(lambda: index.blocks("pod-0") > 0)
        request = LLMRequest("r1", "llama-3.1-8b", prompt_tokens=len(TEXT) // 4, prompt_body=body)
        ranked = scheduler.schedule(request, endpoints)
        hashes = scheduler.precise.request_hashes(request)
        assert len(hashes) == index.blocks("pod-0")  # every full prompt block, nothing else
        assert request.prefix_matches == {"pod-0": len(hashes)}
        assert scheduler.kv_index.fresh("pod-0") and not scheduler.kv_index.fresh("pod-1")
        scores = scheduler.precise.score(request, endpoints)
        assert scores[0] > 0.9 and scores[1] == 0.0
        assert ranked[0].name == "pod-0"
    finally:
        await subscriber.stop()
        await pod.stop()


async def test_restarts_gaps_and_garbage_are_handled_per_pod() -> None:
    scheduler = Scheduler(GatewayConfigSpec())
    assert scheduler.precise is not None
    index = scheduler.kv_index
    subscriber = KVEventSubscriber(lambda: [], lambda: scheduler.precise)

    def message(seq: int, hashes: list[int]) -> list[bytes]:
        event = BlockStored(hashes, None, [0] * 16 * len(hashes), 16, None, "GPU")
        batch = KVEventBatch(ts=1.0, events=[event], data_parallel_rank=0)
        return [b"kv", seq.to_bytes(8, "big"), encode_batch(batch)]

    await subscriber.handle("p", message(0, [1, 2, 3]), index)
    assert index.matches([1, 2, 3, 4]) == {"p": 3}
    await subscriber.handle("p", message(5, [4]), index)  # 1..4 lost, no replay socket
    assert subscriber.gaps == 1 and index.matches([1, 2, 3, 4]) == {"p": 4}
    await subscriber.handle("p", message(0, [9]), index)  # sequence went back: restarted
    assert index.matches([1, 2, 3]) == {} and index.matches([9]) == {"p": 1}
    await subscriber.handle("p", [b"kv", (1).to_bytes(8, "big"), b"\xc1garbage"], index)
    await subscriber.handle("p", [b"short"], index)
    assert subscriber.bad_payloads == 2 and index.matches([9]) == {"p": 1}
