"""The picker's KV-event subscriber over real ZMQ sockets.

First against a real emulated pod (publishing over an `ipc://` endpoint it binds, as
vLLM binds `tcp://*:5557`), then against `vllm_kv_peer.VLLMPublisher`, a publisher
written from vLLM's `ZmqEventPublisher` (PUB socket, replay ROUTER, its own thread),
for what a broken or hostile publisher does: gaps, replays that take their time,
payloads that do not decode, batches past what the pod could hold, messages too big.
The subscriber is wired as `igw serve` wires it (`assembly.kv_events.IndexFeed` over a
scheduler and its endpoints).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import zmq
import zmq.asyncio

from inference_gateway.assembly.kv_events import REPLAY_LABEL, IndexFeed
from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.scheduling import Endpoint, LLMRequest, PodMetrics, Scheduler
from inference_gateway.emulator.kv_publisher import parse_kv_events_config
from inference_gateway.emulator.profiles import pod_profile
from inference_gateway.emulator.server import EmulatedPod
from inference_gateway.protocols.vllm.kv_events import KVEventBatch, encode_batch
from inference_gateway.transport import kv_events_zmq
from inference_gateway.transport.kv_events_zmq import KVEventSubscriber

from .vllm_kv_peer import VLLMPublisher, stored, stored_as_map

TEXT = "Answer as the support assistant of a large bank, politely. " * 30


async def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    for _ in range(int(timeout_s / 0.02)):
        if condition():
            return True
        await asyncio.sleep(0.02)
    return condition()


def endpoint(name: str, events: str, replay: str | None = None, blocks: int = 26_307) -> Endpoint:
    labels = {"igw.dev/kv-events": events}
    if replay:
        labels[REPLAY_LABEL] = replay
    e = Endpoint(name, "127.0.0.1", 1, labels=labels)
    e.metrics, e.stale = PodMetrics(num_gpu_blocks=blocks), False  # as a scrape leaves it
    return e


async def test_picker_indexes_what_the_pod_reports_and_scores_it(tmp_path: Path) -> None:
    address = f"ipc://{tmp_path}/pod-0"
    config = parse_kv_events_config(
        {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": address,
         "topic": "kv-events"}
    )  # fmt: skip
    pod = EmulatedPod(
        "pod-0", pod_profile("H100", "llama-3.1-8b"), port=0, kv_events=config, hash_seed="0"
    )
    await pod.start()
    scheduler = Scheduler(GatewayConfigSpec())
    assert scheduler.precise is not None
    endpoints = [endpoint("pod-0", address), endpoint("pod-1", f"ipc://{tmp_path}/x")]
    endpoints[0].port = pod.port
    feed = IndexFeed(lambda: endpoints, lambda: scheduler)
    subscriber = KVEventSubscriber(feed.publishers, feed)
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


def test_a_pod_is_replayed_from_its_label_else_from_the_scorers_replay_port() -> None:
    """The model-server chart binds vLLM's `replay_endpoint` on one port for every pod
    and sets the scorer's `replayPort` (charts/tokenizers.py): each pod is asked there,
    unless its label names its own endpoint; with no port and no label it has none."""
    scheduler = Scheduler(GatewayConfigSpec())
    assert scheduler.precise is not None
    plain = Endpoint("plain", "10.0.0.7", 8000)
    labelled = Endpoint("labelled", "10.0.0.8", 8000, labels={REPLAY_LABEL: "tcp://r:1"})
    feed = IndexFeed(lambda: [plain, labelled], lambda: scheduler)
    assert [(p.address, p.replay) for p in feed.publishers()] == [
        ("tcp://10.0.0.7:5557", None),
        ("tcp://10.0.0.8:5557", "tcp://r:1"),
    ]
    scheduler.precise.params = scheduler.precise.params.model_copy(update={"replay_port": 5558})
    assert [p.replay for p in feed.publishers()] == ["tcp://10.0.0.7:5558", "tcp://r:1"]


class Fleet:
    """vLLM-shaped publishers and the subscriber `igw serve` would run over them."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.scheduler = Scheduler(GatewayConfigSpec())
        self.index = self.scheduler.kv_index
        self.endpoints: list[Endpoint] = []
        self.peers: dict[str, VLLMPublisher] = {}
        feed = IndexFeed(lambda: self.endpoints, lambda: self.scheduler)
        self.subscriber = KVEventSubscriber(feed.publishers, feed, sync_interval_s=0.05)
        self._warm = 1 << 40

    def pod(self, name: str, *, replay: bool = True, blocks: int = 26_307) -> VLLMPublisher:
        base = f"ipc://{self.tmp_path}/{name}"
        peer = VLLMPublisher(base, f"{base}-replay" if replay else None)
        self.peers[name] = peer
        self.endpoints.append(endpoint(name, peer.endpoint, peer.replay_endpoint, blocks))
        return peer

    async def joined(self, name: str) -> None:
        """Publish until the subscriber hears the pod (a SUB misses what is published
        before its subscription reaches the PUB socket: no gap, as nothing came before)."""
        peer = self.peers[name]
        for _ in range(100):
            self._warm += 1
            peer.publish(stored([self._warm]))
            if await wait_for(lambda: self.index.matches([self._warm]) != {}, 0.1):
                return
        raise AssertionError(f"{name} never heard")

    def holds(self, name: str, hashes: list[int]) -> bool:
        return self.index.matches(hashes).get(name, 0) == len(hashes)


@asynccontextmanager
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    f = Fleet(tmp_path)
    await f.subscriber.start()
    try:
        yield f
    finally:
        await f.subscriber.stop()
        for peer in f.peers.values():
            peer.close()


async def test_a_gap_is_replayed_whole_from_vllms_router(tmp_path: Path) -> None:
    """vLLM's ROUTER answers a replay request with every buffered batch from the asked
    sequence on, then an end marker: all of them are read (a REQ socket took one)."""
    async with fleet(tmp_path) as f:
        peer = f.pod("pod-0")
        await f.subscriber.sync()
        await f.joined("pod-0")
        for gap in range(3):  # three gaps of five batches each
            for i in range(5):
                peer.publish(stored([100 * gap + i]), deliver=False)
            peer.publish(stored([100 * gap + 5]))
        wanted = [100 * gap + i for gap in range(3) for i in range(6)]
        assert await wait_for(lambda: all(f.holds("pod-0", [h]) for h in wanted))
        sub = f.subscriber
        assert (sub.gaps, sub.replayed, sub.replay_failures) == (3, 15, 0)
        assert peer.replay_requests == 3


async def test_undecodable_payloads_are_read_past_not_replayed(tmp_path: Path) -> None:
    """40 batches in a format this picker does not read (vLLM's later map encoding, a
    version skew) are counted and their sequence numbers taken: the next good batch is
    no gap, so nothing is asked of the replay socket."""
    async with fleet(tmp_path) as f:
        peer = f.pod("pod-0")
        await f.subscriber.sync()
        await f.joined("pod-0")
        for i in range(40):
            peer.publish(stored_as_map([500 + i]))
        peer.publish(stored([600]))
        assert await wait_for(lambda: f.holds("pod-0", [600]), 3.0)
        sub = f.subscriber
        assert (sub.bad_payloads, sub.gaps, peer.replay_requests) == (40, 0, 0)
        assert f.index.matches([500]) == {}


async def test_one_pods_replay_does_not_hold_another_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While pod A's replay is still unanswered, pod B's batches reach the index; A's
    replay, answered after that, is still read."""
    monkeypatch.setattr(kv_events_zmq, "REPLAY_TIMEOUT_S", 1.5)  # room on a busy machine
    async with fleet(tmp_path) as f:
        a, b = f.pod("a"), f.pod("b")
        await f.subscriber.sync()
        await f.joined("a")
        await f.joined("b")
        a.replay_gate.clear()
        a.publish(stored([11]), deliver=False)
        a.publish(stored([12]))  # a gap: A's task asks its ROUTER and waits
        assert await wait_for(lambda: a.replay_requests == 1)
        b.publish(stored([21]))
        assert await wait_for(lambda: f.holds("b", [21]), 0.4)  # inside A's replay wait
        assert not f.holds("a", [11])
        a.replay_gate.set()
        assert await wait_for(lambda: f.holds("a", [11, 12]))
        assert f.subscriber.replayed == 1


async def test_a_replay_that_never_answers_is_bounded_and_not_retried_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kv_events_zmq, "REPLAY_TIMEOUT_S", 0.2)
    async with fleet(tmp_path) as f:
        peer = f.pod("pod-0")
        await f.subscriber.sync()
        await f.joined("pod-0")
        peer.replay_gate.clear()  # a black hole: requests received, never answered
        for round_ in range(3):
            peer.publish(stored([10 * round_ + 1]), deliver=False)
            peer.publish(stored([10 * round_ + 2]))
        assert await wait_for(lambda: all(f.holds("pod-0", [10 * r + 2]) for r in range(3)))
        sub = f.subscriber
        assert (sub.gaps, sub.replay_failures, peer.replay_requests) == (3, 1, 1)


async def test_a_pod_is_bounded_by_its_scraped_capacity_and_one_step(tmp_path: Path) -> None:
    """The pod reports 1,000 blocks: the index never holds more of it, picked or not;
    a batch storing more than that in one step (a million hashes) is refused whole."""
    async with fleet(tmp_path) as f:
        peer = f.pod("pod-0", replay=False, blocks=1000)
        await f.subscriber.sync()
        await f.joined("pod-0")
        for i in range(3):
            peer.publish(stored(list(range(10_000 * (i + 1), 10_000 * (i + 1) + 600))))
        assert await wait_for(lambda: f.holds("pod-0", [30_599]))
        assert f.index.blocks("pod-0") == 1000
        million = [200 + i % 60_000 for i in range(1_000_000)]  # 3 bytes each: 3 MB
        peer.publish(stored(million, tokens=0))
        peer.publish(stored([7]))
        assert await wait_for(lambda: f.holds("pod-0", [7]))
        assert f.index.refused == 1 and f.index.matches([200]) == {}
        assert f.holds("pod-0", [30_599])  # nothing of the refused batch displaced it


async def test_a_message_over_the_size_cap_is_never_received(tmp_path: Path) -> None:
    """A 5 MB batch (ten blocks and a million token ids) is dropped by ZMQ at its size
    header; the subscriber reconnects and hears the pod's next batches."""
    async with fleet(tmp_path) as f:
        peer = f.pod("pod-0", replay=False)
        await f.subscriber.sync()
        await f.joined("pod-0")
        big = stored(list(range(900, 910)), tokens=1_000_000, token=100_000)
        assert len(big) > kv_events_zmq.MAX_MESSAGE_BYTES
        peer.publish(big)
        await f.joined("pod-0")  # again, after the reconnect
        assert f.index.matches([900]) == {} and f.subscriber.reconnects == 1


async def test_bursts_are_read_whole_and_a_lone_batch_after_one_still_wakes_the_reader(
    tmp_path: Path,
) -> None:
    """After a message the reader polls without waiting and reads on while batches are
    queued; only an empty socket sends it back to the waiting poll. A burst of as many
    batches as the socket queues is read whole, and a lone batch after each burst, the
    socket gone quiet, still wakes it (no wakeup lost between the two polls)."""
    async with fleet(tmp_path) as f:
        peer = f.pod("pod-0", replay=False)
        await f.subscriber.sync()
        await f.joined("pod-0")
        for burst in range(3):
            first = 1000 * (burst + 1)
            blocks = list(range(first, first + kv_events_zmq.RCVHWM))
            for block in blocks:
                peer.publish(stored([block]))
            assert await wait_for(lambda held=blocks: f.holds("pod-0", held)), burst
            await asyncio.sleep(0.2)  # quiet: the reader waits in its poll
            lone = first + 999
            peer.publish(stored([lone]))
            assert await wait_for(lambda lone=lone: f.holds("pod-0", [lone])), burst
        assert f.subscriber.gaps == 0


async def test_a_restart_clears_the_pod(tmp_path: Path) -> None:
    async with fleet(tmp_path) as f:
        peer = f.pod("pod-0", replay=False)
        await f.subscriber.sync()
        await f.joined("pod-0")
        peer.publish(stored([1, 2, 3]))
        assert await wait_for(lambda: f.holds("pod-0", [1, 2, 3]))
        peer.restart()
        peer.publish(stored([9]))  # sequence 0 again: the engine restarted, empty
        assert await wait_for(lambda: f.holds("pod-0", [9]))
        assert f.index.matches([1]) == {} and f.subscriber.gaps == 0


def test_the_shared_context_takes_sockets_for_a_thousand_pods_and_more() -> None:
    """Two sockets a pod: libzmq's default of 1,023 a context ran out at 512 pods
    (`bench/scale.py` at 1,024 pods failed with "Too many open files")."""
    feed = IndexFeed(lambda: [], lambda: None)
    KVEventSubscriber(feed.publishers, feed)
    assert zmq.asyncio.Context.instance().get(zmq.MAX_SOCKETS) >= 2 * 1024 + 64


def test_a_stream_opened_again_at_once_gets_its_monitor() -> None:
    """A reconnecting stream closes its SUB socket and opens a new one at once, which
    takes the same file descriptor back. pyzmq's default monitor address is named after
    that descriptor, and libzmq unbinds a closed socket's monitor in its reaper thread,
    later: the new monitor's bind then failed with "Address already in use" (34 of 300
    cycles here), ending that pod's stream task. Each monitor has its own name now."""
    feed = IndexFeed(lambda: [], lambda: None)
    subscriber = KVEventSubscriber(feed.publishers, feed)
    publisher = kv_events_zmq.Publisher("pod-0", "tcp://127.0.0.1:1")
    for _ in range(300):
        stream = kv_events_zmq._Stream(publisher)
        assert subscriber._subscribe(stream)
        kv_events_zmq._close_sockets(stream.sock, stream.monitor)


class Recorder:
    """A consumer that notes each slice of work it is given, and each pod it forgets."""

    def __init__(self, slices: int = 1, work_s: float = 0.0) -> None:
        self.slices, self.work_s = slices, work_s
        self.log: list[tuple[str, str]] = []

    def batch(self, pod: str, view: object) -> Iterator[None]:
        for _ in range(self.slices):
            time.sleep(self.work_s)  # the index's work on a slice, held on the loop
            self.log.append(("slice", pod))
            yield

    def restarted(self, pod: str) -> None: ...

    def gone(self, pod: str) -> None:
        self.log.append(("gone", pod))


def publishers(context: zmq.Context[zmq.Socket[bytes]], tmp_path: Path, n: int) -> list[Any]:
    pubs = []
    for i in range(n):
        pub = context.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        pub.bind(f"ipc://{tmp_path}/pod-{i}")
        pubs.append(pub)
    return pubs


async def until_every_pod_heard(pubs: list[Any], recorder: Recorder) -> set[str]:
    """Publish from every PUB socket until the recorder has a batch of each pod (a SUB
    misses what is published before its subscription reaches the PUB): the pods heard."""
    payload = encode_batch(KVEventBatch(ts=0.0, events=[]))
    heard: set[str] = set()
    for attempt in range(50):
        for pub in pubs:
            pub.send_multipart((b"", attempt.to_bytes(8, "big"), payload))
        await asyncio.sleep(0.05)
        heard = {pod for _, pod in recorder.log}
        if len(heard) == len(pubs):
            break
    return heard


async def test_stopping_behind_many_busy_publishers_takes_one_turn_not_one_a_pod(
    tmp_path: Path,
) -> None:
    """Each pod's task was cancelled and awaited in turn, each wait a full turn of a loop
    busy with the other pods' backlogs: 1,024 publishing pods took a minute to stop
    (`bench/scale.py`), past a pod's grace period. All are cancelled at once now."""
    pods, backlog, work_s = 64, 400, 0.003  # a turn: up to 64 messages of 3 ms

    class Slow:
        def batch(self, pod: str, view: object) -> Iterator[None]:
            time.sleep(work_s)  # the index's work on one batch, held on the loop
            return iter(())

        def restarted(self, pod: str) -> None: ...

        def gone(self, pod: str) -> None: ...

    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    pubs = publishers(context, tmp_path, pods)
    try:
        names = [
            kv_events_zmq.Publisher(f"pod-{i}", f"ipc://{tmp_path}/pod-{i}") for i in range(pods)
        ]
        subscriber = KVEventSubscriber(lambda: names, Slow())
        await subscriber.start()
        await asyncio.sleep(0.5)  # connected (a message before that is dropped: no matter)
        payload = encode_batch(KVEventBatch(ts=0.0, events=[]))
        for seq in range(backlog):  # more than the whole test could read
            for pub in pubs:
                pub.send_multipart((b"", seq.to_bytes(8, "big"), payload))
        await asyncio.sleep(0.3)  # every stream busy with its backlog
        started = time.monotonic()
        await subscriber.stop()
        took = time.monotonic() - started
    finally:
        for pub in pubs:
            pub.close()
        context.term()
    assert subscriber.pods() == []
    assert took < 1.0, (
        f"stop took {took:.1f} s (one turn a pod: about {pods * pods * work_s:.0f} s)"
    )


async def test_one_task_reads_every_pod_and_a_backlog_waits_its_turn(tmp_path: Path) -> None:
    """The subscriber reads all its sockets from one task, whatever the pods (a task and
    a poller a pod cost about 75 µs a message in pyzmq's futures), and takes one
    message a pod in turn: a pod's lone batch, sent after 16 pods' full backlogs, is
    applied within about one round of them, not behind all of them."""
    pods, backlog = 16, kv_events_zmq.RCVHWM
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    pubs = publishers(context, tmp_path, pods + 1)
    names = [
        kv_events_zmq.Publisher(f"pod-{i}", f"ipc://{tmp_path}/pod-{i}") for i in range(pods + 1)
    ]
    recorder = Recorder(work_s=0.003)
    subscriber = KVEventSubscriber(lambda: names, recorder)
    try:
        tasks_before = len(asyncio.all_tasks())
        await subscriber.sync()
        assert len(asyncio.all_tasks()) - tasks_before == 1, "one reader for every pod"
        await until_every_pod_heard(pubs, recorder)
        payload = encode_batch(KVEventBatch(ts=0.0, events=[]))
        assert await wait_for(lambda: not subscriber._ready)
        recorder.log.clear()
        for seq in range(100, 100 + backlog):
            for pub in pubs[:pods]:
                pub.send_multipart((b"", seq.to_bytes(8, "big"), payload))
        pubs[pods].send_multipart((b"", (100).to_bytes(8, "big"), payload))
        lone = f"pod-{pods}"
        assert await wait_for(lambda: len(recorder.log) == pods * backlog + 1)
        turn = recorder.log.index(("slice", lone))
        assert turn <= 2 * pods + 1, f"the lone batch waited behind {turn} others"
    finally:
        await subscriber.stop()
        for pub in pubs:
            pub.close()
        context.term()


async def test_a_pod_gone_mid_batch_gets_no_slice_after_it_is_forgotten(tmp_path: Path) -> None:
    """A batch is applied in slices, the loop given back between them; the pod leaves
    (its publisher no longer named) while one is under way: the consumer forgets it
    and is given no slice of it after that."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    (pub,) = publishers(context, tmp_path, 1)
    names = [kv_events_zmq.Publisher("pod-0", f"ipc://{tmp_path}/pod-0")]
    recorder = Recorder(slices=10_000)
    subscriber = KVEventSubscriber(lambda: names, recorder)
    try:
        await subscriber.sync()
        payload = encode_batch(KVEventBatch(ts=0.0, events=[]))
        for seq in range(50):  # until the subscription has reached the PUB socket
            pub.send_multipart((b"", seq.to_bytes(8, "big"), payload))
            if await wait_for(lambda: len(recorder.log) > 10, 0.05):
                break
        names.clear()
        await subscriber.sync()
        await asyncio.sleep(0.05)  # room for more slices, were any still coming
        assert ("gone", "pod-0") in recorder.log
        assert recorder.log[-1] == ("gone", "pod-0"), recorder.log[-3:]
        assert subscriber.pods() == []
    finally:
        await subscriber.stop()
        pub.close()
        context.term()


async def test_a_backlog_is_read_many_messages_a_turn_of_a_busy_loop(tmp_path: Path) -> None:
    """The reader gives the loop back once its share of a turn is spent, not after every
    message: behind a loop whose every turn holds other work (scrapes, requests), a
    message a turn kept 5-10k of 200k events a second at 1,024 pods (bench/scale.py).
    64 pods' full backlogs (512 messages) are read in far fewer turns than messages."""
    pods, backlog = 64, kv_events_zmq.RCVHWM
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    pubs = publishers(context, tmp_path, pods)
    names = [kv_events_zmq.Publisher(f"pod-{i}", f"ipc://{tmp_path}/pod-{i}") for i in range(pods)]
    recorder = Recorder()
    subscriber = KVEventSubscriber(lambda: names, recorder)
    turns = 0

    async def busy() -> None:  # a turn of the loop with other work in it
        nonlocal turns
        while True:
            turns += 1
            time.sleep(0.0005)
            await asyncio.sleep(0)

    other = asyncio.get_running_loop().create_task(busy())
    try:
        await subscriber.sync()
        assert len(await until_every_pod_heard(pubs, recorder)) == pods
        payload = encode_batch(KVEventBatch(ts=0.0, events=[]))
        assert await wait_for(lambda: not subscriber._ready)
        await asyncio.sleep(0.1)  # nothing more in flight
        recorder.log.clear()
        for seq in range(100, 100 + backlog):
            for pub in pubs:
                pub.send_multipart((b"", seq.to_bytes(8, "big"), payload))
        await asyncio.sleep(0.05)  # queued at the sockets (the loop busy meanwhile)
        turns = 0
        assert await wait_for(lambda: len(recorder.log) == pods * backlog), (
            len(recorder.log),
            subscriber.gaps,
            len(subscriber._ready),
        )
        assert turns < pods * backlog / 2, f"{turns} turns for {pods * backlog} messages"
    finally:
        other.cancel()
        await subscriber.stop()
        for pub in pubs:
            pub.close()
        context.term()


async def test_closed_streams_leave_the_context_able_to_connect(tmp_path: Path) -> None:
    """A stream is closed when its pod leaves and when its connection is opened again.
    Closing a monitored socket before stopping its monitor left libzmq's I/O thread, which
    every socket of the context shares, waiting for ever to hand a monitor event to a
    closed PAIR (zeromq/libzmq#3575; the shutdown order is zeromq/pyzmq#1554): after
    1 to 7 such closes no socket of the context connected again, so every later pod went
    unheard (here: the next tests' streams, "pod-0 never heard"). 20 pods are heard,
    their streams closed and the pods gone; a 21st is still heard."""
    context = zmq.asyncio.Context()  # its own: a broken one must not deafen other tests
    feed = IndexFeed(lambda: [], lambda: None)
    subscriber = KVEventSubscriber(lambda: [], feed, context=context)
    plain: zmq.Context[zmq.Socket[bytes]] = zmq.Context()  # the pods'

    def heard(stream: kv_events_zmq._Stream, pub: zmq.Socket[bytes]) -> bool:
        assert stream.sock is not None
        sock: zmq.Socket[bytes] = zmq.Socket.shadow(stream.sock.underlying)
        for _ in range(100):  # 2 s
            pub.send_multipart((b"", b"\0" * 8, b""))
            if sock.poll(20):
                return True
        return False

    try:
        for pod in range(21):
            pub = plain.socket(zmq.PUB)
            pub.setsockopt(zmq.LINGER, 0)
            pub.bind(f"ipc://{tmp_path}/pod-{pod}")
            stream = kv_events_zmq._Stream(
                kv_events_zmq.Publisher(f"pod-{pod}", f"ipc://{tmp_path}/pod-{pod}")
            )
            assert subscriber._subscribe(stream)
            try:
                assert heard(stream, pub), f"pod {pod + 1} never heard"
            finally:
                kv_events_zmq._close_sockets(stream.sock, stream.monitor)
                pub.close()  # the pod gone too
    finally:
        plain.destroy(linger=0)
        context.destroy(linger=0)


async def test_a_socket_that_fails_is_opened_again_and_the_others_read_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One task reads every pod's socket, so an error from one socket must not end it:
    the failing pod's stream is opened again and heard, the other pod is heard meanwhile."""
    async with fleet(tmp_path) as f:
        a, b = f.pod("a", replay=False), f.pod("b", replay=False)
        await f.subscriber.sync()
        await f.joined("a")
        await f.joined("b")
        receive = zmq.Socket.recv_multipart
        failed: list[str] = []

        def fail_once_for_a(sock: zmq.Socket[bytes], *args: Any, **kwargs: Any) -> Any:
            stream = f.subscriber._streams.get("a")
            if not failed and stream is not None and sock is stream.sock:
                failed.append("a")
                raise zmq.ZMQError(zmq.EFSM)
            return receive(sock, *args, **kwargs)

        monkeypatch.setattr(zmq.Socket, "recv_multipart", fail_once_for_a)
        a.publish(stored([31]))
        assert await wait_for(lambda: failed == ["a"])
        b.publish(stored([41]))
        assert await wait_for(lambda: f.holds("b", [41]))
        assert f.subscriber.reconnects == 1
        await f.joined("a")  # heard again on its new socket
