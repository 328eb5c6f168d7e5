"""KV events in the picker: ingest CPU, index memory, added picking latency (a benchmark).

Each of 1 and 2 runs the shipped `KVBlockIndex` ("new": fleet-wide pairs in arrays) and,
side by side in the same run, the dict-per-pod index it replaced ("old", read from git at
`OLD_INDEX_COMMIT`; absent when git or that commit is not at hand).

1. Ingest: CPU (process time) per 1,000 KV events decoded from vLLM's wire format and
   applied to the index, in batches shaped like vLLM's (a `BlockStored` of a
   prompt's new blocks with their token ids, `BlockRemoved` of evicted ones), beside the
   CPU of one scrape parse-free scheduling decision in the same run, so the figure reads
   as "events per pick".
2. Memory: the index's bytes (tracemalloc: what Python allocated, arrays included) per
   cached (block, holder) with `FLEET` pods each at a full cache of an H100 pod of
   Llama-3.1-8B (its `num_gpu_blocks`): every block on one pod ("distinct"), and every
   block on two pods ("shared"); and the most it holds under eviction pressure (a full
   cache plus as many lost blocks, the lost set's bound). Goal: at most 64 B a pair.
3. Picking: time per `Scheduler.schedule` + `on_picked` over 8 pods with the shipped
   `latency` profile, the precise scorer on (hashing the prompt's token ids as vLLM does,
   index full of the pods' real blocks) against the same profile with the approximate
   scorer, side by side in one run; the ratio is the figure.

Run: `.venv/bin/python bench/kv_events.py [--json] [--picks N]`.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import random
import subprocess
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway_src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import decode_events

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.core.scheduling.block_pairs import MASK64
from inference_gateway.core.scheduling.kv_index import KVBlockIndex
from inference_gateway.core.scheduling.plugins.prefix import prompt_block_hashes
from inference_gateway.emulator.profiles import pod_profile
from inference_gateway.protocols.vllm.block_hashing import (
    block_hashes,
    none_hash,
    to_external,
)
from inference_gateway.protocols.vllm.kv_events import (
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    decode_view,
    encode_batch,
)
from inference_gateway.protocols.vllm.prompt_tokens import EmulatorTokenizer
from inference_gateway.sim.policies import approximate_gateway_config

PODS = 8
FLEET = 4  # pods at a full cache in the memory figure
LONG_PICKS = 16  # picks of agentic-size prompts (each hashes ~100k tokens)
MODEL = "llama-3.1-8b"
OLD_INDEX_COMMIT = "26d2618"  # the last commit with the dict-per-pod index
INDEX_PATH = "gateway_src/inference_gateway/core/scheduling/kv_index.py"
#: where that index imported vLLM's KV-event codec from, and where the codec lives now
#: (moved unchanged into protocols/vllm/ by d45ebb8): the old index reads it there
MOVED_CODEC = (
    "inference_gateway.core.scheduling.kv_events",
    "inference_gateway.protocols.vllm.kv_events",
)


def old_index() -> type[Any] | None:
    """The index as it was at `OLD_INDEX_COMMIT`, loaded from git beside the new one."""
    root = Path(__file__).resolve().parents[1]
    try:
        source = subprocess.run(
            ["git", "show", f"{OLD_INDEX_COMMIT}:{INDEX_PATH}"],
            cwd=root, capture_output=True, check=True, text=True, timeout=30,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    source = source.replace(*MOVED_CODEC)
    spec = importlib.util.spec_from_loader("_old_kv_index", loader=None)
    assert spec is not None
    module = ModuleType(spec.name)
    exec(compile(source, f"{OLD_INDEX_COMMIT}:{INDEX_PATH}", "exec"), module.__dict__)
    return module.KVBlockIndex  # type: ignore[no-any-return]


def indexes() -> dict[str, type[Any]]:
    found: dict[str, type[Any]] = {"new": KVBlockIndex}
    old = old_index()
    if old is not None:
        found["old"] = old
    return found


def payloads(n_batches: int, rnd: random.Random) -> tuple[list[bytes], int]:
    """Wire batches of one store (64 blocks, a 1,000-token prompt) and one removal each."""
    out, events, next_hash = [], 0, 1
    for _ in range(n_batches):
        stored = list(range(next_hash, next_hash + 64))
        next_hash += 64
        removed = [rnd.randrange(1, next_hash) for _ in range(16)]
        tokens = [rnd.randrange(1 << 17) for _ in range(64 * 16)]
        batch = KVEventBatch(
            ts=time.time(),
            events=[
                BlockStored(stored, stored[0] - 1 or None, tokens, 16, None, "GPU"),
                BlockRemoved(removed, "GPU"),
            ],
            data_parallel_rank=0,
        )
        out.append(encode_batch(batch))
        events += 2
    return out, events


def decode_payloads(n_batches: int, per_batch: int = 20, held: int = 256) -> list[bytes]:
    """Decode at a full cache, as bench/scale.py's fleet publishes it (`scale.
    decode_events`: one block an event, stores and evictions alternating once a pod
    holds `held` blocks), `per_batch` events a batch, the batches dealt over `PODS` pods."""
    out: list[bytes] = []
    pods: list[deque[int]] = [deque() for _ in range(PODS)]
    made = [0] * PODS
    for seq in range(n_batches):
        p = seq % PODS
        events = decode_events(p, pods[p], made[p], per_batch, held)
        made[p] += per_batch
        out.append(encode_batch(KVEventBatch(ts=time.time(), events=events, data_parallel_rank=0)))
    return out


def _ingest_s(make: type[Any], wire: list[bytes]) -> float:
    index = make()
    for p in range(PODS):
        index.set_capacity(f"pod-{p}", 26_307)  # an H100 pod's blocks, as pods report
    start = time.process_time()
    for seq, payload in enumerate(wire):  # as the live subscriber reads them
        for _ in index.ingest_view(f"pod-{seq % PODS}", decode_view(payload)):
            pass
    return time.process_time() - start


def ingest_cpu(rnd: random.Random, make: type[Any]) -> dict[str, float]:
    """Prefill-shaped batches (64 blocks stored, 16 removed), and decode-shaped ones (one
    block an event: per-event work dominates, as in bench/scale.py's fleet)."""
    wire, events = payloads(2000, random.Random(rnd.random()))
    spent = _ingest_s(make, wire)
    blocks = 2000 * (64 + 16)
    decode = decode_payloads(5000)
    decode_spent = _ingest_s(make, decode)
    return {
        "events": events,
        "cpu_ms_per_1000_events": 1000 * spent / events * 1000,
        "cpu_us_per_block": 1e6 * spent / blocks,
        "decode_cpu_us_per_event": 1e6 * decode_spent / (len(decode) * 20),
    }


def index_memory(make: type[Any]) -> dict[str, float]:
    """Bytes the index holds per cached (block, holder), by tracemalloc. The hashes
    are made as they are fed, as decoding makes them: an index that keeps the int
    objects pays for them, one that copies them into arrays lets them go."""
    blocks = pod_profile("H100", MODEL).num_gpu_blocks

    def distinct(p: int) -> Iterator[int]:  # pod p's blocks (a 64-bit odd-multiplier mix)
        return ((((p << 32) + i) * 0x9E3779B97F4A7C15) & MASK64 for i in range(blocks))

    def refill(p: int) -> Iterator[int]:
        return distinct(p + FLEET)

    figures: dict[str, float] = {"blocks_per_pod": blocks, "pods": FLEET}
    for shape in ("distinct", "shared"):
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        index = make()
        for p in range(FLEET):
            index.set_capacity(f"pod-{p}", blocks)
            # shared: pods 2k and 2k+1 hold the same blocks (two holders a block)
            index.stored(f"pod-{p}", distinct(p - p % 2 if shape == "shared" else p))
        full = tracemalloc.get_traced_memory()[0]
        if shape == "distinct":
            # under pressure: each cache evicted (remembered as lost, up to the bound)
            # and refilled with other blocks: the most the index and its lost set hold
            for p in range(FLEET):
                index.removed(f"pod-{p}", distinct(p))
                index.stored(f"pod-{p}", refill(p))
            evicting = tracemalloc.get_traced_memory()[0]
            assert index.evicted() == FLEET * blocks
            figures["mib_per_pod_evicting"] = (evicting - before) / FLEET / 2**20
        tracemalloc.stop()
        assert all(index.blocks(f"pod-{p}") == blocks for p in range(FLEET))
        figures[f"bytes_per_pair_{shape}"] = (full - before) / (FLEET * blocks)
        del index
    figures["mib_per_pod"] = figures["bytes_per_pair_distinct"] * blocks / 2**20
    return figures


def endpoints() -> list[Endpoint]:
    out = []
    for i in range(PODS):
        e = Endpoint(f"pod-{i}", "10.0.0.1", 8000 + i, labels={"igw.dev/gpu": "H100"}, index=i)
        e.metrics, e.stale = PodMetrics(num_gpu_blocks=26_000, kv_usage=0.5), False
        out.append(e)
    return out


def prompts(rnd: random.Random, n: int) -> list[dict[str, Any]]:
    systems = [f"You are assistant {g}. " * 60 for g in range(16)]
    return [
        {"messages": [{"role": "system", "content": rnd.choice(systems)},
                      {"role": "user", "content": f"question {i} " * rnd.randrange(5, 80)}]}
        for i in range(n)
    ]  # fmt: skip


def long_prompts(rnd: random.Random, n: int) -> list[dict[str, Any]]:
    """Agentic-size prompts (llm-d's sizing workload: ~95k shared system tokens, ~5k
    question tokens): four system prompts, each question its own."""
    systems = [f"Tool {g} documentation, section {{}}. " * 1 for g in range(4)]
    systems = [" ".join(s.format(k) for k in range(12_000)) for s in systems]
    return [
        {"messages": [{"role": "system", "content": rnd.choice(systems)},
                      {"role": "user", "content": f"step {i} " * 2500}]}
        for i in range(n)
    ]  # fmt: skip


def picking(
    picks: int, rnd: random.Random, old: type[Any] | None, long: bool = False
) -> dict[str, Any]:
    """Per pick: the precise scorer over the shipped index, over the old one (when at
    hand: `precise_old`), and the approximate scorer; `long`: agentic-size prompts."""
    bodies = long_prompts(rnd, picks) if long else prompts(rnd, picks)
    warm = 8 if long else 200
    figures: dict[str, Any] = {}
    runs: list[tuple[str, GatewayConfigSpec, type[Any]]] = [
        ("precise", GatewayConfigSpec(), KVBlockIndex),
        ("approximate", approximate_gateway_config(), KVBlockIndex),
    ]
    if old is not None:
        runs.insert(1, ("precise_old", GatewayConfigSpec(), old))
    for name, config, make in runs:
        scheduler = Scheduler(config, seed=1, kv_index=make())
        pods = endpoints()
        tokenizer, root = EmulatorTokenizer(), none_hash("0")
        for i, body in enumerate(bodies[:warm]):  # warm both indexes with the same history
            pod = pods[i % PODS]
            ids = tokenizer.prompt_ids(body) or []
            scheduler.kv_index.heard(pod.name)
            scheduler.kv_index.stored(pod.name, [to_external(h) for h in block_hashes(ids, root)])
        start = time.perf_counter()
        for i, body in enumerate(bodies):
            text = "".join(m["content"] for m in body["messages"])
            request = LLMRequest(
                str(i),
                MODEL,
                prompt_tokens=len(text) // 4,
                prefix_hashes=prompt_block_hashes(MODEL, text),
                prompt_body=body,
            )
            chosen = scheduler.schedule(request, pods)[0]
            scheduler.on_picked(request, chosen, 0.0)
            scheduler.on_finished(request, chosen, 0.0)
        figures[f"{name}_us_per_pick"] = 1e6 * (time.perf_counter() - start) / picks
    figures["precise_over_approximate"] = (
        figures["precise_us_per_pick"] / figures["approximate_us_per_pick"]
    )
    figures["prompt_tokens"] = len("".join(m["content"] for m in bodies[0]["messages"])) // 4
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--picks", type=int, default=3000)
    args = parser.parse_args(argv)
    rnd = random.Random(7)
    made = indexes()
    result: dict[str, Any] = {
        "ingest": {name: ingest_cpu(random.Random(7), make) for name, make in made.items()},
        "memory": {name: index_memory(make) for name, make in made.items()},
        "picking": picking(args.picks, rnd, made.get("old")),
        "picking_long": picking(LONG_PICKS, rnd, made.get("old"), long=True),
    }
    new = result["memory"]["new"]
    result["memory"]["goal_bytes_per_pair"] = 64
    result["memory"]["new_meets_goal"] = new["bytes_per_pair_distinct"] <= 64
    pick_us = result["picking"]["precise_us_per_pick"]
    for figures in result["ingest"].values():
        per_event_us = figures["cpu_ms_per_1000_events"]  # µs per event
        figures["events_per_pick_cpu"] = pick_us / per_event_us
    if args.json:
        print(json.dumps(result))
    else:
        for name in made:
            i, m = result["ingest"][name], result["memory"][name]
            print(
                f"{name} ingest: {i['cpu_ms_per_1000_events']:.1f} ms CPU per 1,000 events "
                f"({i['cpu_us_per_block']:.2f} µs per block; one pick = "
                f"{i['events_per_pick_cpu']:.1f} events); decode-shaped, one block an "
                f"event: {i['decode_cpu_us_per_event']:.2f} µs per event"
            )
            print(
                f"{name} index: {m['bytes_per_pair_distinct']:.0f} B per (block, holder) "
                f"at {m['pods']:.0f} full caches of {m['blocks_per_pod']:,.0f} blocks "
                f"({m['mib_per_pod']:.1f} MiB per pod), {m['bytes_per_pair_shared']:.0f} B "
                f"with two holders a block; {m['mib_per_pod_evicting']:.1f} MiB per pod "
                "with as many lost blocks (under eviction)"
            )
        p = result["picking"]
        lp = result["picking_long"]
        print(f"picking ~{lp['prompt_tokens']:,} tokens: precise {lp['precise_us_per_pick']:.0f}"
              f" µs (over the old index {lp.get('precise_old_us_per_pick', 0):.0f} µs), "
              f"approximate {lp['approximate_us_per_pick']:.0f} µs per pick")  # fmt: skip
        if "precise_old_us_per_pick" in p:
            print(f"picking: precise over the old index {p['precise_old_us_per_pick']:.0f} µs")
        print(f"picking: precise {p['precise_us_per_pick']:.0f} µs, approximate "
              f"{p['approximate_us_per_pick']:.0f} µs per pick "
              f"(x{p['precise_over_approximate']:.2f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
