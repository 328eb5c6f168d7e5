"""The picker and an emulated pod that tokenize with one model's own files agree block
for block, adapter included; a picker that tokenizes otherwise is told so on /metrics.

The pod runs under vLLM's `--tokenizer` with a tokenizer the tests build
(`model_files`) and publishes vLLM's KV events over an `ipc://` endpoint (bound, as
vLLM binds `tcp://*:5557`); the picker's subscriber feeds the scheduler's index, wired
as `igw serve` wires it (`assembly.kv_events`: `IndexFeed`, `KVEventsCollector`). The
events are also checked against vLLM v0.11.0's hashing transcribed here on its own
(`vllm/v1/core/kv_cache_utils.py`: `hash_block_tokens` over sha256-pickle,
`NONE_HASH = sha256(PYTHONHASHSEED)`, an adapter's `lora_int_id` in every block's
extra keys; `vllm/v1/core/block_pool.py`: `BlockStored.lora_id = lora_request.id`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import pickle
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from model_files import picker_scheduler, write_model_files
from prometheus_client import CollectorRegistry

from inference_gateway.assembly.kv_events import IndexFeed, KVEventsCollector
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics
from inference_gateway.core.scheduling.kv_index import MISMATCH_RUN
from inference_gateway.emulator.kv_publisher import parse_kv_events_config
from inference_gateway.emulator.profiles import pod_profile
from inference_gateway.emulator.server import EmulatedPod
from inference_gateway.protocols.vllm.hf_tokenizer import HFTokenizer
from inference_gateway.protocols.vllm.kv_events import (
    AllBlocksCleared,
    BatchView,
    BlockRemoved,
    BlockStored,
)
from inference_gateway.transport.kv_events_zmq import KVEventSubscriber

TEXT = "Answer as the support assistant of a large bank, politely and briefly. " * 8


def vllm_hashes(ids: list[int], seed: str, lora_int_id: int | None) -> list[int]:
    def sha256(value: Any) -> bytes:
        return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()

    parent, out = sha256(seed), []
    extra = (lora_int_id,) if lora_int_id else None
    for start in range(0, len(ids) - 15, 16):
        parent = sha256((parent, tuple(ids[start : start + 16]), extra))
        out.append(int.from_bytes(parent, "big") & ((1 << 64) - 1))
    return out


async def wait_for(condition: Any, timeout_s: float = 10.0) -> bool:
    for _ in range(int(timeout_s / 0.05)):
        if condition():
            return True
        await asyncio.sleep(0.05)
    return False


class RecordingFeed(IndexFeed):
    """The feed `igw serve` runs, keeping each `BlockStored` as the pod sent it (the
    index reads batches lazily and never decodes their token ids)."""

    seen: list[BlockStored]

    def batch(self, pod: str, view: BatchView) -> Any:
        events = msgspec.msgpack.decode(
            view.events, type=list[BlockStored | BlockRemoved | AllBlocksCleared]
        )
        self.seen += [e for e in events if isinstance(e, BlockStored)]
        return super().batch(pod, view)


class Setup:
    def __init__(self, tmp_path: Path, picker_params: dict[str, Any]) -> None:
        self.model = write_model_files(tmp_path / "model")
        self.endpoint = f"ipc://{tmp_path}/pod"
        config = parse_kv_events_config(
            {"enable_kv_cache_events": True, "endpoint": self.endpoint, "topic": "kv-events"}
        )
        self.pod = EmulatedPod(
            "pod-0",
            pod_profile("H100", "llama-3.1-8b", max_loras=2),
            served_model_name="llama",
            adapters=("other-lora", "sql-lora"),
            kv_events=config,
            hash_seed="0",
            tokenizer=str(self.model),
        )
        params = json.loads(json.dumps(picker_params).replace("MODEL", str(self.model)))
        self.scheduler = picker_scheduler(params)
        self.endpoints = [
            Endpoint("pod-0", "127.0.0.1", 1, labels={"igw.dev/kv-events": self.endpoint})
        ]
        self.endpoints[0].metrics = PodMetrics(num_gpu_blocks=26_307)
        self.endpoints[0].stale = False
        self.feed = RecordingFeed(lambda: self.endpoints, lambda: self.scheduler)
        self.seen = self.feed.seen = []
        self.subscriber = KVEventSubscriber(self.feed.publishers, self.feed)

    async def __aenter__(self) -> Setup:
        await self.pod.start()
        self.endpoints[0].port = self.pod.port
        await self.subscriber.start()
        await asyncio.sleep(0.3)  # ZMQ's slow joiner
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.subscriber.stop()
        await self.pod.stop()

    async def serve(self, model: str, content: str, adapter: str | None = None) -> LLMRequest:
        """One request through the scheduler's hooks and the pod, as the picker sees it."""
        body = {"model": model, "messages": [{"role": "user", "content": content}]}
        request = LLMRequest(
            content[-8:], model, prompt_tokens=len(content) // 4, prompt_body=body, adapter=adapter
        )
        target = self.scheduler.schedule(request, self.endpoints)[0]
        self.scheduler.on_picked(request, target, 0.0)
        index, blocks = self.scheduler.kv_index, self.scheduler.kv_index.blocks("pod-0")
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{self.pod.url}/v1/chat/completions", json={**body, "max_tokens": 2}
            ) as r,
        ):
            assert r.status == 200, await r.text()
        self.scheduler.on_first_token(request, target, 0.01, 0.0)
        assert await wait_for(lambda: index.blocks("pod-0") > blocks)
        self.scheduler.on_finished(request, target, 0.0)
        return request


async def test_picker_and_pod_hash_one_models_tokens_alike_adapter_included(
    tmp_path: Path,
) -> None:
    params = {"tokenizer": "MODEL", "models": {"sql-lora": {"tokenizer": "MODEL", "loraId": 2}}}
    async with Setup(tmp_path, params) as setup:
        index = setup.scheduler.kv_index
        index.heard("pod-0")
        for model, adapter, lora_id in (("llama", None, None), ("sql-lora", "sql-lora", 2)):
            first = await setup.serve(model, TEXT + model, adapter)
            body = first.prompt_body
            assert body is not None
            ids = HFTokenizer(setup.model).prompt_ids(body)
            assert ids is not None
            want = vllm_hashes(ids, "0", lora_id)  # vLLM's own definition
            stored = [e for e in setup.seen if e.block_hashes[0] == want[0]]
            assert stored and stored[0].lora_id == lora_id  # `lora_request.id`
            assert stored[0].token_ids == ids[: 16 * len(stored[0].block_hashes)]
            again = LLMRequest("again", model, prompt_tokens=100, prompt_body=body, adapter=adapter)
            setup.scheduler.schedule(again, setup.endpoints)
            assert list(again.kv_hashes or ()) == want
            assert again.prefix_matches == {"pod-0": len(want)}  # every block, found
        assert index.match_counts() == {"pod-0": (2, 0)}


async def test_a_picker_tokenizing_otherwise_reports_the_pod_unmatched(tmp_path: Path) -> None:
    """The picker keeps the emulator's rule while the pod uses the model's files: the
    pod's events never carry the picker's blocks, and /metrics says so per pod."""
    async with Setup(tmp_path, {"tokenizer": "emulator"}) as setup:
        registry = CollectorRegistry()
        registry.register(KVEventsCollector(setup.subscriber, setup.feed))
        setup.scheduler.kv_index.heard("pod-0")
        for i in range(MISMATCH_RUN):
            await setup.serve("llama", f"{TEXT} question number {i}")
        await asyncio.sleep(0)
        clock = setup.scheduler.kv_index.clock
        setup.scheduler.kv_index.clock = lambda: clock() + 10  # past every check's grace
        unmatched = registry.get_sample_value("igw_kv_events_unmatched_total", {"pod": "pod-0"})
        matched = registry.get_sample_value("igw_kv_events_matched_total", {"pod": "pod-0"})
        assert (matched, unmatched) == (0, MISMATCH_RUN)
        assert not setup.scheduler.kv_index.fresh("pod-0")
        ready = registry.get_sample_value("igw_kv_tokenizer_ready", {"tokenizer": "emulator"})
        assert ready == 1.0
