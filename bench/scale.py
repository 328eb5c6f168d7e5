"""Scale: what the picker costs as the fleet grows, one replica or several (a benchmark).

A synthetic fleet of N pods (32, 128, 512, 1,024 by default) serves real-size vLLM
`/metrics` pages (vLLM V1's families with their histograms, ~48 KB, `scrape_cost.
vllm_page`), and the ~1 KB of it the picker asks vLLM for (`/metrics/?name[]=…`, as
prometheus_client renders it: `scrape_cost.Pages`), both changing on every scrape, from
ONE process: a raw asyncio protocol on N
loopback ports, each port one pod of pool `pool-<i % P>` serving model `model-<pool>`.
Each pod also publishes vLLM KV events on its own ZMQ PUB socket (the picker finds it by
the pod's `igw.dev/kv-events` label and subscribes one SUB socket a pod, as in
production), `--kv-events-per-s` a pod in `--kv-batch-hz` batches a second, each batch
one `[topic, seq, msgpack]` message as vLLM's `ZmqEventPublisher` sends it
(`protocols/vllm/kv_events`): one block an event, stores until the pod holds
`--kv-held` blocks, then a `BlockRemoved` for every `BlockStored` (decode at a full
cache). The default, 200 events a pod-second, is a pod decoding 1,600 tokens a second
(32 streams at 50 tokens/s, a moderately loaded H100 serving an 8B model): it fills
1,600 / 16 = 100 blocks a second and, its cache full, evicts as many, and vLLM emits
one event per block in decode (a `BlockStored` per request that filled a block in a
step, a `BlockRemoved` per evicted block). vLLM sends one message per engine step that
changed the cache (20-50 a second when busy); 10 batches a second is fewer, larger
messages, so the picker's per-message cost is understated by that factor (the ingest
figure below says it per batch). The fleet's CPU over the window is measured beside
the picker's (`fleet_cores`, µs per page served; events on against off at the same
point in `kv_ingest`), which is how to check the fleet costs little next to the
figures it drives.

The picker is the real one (`build_core` + `PickerServer`: endpoint store, HTTP scrape
client, KV-event subscriber, director and scheduler with the default profile's precise
prefix scorer) in its own process, with P pools and P models in one config. A point
may run R replicas (own processes) sharing the dispatch view through a real
`redis-server` (`shared_store.local_server.LocalRedis`; each replica's
`shared_store.dispatch.DispatchShare`, as `igw picker --store`), each scraping every pod
and subscribing to every pod's events itself, as deployed. Every replica warms (every
pod routable, heard from, every peer seen), then all measure the same window.
Decisions go through the ext_proc exchange the gRPC server feeds (the protobuf messages
Envoy sends, in process: the Envoy path is measured by `envoy_path.py`) at a fixed
total rate spread over the models and split evenly over the replicas; each request is
answered at once so nothing piles up. Per point (summed over replicas where marked Σ,
the worst replica's otherwise; `per_replica` has each one's):

* `picker_cores` (Σ): the picker processes' CPU over the window / wall time (scraping,
  KV events, decisions, the event loop; the request driver's own protobuf building too);
* `rss_mib` (Σ): resident memory at the end of the window;
* `view_age_p50_ms` / `view_age_max_ms`: every 20 ms, the oldest view of a routable pod
  (`EndpointStore.max_view_age_s`, the `igw_scrape_view_age_max_seconds` gauge); the
  issue's must-hold is max <= 100 ms; `peer_view_age_*_ms` (replicas): the age of the
  other replicas' dispatch counts (time since the last exchange with the store);
* `decision_p50_ms` / `decision_p99_ms`: over every replica's decisions, wall time of
  the request-body step (admission, scheduling, the reply message);
* `decision_wait_p50_ms` / `decision_wait_p99_ms`: from each request's due time (the
  driver's schedule) to its decision: what a client waits on, the loop's backlog and
  collector pauses included, which the step's own time cannot show. Requests arrive as
  a client's do, on a descriptor: another process (`Pacer`) writes a byte a request
  at its due time to a pipe the picker's loop reads, so the loop sees each the moment
  it is free, not at the next millisecond of libuv's timers (which an in-process
  `asyncio.sleep` driver added to every wait);
* `gc_full_per_s`, `gc_pause_max_ms`, `gc_share`: the cyclic collector's full
  collections a second, its longest pause of any generation and its share of the
  window (`gc.callbacks`). The picker sets the collector up once it serves, as `igw
  picker` does (`cli/process.py` `settle_collector`: its startup heap frozen, young
  collections every 10,000 allocations); `--stock-collector` runs it with CPython's
  settings, as it ran before, for a side-by-side;
* the picker asks the pods for the families routing reads (`/metrics/?name[]=…`, as it
  asks vLLM); `--whole-pages` has it read every page whole, as it does a pod that does
  not filter (SGLang, vLLM with several API servers), for a side-by-side;
* a scrape round's fetches are spread over most of the interval (`EndpointStore.run`);
  `--burst-rounds` starts them together, as before, for a side-by-side;
* `interval_ms`: the scrape interval the store settled on under its CPU budget
  (`--scrape-cores`, default the shipped quarter of a core);
* `kv_events_per_s` (Σ): events applied to the replicas' KV indexes; `kv_kept_share`:
  that over what the fleet published to them (below 1: the picker fell behind and its
  SUB sockets dropped at their high-water mark); `kv_pairs`, `kv_lost`, `kv_index_mib`
  and `kv_bytes_per_pair`: one replica's index as it reports itself
  (`KVBlockIndex.nbytes`, every array it holds, per (block, holder) pair it keeps, the
  lost blocks' one each; a small index is mostly its fixed arrays: the full-cache figure
  is `kv_events.py`'s);
* `fleet_cores`, `store_cores`: the fleet's and redis-server's CPU over the window.

`kv_ingest`, for each point whose twin without events ran too (`.../0`): the extra
picker CPU per 1,000 events ingested and per batch (socket, decode, index), and the
fleet's cores with and without events. Points last seconds: the machine is shared (the
1-minute load average is reported), the figures indicative.

Run: `.venv/bin/python bench/scale.py [--json] [--seconds S]
[--points pods/pools/rate[/replicas[/kv-events-per-s]],...] [--kv-events-per-s N]
[--stock-collector] [--whole-pages] [--burst-rounds]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "gateway_src"))

from scrape_cost import Pages  # noqa: E402

from inference_gateway.core.scheduling.block_pairs import MASK64  # noqa: E402
from inference_gateway.protocols.vllm.kv_events import (  # noqa: E402
    BlockRemoved,
    BlockStored,
)

# pods/pools/rate[/replicas[/KV events a pod-second]]: one replica over 32-1,024 pods;
# KV events off and on (the ingest pairs); 1, 2 and 4 replicas at 128 pods with events,
# and at 1,024 without them: one replica cannot keep up with 1,024 pods' events on this
# 2-core machine, and two or four then starve each other's scrapes (docs/sizing.md)
DEFAULT_POINTS = (
    "32/1/100,128/1/100,512/1/100,1024/1/100,1024/10/500,1024/100/500"
    ",128/1/0/1/0,128/1/0,1024/1/0/1/0,1024/1/0"
    ",128/10/500,128/10/500/2,128/10/500/4,1024/10/500/1/0,1024/10/500/2/0,1024/10/500/4/0"
)
KV_EVENTS_PER_S = 200.0  # per pod (see the module docstring)
KV_BATCH_HZ = 10.0
KV_HELD = 256
SAMPLE_S = 0.02  # how often the view age is sampled
PACER_START_S = 1.0  # the pacer's first request is due this long after it is started


# ---------------------------------------------------------------- the fleet process


def _serve_fleet(ports_path: str, count: int, pools: int, events: dict[str, float]) -> None:
    """Child: `count` pods on loopback, pod i of pool i % pools, each with a KV-event PUB
    socket publishing `events["per_s"]` events a second (none at 0); writes the ports."""
    import uvloop
    import zmq

    pages = Pages()

    class Pod(asyncio.Protocol):
        def __init__(self, model: bytes) -> None:
            self.model = model
            self.buffer = b""

        def connection_made(self, transport: Any) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
                request, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
                line = request.split(b"\r\n", 1)[0]
                body = self.model if b" /v1/models " in line else pages.body(line)
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ports = []
        for i in range(count):
            listing = {"object": "list", "data": [{"id": f"model-{i % pools}"}]}
            model = json.dumps(listing).encode()
            server = await loop.create_server(lambda m=model: Pod(m), "127.0.0.1", 0)
            ports.append(server.sockets[0].getsockname()[1])
        publishers: list[zmq.Socket[bytes]] = []
        publishing = None
        if events["per_s"] > 0:
            context = zmq.Context()
            context.set(zmq.MAX_SOCKETS, count + 64)  # libzmq's default of 1,023 is short
            for _ in range(count):
                sock = context.socket(zmq.PUB)
                sock.setsockopt(zmq.LINGER, 0)
                sock.bind("tcp://127.0.0.1:*")
                publishers.append(sock)
            publishing = loop.create_task(_publish(publishers, events))
        addresses = [sock.getsockopt_string(zmq.LAST_ENDPOINT) for sock in publishers]
        Path(ports_path).write_text(json.dumps({"ports": ports, "events": addresses}))
        # the publisher never returns: a failure in it ends the fleet, as it should
        await (publishing if publishing is not None else asyncio.Event().wait())

    uvloop.run(main())


async def _publish(socks: list[Any], events: dict[str, float]) -> None:
    """Every pod's KV events, `per_s` a second in `batch_hz` batches a second each, as
    vLLM's `ZmqEventPublisher` sends them (`[topic "", seq, msgpack batch]`), in the
    shape of decode at a full cache (`decode_events`).
    Each pod publishes on its own phase with its own sequence numbers, as engines on their
    own clocks do: all 1,024 pods' batches in the same instant (as this fleet sent them
    until 2026-12-07) held the picker's loop ~100 ms at once, once a second at one event
    a pod-second, and no real fleet steps in lockstep."""
    import zmq

    from inference_gateway.protocols.vllm.kv_events import KVEventBatch, encode_batch

    loop = asyncio.get_running_loop()
    per_batch, period = events["per_s"] / events["batch_hz"], 1 / events["batch_hz"]
    keep = events["held"]
    held: list[deque[int]] = [deque() for _ in socks]
    made = [0] * len(socks)
    # each pod's engine steps on its own clock: its batches owe events from its own phase
    # (at under one event a batch, pods take turns), its sequence numbers are its own, and
    # a period's batches go out in slices spread over it, not all at the one instant
    owed = [i / len(socks) for i in range(len(socks))]
    sent = [0] * len(socks)
    tick = loop.time()
    while True:
        now = time.time()
        for i, sock in enumerate(socks):
            if i and i % PUBLISH_SLICE == 0:
                await asyncio.sleep(max(0.0, tick + period * i / len(socks) - loop.time()))
            owed[i] += per_batch
            n = int(owed[i])
            owed[i] -= n
            batch = decode_events(i, held[i], made[i], n, keep)
            if batch:
                payload = encode_batch(KVEventBatch(ts=now, events=batch, data_parallel_rank=0))
                made[i] += len(batch)
                seq = sent[i].to_bytes(8, "big")  # one a batch, as vLLM's
                sent[i] += 1
                with contextlib.suppress(zmq.Again):  # PUB drops at its high-water mark
                    sock.send_multipart((b"", seq, payload), zmq.NOBLOCK)
        tick += period
        await asyncio.sleep(max(0.0, tick - loop.time()))


PUBLISH_SLICE = 32  # pods whose KV-event batches go out together (`_publish`)
DECODE_TOKENS = list(range(16))  # the index reads no token ids of a pod that matches


def decode_events(
    pod: int, held: deque[int], made: int, n: int, keep: int
) -> list[BlockStored | BlockRemoved]:
    """Pod `pod`'s next `n` events in decode at a full cache, its `made` before them:
    a `BlockStored` of the one block a request just filled (its parent the pod's last
    block, hashes distinct per pod) and a `BlockRemoved` of the one evicted for it
    (vLLM's `BlockPool` emits one per evicted block), alternating once the pod holds
    `keep` blocks (`held`, oldest first; stores only until then). The fleet publishes
    this, and bench/kv_events.py times its ingest."""
    batch: list[BlockStored | BlockRemoved] = []
    for k in range(made, made + n):
        if len(held) >= keep and k % 2:
            batch.append(BlockRemoved([held.popleft()], "GPU"))
        else:
            h = (((pod + 1) << 40) + k) * 0x9E3779B97F4A7C15 & MASK64
            parent = held[-1] if held else None
            batch.append(BlockStored([h], parent, DECODE_TOKENS, 16, None, "GPU"))
            held.append(h)
    return batch


def _cpu_s(pid: int) -> float:
    """A process's CPU seconds so far, its live threads' summed (libzmq's I/O threads
    included), from /proc/<pid>/task/*/schedstat (Linux): nanoseconds, where /proc's
    `stat` counts 10 ms ticks, fewer than a tiny fleet serving ~1 KB pages spent in a
    test's 1.5 s window."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread ended
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


class Fleet:
    """The fleet process; `ports` (HTTP) and `events` (KV-event PUB endpoints, none
    when `events_per_s` is 0) once it listens."""

    def __init__(
        self,
        count: int,
        pools: int,
        per_s: float = 0.0,
        batch_hz: float = KV_BATCH_HZ,
        held: int = KV_HELD,
    ) -> None:
        self.count, self.pools = count, pools
        self.events = {"per_s": per_s, "batch_hz": batch_hz, "held": held}

    def __enter__(self) -> Fleet:
        fd, self.path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        os.unlink(self.path)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--fleet-child", self.path,
             "--count", str(self.count), "--pools", str(self.pools),
             "--fleet-events", json.dumps(self.events)]
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(self.path) and os.path.getsize(self.path) > 0:
                listening = json.loads(Path(self.path).read_text())
                self.ports: list[int] = listening["ports"]
                self.addresses: list[str] = listening["events"]
                return self
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError("the fleet process did not start")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            os.unlink(self.path)


# ---------------------------------------------------------------- the picker process


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _run_picker(point: dict[str, Any]) -> dict[str, Any]:
    """Child: one picker replica over the fleet, driven at `rate` decisions a second.
    It says `ready` on stdout once warm and starts its window at the `go` line on stdin,
    so replicas measure the same seconds."""
    import orjson
    import uvloop
    from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

    from inference_gateway.assembly.core import build_core
    from inference_gateway.assembly.picker import PickerServer
    from inference_gateway.cli.process import settle_collector
    from inference_gateway.config.spec import GatewayConfigSpec
    from inference_gateway.core.scheduling.kv_index import KVBlockIndex
    from inference_gateway.core.scheduling.types import Endpoint
    from inference_gateway.frontends.extproc.picker import Exchange, PickerOptions
    from inference_gateway.frontends.extproc.wire import header_map
    from inference_gateway.shared_store.dispatch import for_director

    ports, pools, rate, addresses = point["ports"], point["pools"], point["rate"], point["events"]
    if point["whole_pages"]:  # as from pods that do not filter their page
        from inference_gateway.core.endpoints import store as store_module

        store_module.FILTERED_PATHS = {}  # type: ignore[attr-defined]
    endpoints = [
        Endpoint(
            name=f"pod-{i}",
            address="127.0.0.1",
            port=p,
            pool=f"pool-{i % pools}",
            # the precise scorer's label: where the pod publishes (else the default port)
            labels={"igw.dev/kv-events": addresses[i]} if addresses else {},
        )
        for i, p in enumerate(ports)
    ]
    config = GatewayConfigSpec.model_validate(
        {
            "pools": [{"name": f"pool-{p}"} for p in range(pools)],
            "models": [{"name": f"model-{p}", "pool": f"pool-{p}"} for p in range(pools)],
        }
    )

    def message(**kind: Any) -> pb.ProcessingRequest:
        return pb.ProcessingRequest(**kind)

    heads = message(
        request_headers=pb.HttpHeaders(
            headers=header_map({":path": "/v1/completions", ":method": "POST"})
        )
    )
    bodies = [
        message(
            request_body=pb.HttpBody(
                body=orjson.dumps({"model": f"model-{p}", "prompt": "hi " * 200, "max_tokens": 5}),
                end_of_stream=True,
            )
        )
        for p in range(pools)
    ]
    answer_heads = message(
        response_headers=pb.HttpHeaders(
            headers=header_map({":status": "200", "content-type": "application/json"})
        )
    )
    answer = message(
        response_body=pb.HttpBody(body=b'{"usage": {"completion_tokens": 5}}', end_of_stream=True)
    )

    async def main() -> dict[str, Any]:
        core = build_core(endpoints, config)
        # the shared dispatch view, as `igw picker --store` adds it
        share = for_director(point["store"], core.director) if point["store"] else None
        picker = PickerServer(
            core,
            host="127.0.0.1",
            grpc_port=0,
            metrics_port=None,
            collaborators=[share] if share else [],
        )
        store, subscriber = picker.store, picker.collaborators[-1]
        if point["scrape_cores"] is not None:
            store.max_cpu_fraction = point["scrape_cores"]
        if point["burst_rounds"]:
            store.spread = 0.0  # every round's scrapes start together, as before
        await picker.start()
        if point["settle_collector"]:
            settle_collector()  # as `igw picker` does once it serves
        loop = asyncio.get_running_loop()
        index = picker.director.scheduler.kv_index
        assert isinstance(index, KVBlockIndex)

        def warm() -> bool:  # every pod routable, heard from, and every peer seen
            return (
                len(store.ready()) == len(endpoints)
                and (not addresses or all(index.heard_from(e.name) for e in endpoints))
                and (share is None or share.peers == point["replicas"] - 1)
            )

        await asyncio.sleep(1.5)  # connections warm, the interval adapted
        deadline = loop.time() + 60
        while not warm() and loop.time() < deadline:
            await asyncio.sleep(0.1)
        warmed = warm()  # (or 60 s went by: the point says so)
        print("ready", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)  # the parent's `go`
        ages: list[float] = []
        peer_ages: list[float] = []
        peers: list[float] = []
        decisions: list[float] = []
        waits: list[float] = []  # from each request's due time: what a client waits on
        pauses: list[tuple[int, float]] = []  # (generation, seconds) of each collection
        collecting: list[float] = []

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                collecting[:] = [time.perf_counter()]
            elif collecting:
                pauses.append((info["generation"], time.perf_counter() - collecting[0]))

        failed = 0

        async def sample() -> None:
            while True:
                ages.append(store.max_view_age_s())
                if share is not None:
                    peer_ages.append(time.monotonic() - share.exchanged)
                    peers.append(share.peers)
                await asyncio.sleep(SAMPLE_S)

        async def decide(n: int) -> None:
            nonlocal failed
            exchange = Exchange(picker.director, PickerOptions(), loop.time)
            await exchange.handle(heads)
            started = time.perf_counter()
            await exchange.handle(bodies[n % pools])
            decisions.append(time.perf_counter() - started)
            waits.append(time.monotonic() - (wall0 + n / rate))
            if exchange.life is None:
                failed += 1
                return
            await exchange.handle(answer_heads)
            await exchange.handle(answer)

        # the decisions under way: a finished one is let go at once, as the picker lets
        # an exchange go, so the driver adds no objects of its own to the collector's
        # young generation (4,600 tasks and their contexts in 12 s, kept, were a third
        # of what each young collection walked)
        running: set[asyncio.Task[None]] = set()
        issued = 0

        def arrived() -> None:
            nonlocal issued
            task = loop.create_task(decide(issued))
            issued += 1
            running.add(task)
            task.add_done_callback(running.discard)

        wall0 = time.monotonic() + PACER_START_S
        pacer = Pacer(rate, point["seconds"], wall0, arrived) if rate else None
        await asyncio.sleep(max(0.0, wall0 - time.monotonic()))
        sampler = loop.create_task(sample())
        gc.callbacks.append(on_gc)
        cpu0 = time.process_time()
        scrapes0, events0 = store.scrapes, index.events
        if pacer is not None:
            await pacer.ended()
        else:
            await asyncio.sleep(point["seconds"])
        await asyncio.gather(*running)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        gc.callbacks.remove(on_gc)
        full = [d for generation, d in pauses if generation == 2]
        sampler.cancel()
        rounds, events = store.scrapes - scrapes0, index.events - events0
        figures = {
            "picker_cores": round(cpu / wall, 3),
            "rss_mib": round(_rss_mib(), 1),
            "view_age_p50_ms": round(_quantile(ages, 0.5) * 1000, 1),
            "view_age_max_ms": round(max(ages, default=0.0) * 1000, 1),
            "decision_p50_ms": round(_quantile(decisions, 0.5) * 1000, 3),
            "decision_p99_ms": round(_quantile(decisions, 0.99) * 1000, 3),
            "decisions": len(decisions),
            "gc_full_per_s": round(len(full) / wall, 2),
            "gc_pause_max_ms": round(max((d for _, d in pauses), default=0.0) * 1000, 1),
            "gc_share": round(sum(d for _, d in pauses) / wall, 3),
            "failed_decisions": failed,
            "rounds_per_s": round(rounds / wall, 2),
            "interval_ms": round(store.current_interval_s * 1000, 1),
            "ready_pods": len(store.ready()),
            "warm": warmed,
            "kv_events_per_s": round(events / wall),
            "kv_pairs": index.pairs(),
            "kv_lost": index.evicted(),
            "kv_index_mib": round(index.nbytes() / 2**20, 2),
            "kv_bytes_per_pair": round(index.nbytes() / index.pairs(), 1)
            if index.pairs()
            else None,
            "kv_gaps": subscriber.gaps,
            "decision_s": decisions,  # merged over replicas by the parent, then dropped
            "wait_s": waits,  # likewise
        }
        if share is not None:
            figures["peers"] = _quantile(peers, 0.5)  # during the window (not as others end)
            figures["peer_view_age_p50_ms"] = round(_quantile(peer_ages, 0.5) * 1000, 1)
            figures["peer_view_age_max_ms"] = round(max(peer_ages, default=0.0) * 1000, 1)
        await picker.stop(grace_s=0)
        return figures

    return uvloop.run(main())


PACER = """
import os, sys, time
rate, seconds, wall0 = map(float, sys.argv[1:])
for n in range(round(rate * seconds)):
    due = wall0 + n / rate - time.monotonic()
    if due > 0:
        time.sleep(due)
    os.write(1, b"x")
"""


class Pacer:
    """Requests due at `wall0 + n / rate` for `seconds`, each a byte another process
    writes to a pipe at its due time (`time.sleep`: tens of microseconds late, where
    an in-process `asyncio.sleep` driver is up to a millisecond late, libuv's timers
    being in milliseconds); `arrived()` is called once a byte, when the loop reads it,
    as a picker's loop reads a client's request off its socket. The pacer's CPU is the
    client's, not the picker's. `time.monotonic` is one clock for both processes."""

    def __init__(
        self, rate: float, seconds: float, wall0: float, arrived: Callable[[], None]
    ) -> None:
        self.arrived = arrived
        self.process = subprocess.Popen(
            [sys.executable, "-c", PACER, repr(rate), repr(seconds), repr(wall0)],
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        self.fd = self.process.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.loop = asyncio.get_running_loop()
        self._ended = self.loop.create_future()
        self.loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        if not data:  # the pacer wrote its last and exited (`ended` stops the reading)
            if not self._ended.done():
                self._ended.set_result(None)
            return
        for _ in range(len(data)):
            self.arrived()

    async def ended(self) -> None:
        try:
            await self._ended
        finally:
            self.loop.remove_reader(self.fd)
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout=10)
            assert self.process.stdout is not None
            self.process.stdout.close()


def _replicas(
    point: dict[str, Any], replicas: int, timeout_s: float, go: Callable[[], None]
) -> list[dict[str, Any]]:
    """Run `replicas` picker children over one window (ready, then `go()` here and `go`
    to all at once); returns each one's figures. Called with the fleet (and store) up."""
    children = []
    with contextlib.ExitStack() as stack:
        for r in range(replicas):
            err = stack.enter_context(tempfile.TemporaryFile())
            # the figures (hundreds of KB with every wait) come back in a file: read off
            # the child's stdout they came back cut at 128 KiB in 3 of about 60 runs
            figures = stack.enter_context(tempfile.NamedTemporaryFile(suffix=".json"))
            child = subprocess.Popen(
                [sys.executable, __file__, "--picker-child"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
            )  # fmt: skip
            stack.callback(_end, child)
            assert child.stdin is not None
            child.stdin.write(json.dumps({**point, "replica": r, "figures": figures.name}) + "\n")
            child.stdin.flush()
            children.append((child, err, figures.name))
        deadline = time.monotonic() + timeout_s
        for child, err, _ in children:
            assert child.stdout is not None
            wait = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([child.stdout], [], [], wait)
            if not ready or child.stdout.readline().strip() != "ready":
                err.seek(0)
                raise RuntimeError(f"picker child not ready: {err.read()[-2000:].decode()}")
        go()
        for child, _, _ in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        out = []
        for child, err, path in children:
            assert child.stdout is not None
            try:
                line = child.stdout.readline()
                child.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                line = ""
            if child.returncode != 0 or line.strip() != "done":
                err.seek(0)
                raise RuntimeError(f"picker child failed: {err.read()[-2000:].decode()}")
            out.append(json.loads(Path(path).read_text()))
        return out


def _end(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.kill()
        child.wait(timeout=10)


SUMMED = ("picker_cores", "rss_mib", "decisions", "failed_decisions", "kv_events_per_s")
WORST = ("view_age_p50_ms", "view_age_max_ms", "interval_ms", "kv_bytes_per_pair",
         "peer_view_age_p50_ms", "peer_view_age_max_ms", "kv_index_mib", "gc_full_per_s",
         "gc_pause_max_ms", "gc_share")  # fmt: skip


def run_point(
    pods: int,
    pools: int,
    rate: float,
    seconds: float,
    cores: float | None,
    replicas: int = 1,
    events: dict[str, float] | None = None,
    settle: bool = True,
    whole_pages: bool = False,
    burst_rounds: bool = False,
) -> Any:
    """One point: the fleet (publishing `events`, see `Fleet`), `replicas` pickers at
    `rate / replicas` decisions a second each, sharing a real redis-server when more
    than one. Summed over replicas: cores, RSS, decisions, events ingested; the worst
    replica's view ages; decision quantiles over every replica's decisions."""
    events = events or {"per_s": 0.0}
    with contextlib.ExitStack() as stack:
        fleet = stack.enter_context(Fleet(pods, pools, **events))
        redis = None
        if replicas > 1:
            from inference_gateway.shared_store.local_server import LocalRedis

            redis = stack.enter_context(LocalRedis())
        cpu0: dict[str, float] = {}

        def go() -> None:
            cpu0["fleet"] = _cpu_s(fleet.proc.pid)
            cpu0["store"] = _cpu_s(redis.process.pid) if redis and redis.process else 0.0
            cpu0["wall"] = time.monotonic()

        point = {"ports": fleet.ports, "events": fleet.addresses, "pools": pools,
                 "rate": rate / replicas, "seconds": seconds, "scrape_cores": cores,
                 "store": redis.url if redis else None, "replicas": replicas,
                 "settle_collector": settle, "whole_pages": whole_pages,
                 "burst_rounds": burst_rounds}  # fmt: skip
        each = _replicas(point, replicas, seconds + 120 + 30 * replicas, go)
        wall = time.monotonic() - cpu0["wall"]
        fleet_cpu = _cpu_s(fleet.proc.pid) - cpu0["fleet"]
        store_cpu = _cpu_s(redis.process.pid) - cpu0["store"] if redis and redis.process else 0.0
    decisions = sorted(d for r in each for d in r.pop("decision_s"))
    waits = sorted(d for r in each for d in r.pop("wait_s"))
    figures: dict[str, Any] = {k: v for k, v in each[0].items() if k not in SUMMED + WORST}
    for key in SUMMED:
        figures[key] = round(sum(r[key] for r in each), 3)
    for key in WORST:
        if key in each[0]:
            values = [r[key] for r in each if r[key] is not None]
            figures[key] = max(values) if values else None
    figures["decision_p50_ms"] = round(_quantile(decisions, 0.5) * 1000, 3)
    figures["decision_p99_ms"] = round(_quantile(decisions, 0.99) * 1000, 3)
    figures["decision_wait_p50_ms"] = round(_quantile(waits, 0.5) * 1000, 3)
    figures["decision_wait_p99_ms"] = round(_quantile(waits, 0.99) * 1000, 3)
    figures["replicas"] = replicas
    figures["kv_events_per_pod_s"] = per_s = events["per_s"]
    figures["kv_events_per_batch"] = per_s / events["batch_hz"] if per_s else 0.0
    # what the replicas ingested of what the fleet published to each (short of 1: the
    # SUB sockets dropped at their high-water mark, the picker behind)
    figures["kv_kept_share"] = (
        round(figures["kv_events_per_s"] / (pods * per_s * replicas), 3) if per_s else None
    )
    figures["warm"] = all(r["warm"] for r in each)
    scrapes = sum(r["rounds_per_s"] for r in each) * pods * seconds
    figures["fleet_cores"] = round(fleet_cpu / wall, 3)  # over the window
    figures["fleet_us_per_page"] = round(fleet_cpu / max(scrapes, 1) * 1e6, 1)
    figures["store_cores"] = round(store_cpu / wall, 3)
    if replicas > 1:
        figures["per_replica"] = each
    return figures


def kv_ingest(points: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per point with KV events whose twin without them ran too (same pods, pools, rate
    and replicas): the pickers' extra CPU per 1,000 events ingested (socket, decode,
    index), and the fleet's extra cores for publishing them."""
    out = {}
    for key, on in points.items():
        off = points.get(key.rpartition("/")[0] + "/0")
        if on["kv_events_per_pod_s"] and off is not None and on["kv_events_per_s"]:
            extra = on["picker_cores"] - off["picker_cores"]
            per_event_us = extra * 1e6 / on["kv_events_per_s"]
            out[key] = {
                "picker_cpu_ms_per_1000_events": round(per_event_us, 1),
                "picker_cpu_us_per_batch": round(per_event_us * on["kv_events_per_batch"]),
                "kept_share": on["kv_kept_share"],
                "fleet_cores_events_on": on["fleet_cores"],
                "fleet_cores_events_off": off["fleet_cores"],
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=4.0, help="window per point")
    parser.add_argument(
        "--points", default=DEFAULT_POINTS,
        help="pods/pools/req-per-s[/replicas[/kv-events-per-s]], comma-separated",
    )  # fmt: skip
    for flag, kind, default, text in (
        ("--scrape-cores", float, None,
         "the store's scrape CPU budget in cores (default: the shipped 0.25)"),
        ("--kv-events-per-s", float, KV_EVENTS_PER_S,
         "KV events each pod publishes a second, where a point does not say "
         f"(default {KV_EVENTS_PER_S:g}: see the module docstring)"),
        ("--kv-batch-hz", float, KV_BATCH_HZ,
         "batches each pod sends a second (its events split among them)"),
        ("--kv-held", int, KV_HELD,
         "blocks each pod holds before it evicts one per block stored"),
    ):  # fmt: skip
        parser.add_argument(flag, type=kind, default=default, help=text)
    parser.add_argument(
        "--stock-collector", dest="settle", action="store_false",
        help="CPython's collector settings in the picker, no freeze (as igw picker ran before)",
    )  # fmt: skip
    parser.add_argument(
        "--whole-pages", action="store_true",
        help="read every pod's page whole, as from pods that do not filter",
    )  # fmt: skip
    parser.add_argument(
        "--burst-rounds", action="store_true",
        help="start each scrape round's fetches together (as before the spread)",
    )  # fmt: skip
    parser.add_argument("--fleet-child", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pools", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--fleet-events", help=argparse.SUPPRESS)
    parser.add_argument("--picker-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fleet_child:
        _serve_fleet(args.fleet_child, args.count, args.pools, json.loads(args.fleet_events))
        return 0
    if args.picker_child:
        point = json.loads(sys.stdin.readline())
        Path(point["figures"]).write_text(json.dumps(_run_picker(point)))
        print("done", flush=True)
        return 0
    try:
        points = []
        for text in filter(None, args.points.split(",")):
            fields = [float(x) for x in text.split("/")]
            assert 3 <= len(fields) <= 5 and fields[0] > 0 and fields[1] > 0
            pods, pools, rate = int(fields[0]), int(fields[1]), fields[2]
            replicas = int(fields[3]) if len(fields) > 3 else 1
            per_s = fields[4] if len(fields) > 4 else args.kv_events_per_s
            assert replicas >= 1 and per_s >= 0 and rate >= 0
            points.append((pods, pools, rate, replicas, per_s))
    except (ValueError, AssertionError):
        print("--points takes pods/pools/rate[/replicas[/kv-events-per-s]], e.g. 128/10/500/2",
              file=sys.stderr)  # fmt: skip
        return 2
    result: dict[str, Any] = {
        "scrape_cores": args.scrape_cores,
        "settle_collector": args.settle,
        "whole_pages": args.whole_pages,
        "burst_rounds": args.burst_rounds,
        "kv_batch_hz": args.kv_batch_hz,
        "kv_held": args.kv_held,
        "load_1min_start": round(os.getloadavg()[0], 2),
        "points": {},
    }
    for pods, pools, rate, replicas, per_s in points:
        key = f"{pods}/{pools}/{rate:g}/{replicas}/{per_s:g}"
        print(f"scale: {key} (pods/pools/rps/replicas/kv events per pod-s) …",
              file=sys.stderr, flush=True)  # fmt: skip
        events = {"per_s": per_s, "batch_hz": args.kv_batch_hz, "held": args.kv_held}
        result["points"][key] = run_point(
            pods,
            pools,
            rate,
            args.seconds,
            args.scrape_cores,
            replicas,
            events,
            args.settle,
            args.whole_pages,
            args.burst_rounds,
        )
    result["kv_ingest"] = kv_ingest(result["points"])
    result["load_1min"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(json.dumps(result))
        return 0
    print("pods/pools/rps/replicas/kv  picker cores  RSS MiB  view age p50/max ms"
          "  decision p50/p99 ms  wait p50/p99 ms  full GCs/s, max pause ms"
          "  interval ms  fleet cores  KV ev/s  KV B/pair  store view age max ms")  # fmt: skip
    for key, r in result["points"].items():
        print(
            f"{key:26s} {r['picker_cores']:12.2f} {r['rss_mib']:8.0f} "
            f"{r['view_age_p50_ms']:9.0f} / {r['view_age_max_ms']:<8.0f} "
            f"{r['decision_p50_ms']:8.2f} / {r['decision_p99_ms']:<8.2f} "
            f"{r['decision_wait_p50_ms']:6.2f} / {r['decision_wait_p99_ms']:<7.2f} "
            f"{r['gc_full_per_s']:8.2f}, {r['gc_pause_max_ms']:<8.1f} "
            f"{r['interval_ms']:11.0f}  {r['fleet_cores']:11.2f}  {r['kv_events_per_s']:7.0f}"
            f"  {r['kv_bytes_per_pair'] or '-':>9}  {r.get('peer_view_age_max_ms', '-')}"
        )
        for i, each in enumerate(r.get("per_replica", [])):
            print(f"  replica {i}: {each['picker_cores']:.2f} cores, {each['rss_mib']:.0f} MiB,"
                  f" decision p50/p99 {each['decision_p50_ms']:.2f} / "
                  f"{each['decision_p99_ms']:.2f} ms, view age max {each['view_age_max_ms']:.0f}"
                  " ms")  # fmt: skip
    for key, k in result["kv_ingest"].items():
        print(f"KV ingest at {key}: {k['picker_cpu_ms_per_1000_events']:.1f} ms of picker CPU "
              f"per 1,000 events ({k['picker_cpu_us_per_batch']} µs a batch; "
              f"{k['kept_share']:.0%} of the events kept); fleet "
              f"{k['fleet_cores_events_off']:.2f} core without events, "
              f"{k['fleet_cores_events_on']:.2f} with")  # fmt: skip
    print(
        f"1-min load average: {result['load_1min_start']} at the start, "
        f"{result['load_1min']} at the end (a shared 2-core machine)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
