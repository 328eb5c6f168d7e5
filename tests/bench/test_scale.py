"""bench/scale.py runs end to end on a tiny fleet: the synthetic pods' pages change on
every scrape, their KV events are vLLM's wire format, and one point (one replica, or
two sharing a real redis-server) reports every figure the sizing guide reads."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import zmq
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import scale

from inference_gateway.core.endpoints.adapters import (
    FILTERED_NAMES,
    FILTERED_PATHS,
    parse_metrics,
    routing_families_present,
)
from inference_gateway.protocols.vllm.kv_events import BlockRemoved, BlockStored, decode_batch


def test_the_fleet_serves_a_real_size_page_that_changes_and_its_pools_model() -> None:
    with scale.Fleet(3, 2) as fleet:
        base = f"http://127.0.0.1:{fleet.ports[1]}"
        pages = [urllib.request.urlopen(f"{base}/metrics", timeout=10).read() for _ in range(2)]
        models = urllib.request.urlopen(f"{base}/v1/models", timeout=10).read()
    assert len(pages[0]) > 40_000 and pages[0] != pages[1]  # no unchanged-page shortcut
    assert b"vllm:num_requests_waiting" in pages[0] and b'"model-1"' in models
    assert fleet.addresses == []  # no events asked: no publishers


def test_the_fleet_serves_the_filtered_page_the_picker_asks_vllm_for() -> None:
    """`/metrics/?name[]=…` is the restricted registry's rendering of the same page (six
    gauges, ~1 KB), changing on every scrape too, and parses to the whole page's figures
    but the moving KV gauge."""
    with scale.Fleet(2, 1) as fleet:
        base = f"http://127.0.0.1:{fleet.ports[0]}"
        filtered = [
            urllib.request.urlopen(base + FILTERED_PATHS["vllm"], timeout=10).read().decode()
            for _ in range(2)
        ]
        whole = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
    assert filtered[0] != filtered[1] and len(filtered[0]) < 2_000
    assert routing_families_present(filtered[0], "vllm")
    families = {f.name for f in text_string_to_metric_families(filtered[0])}
    assert families <= set(FILTERED_NAMES["vllm"]) and len(families) >= 4
    seen, full = parse_metrics(filtered[0]), parse_metrics(whole)
    assert (seen.waiting, seen.running, seen.num_gpu_blocks) == (
        full.waiting,
        full.running,
        full.num_gpu_blocks,
    )


def test_each_pod_publishes_kv_events_as_vllm_does_storing_then_evicting() -> None:
    """[topic, 8-byte sequence, msgpack batch], one block an event, rising sequences;
    stores only until the pod holds `held` blocks, then one eviction per store."""
    context = zmq.Context()
    try:
        with scale.Fleet(2, 1, per_s=40, batch_hz=10, held=6) as fleet:
            sub = context.socket(zmq.SUB)
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            sub.connect(fleet.addresses[1])
            messages = []
            for _ in range(6):  # bounded: each wait at most 5 s
                assert sub.poll(5000), "no KV events from the pod"
                messages.append(sub.recv_multipart())
            sub.close()
    finally:
        context.term()
    seqs = [int.from_bytes(m[1], "big") for m in messages]
    assert all(len(m) == 3 and m[0] == b"" and len(m[1]) == 8 for m in messages)
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    events = [e for m in messages for e in decode_batch(m[2]).events]
    assert all(len(e.block_hashes) == 1 for e in events)
    assert len(events) == 4 * len(messages)  # 40 a second in 10 batches
    stored = [e for e in events if isinstance(e, BlockStored)]
    removed = [e.block_hashes[0] for e in events if isinstance(e, BlockRemoved)]
    assert stored[0].block_size == 16 and len(stored[0].token_ids) == 16
    assert removed and set(removed) <= {e.block_hashes[0] for e in stored} | set(removed)


def test_one_point_reports_the_pickers_figures() -> None:
    figures = scale.run_point(4, 2, 20, 1.0, None)
    assert figures["ready_pods"] == 4 and figures["failed_decisions"] == 0
    assert figures["decisions"] >= 10 and figures["decision_p99_ms"] > 0
    # a request waits from when it was due: its decision and whatever the loop ran first
    assert figures["decision_wait_p50_ms"] >= figures["decision_p50_ms"]
    assert figures["decision_wait_p99_ms"] >= figures["decision_p99_ms"]
    assert figures["gc_full_per_s"] >= 0 and 0 <= figures["gc_share"] < 1
    assert figures["gc_pause_max_ms"] >= 0
    assert figures["picker_cores"] > 0 and figures["rss_mib"] > 20
    assert 0 < figures["view_age_max_ms"] < 2000  # views are fresh: the pods answer
    assert figures["fleet_cores"] >= 0 and figures["rounds_per_s"] > 0
    assert figures["kv_events_per_s"] == 0 and figures["kv_bytes_per_pair"] is None


def test_two_replicas_share_the_store_and_ingest_every_pods_kv_events() -> None:
    events = {"per_s": 50.0, "batch_hz": 10.0, "held": 16}
    figures = scale.run_point(4, 2, 40, 1.5, None, replicas=2, events=events)
    each = figures["per_replica"]
    assert figures["replicas"] == 2 and len(each) == 2 and figures["warm"]
    assert all(r["peers"] == 1 and r["decisions"] >= 20 for r in each)
    assert figures["decisions"] == sum(r["decisions"] for r in each)
    assert figures["failed_decisions"] == 0 and figures["ready_pods"] == 4
    assert figures["picker_cores"] == round(sum(r["picker_cores"] for r in each), 3)
    assert 0 < figures["peer_view_age_max_ms"] < 1000  # the 5 ms exchange runs
    # every replica hears every pod: 4 pods x 50 events a second, a share dropped at most
    assert all(100 <= r["kv_events_per_s"] <= 260 for r in each)
    assert all(r["kv_pairs"] >= 4 * 16 for r in each)  # each pod fills to `held`
    assert 12 <= figures["kv_bytes_per_pair"] < 2000  # a tiny index: fixed arrays dominate
    assert figures["fleet_cores"] > 0 and figures["store_cores"] > 0


def test_the_pacer_issues_each_request_at_or_after_its_due_time_from_another_process() -> None:
    """Requests arrive on a pipe another process writes at their due times (the driver's
    wait no longer holds libuv's millisecond timers): all of them, none before its time,
    and in the client's process, not the picker's."""
    import asyncio
    import os
    import time

    async def run() -> tuple[list[float], float, int]:
        arrivals: list[float] = []
        wall0 = time.monotonic() + scale.PACER_START_S
        pacer = scale.Pacer(200.0, 0.5, wall0, lambda: arrivals.append(time.monotonic()))
        pid = pacer.process.pid
        await pacer.ended()
        return arrivals, wall0, pid

    arrivals, wall0, pid = asyncio.run(run())
    assert pid != os.getpid()
    assert len(arrivals) == 100
    assert all(at >= wall0 + n / 200.0 for n, at in enumerate(arrivals))
