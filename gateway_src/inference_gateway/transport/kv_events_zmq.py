"""Pods' KV events off the wire: one ZMQ SUB socket per pod, batches handed to a consumer.

For every publisher the caller names (`Publisher`: a pod, its PUB endpoint such as
`tcp://10.0.3.7:5557`, and optionally its replay ROUTER) the subscriber connects a SUB
socket, subscribes to every topic, reads each `[topic, seq, payload]` message, decodes
the batch's header (`kv_events.decode_view`: its events stay undecoded until applied) and
hands it to the consumer, whose work comes back in slices (`KVEventConsumer.batch`): the
subscriber gives the event loop back between them, so no batch holds a request.
Publishers follow the caller: a new one is subscribed at the next sync (every second),
one that left is closed and the consumer told (`gone`).

Each pod has its own task and its own sequence. A gap (messages the SUB socket dropped
at its high-water mark, or lost over a reconnect) is asked of the pod's replay ROUTER
when it has one. vLLM's ROUTER (`ZmqEventPublisher._service_replay` in vllm-project/vllm
`vllm/distributed/kv_events.py`, the same at a commit before v0.11.0 and one after it,
b4e69e0 and 0181ea3) answers one request `[id, "", start_seq]` with one message
`[id, "", seq, payload]` per buffered batch from `start_seq` on, then `[id, "", -1,
""]`; a REQ socket takes only the first of those (vLLM's example subscriber uses one),
so the replay socket here is a DEALER, read until the gap is filled, the end marker, or
`REPLAY_BUDGET_S`. A replay that fails (no answer in time) is not tried again for that
pod for `REPLAY_BACKOFF_S`: its gaps are counted and the index keeps what it has (later
events correct it; the capacity bound evicts what was never removed). A sequence that
goes back means the engine restarted with an empty cache (`restarted`).

A broken or hostile publisher cannot hold the others: a payload that does not decode
is counted and its sequence taken as read (the next message is no gap, so no replay);
a replay waits only in its own pod's task; a message over `MAX_MESSAGE_BYTES` is never
received (libzmq ends the connection at the size header; the subscriber opens it again,
and the pod's next message is a gap); each socket queues at most `RCVHWM` messages
(libzmq then stops reading the connection, and the pod's publisher keeps or drops the
rest under its own high-water mark), so what one pod can make the picker hold is
bounded; how much one batch may change is the consumer's rule (`kv_index`: no more than
one engine step can).

Every replica of the picker subscribes on its own: the index is derived from the pods'
own truth, so replicas agree without sharing it through the store.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import msgspec
import zmq
import zmq.asyncio

from inference_gateway.background import cancel_and_wait
from inference_gateway.protocols.vllm.kv_events import BatchView, decode_view

__all__ = ["KVEventConsumer", "KVEventSubscriber", "Publisher"]

log = logging.getLogger(__name__)

SYNC_INTERVAL_S = 1.0
REPLAY_TIMEOUT_S = 0.5  # the longest wait for the replay's next message
REPLAY_BUDGET_S = 2.0  # the longest one replay may take in all
REPLAY_BACKOFF_S = 10.0  # after a replay failed, that pod's gaps are not replayed this long
MAX_MESSAGE_BYTES = 4 << 20  # vLLM sends ~5 bytes a computed token: 800k tokens a step
MAX_SOCKETS = 1 << 15  # sockets the shared context may open: 10,000 pods and their replays
RCVHWM = 8  # messages queued per socket: at most 32 MiB per pod (RCVHWM x the cap)
RECONNECT_MIN_MS, RECONNECT_MAX_MS = 200, 10_000
_MONITORS = itertools.count()  # a unique inproc name per socket monitor (_subscribe)


@dataclass(frozen=True)
class Publisher:
    """Where one pod publishes its KV events, and where it replays them (if it does)."""

    pod: str
    address: str
    replay: str | None = None


class KVEventConsumer(Protocol):
    """Whoever the batches are for (the picker's block index)."""

    def batch(self, pod: str, view: BatchView) -> Iterable[None]:
        """Apply one batch; each step of the iteration is one slice of the work.
        `msgspec.DecodeError` (a `ValueError`) when an event in it does not decode."""
        ...

    def restarted(self, pod: str) -> None:
        """The pod's engine restarted: its cache is empty."""
        ...

    def gone(self, pod: str) -> None:
        """The pod is no longer subscribed: forget it."""
        ...


class _Stream:
    """One pod's subscription: its socket, its task, where its sequence stands."""

    __slots__ = ("last_seq", "monitor", "publisher", "replay_after", "sock", "task")

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.sock: zmq.asyncio.Socket | None = None
        self.monitor: zmq.asyncio.Socket | None = None  # the SUB socket's disconnections
        self.last_seq = -1
        self.replay_after = 0.0  # loop time before which a gap is not replayed
        self.task: asyncio.Task[None] | None = None


class KVEventSubscriber:
    def __init__(
        self,
        publishers: Callable[[], list[Publisher]],
        consumer: KVEventConsumer,
        *,
        context: zmq.asyncio.Context | None = None,
        sync_interval_s: float = SYNC_INTERVAL_S,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.publishers = publishers
        self.consumer = consumer
        if context is None:
            context = zmq.asyncio.Context.instance()
            # two sockets a pod (SUB and its monitor) and a replay's DEALER: libzmq's
            # default of 1,023 sockets a context ran out at 512 pods ("Too many open
            # files"). It takes effect if set before the context's first socket.
            context.set(zmq.MAX_SOCKETS, MAX_SOCKETS)
        self.context = context
        self.sync_interval_s = sync_interval_s
        self.max_message_bytes = max_message_bytes
        self._streams: dict[str, _Stream] = {}
        self._task: asyncio.Task[None] | None = None
        self.gaps = 0
        self.replayed = 0
        self.replay_failures = 0
        self.bad_payloads = 0
        self.reconnects = 0

    def pods(self) -> list[str]:
        return list(self._streams)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        # every stream's task cancelled at once, then awaited together: one by one, each
        # wait was a turn of a loop busy with the others' backlogs (1,024 publishing
        # pods took a minute to stop, bench/scale.py)
        tasks = [stream.task for stream in self._streams.values() if stream.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for pod in list(self._streams):  # stopped, not gone: the consumer keeps what it has
            await self._close(pod, gone=False)

    async def _run(self) -> None:
        while True:
            await self.sync()
            await asyncio.sleep(self.sync_interval_s)

    # ------------------------------------------------------------------ sockets

    def _socket(self, kind: int) -> zmq.asyncio.Socket:
        sock = self.context.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        sock.setsockopt(zmq.RCVHWM, RCVHWM)
        # a pod that publishes nothing (yet) is retried with backoff up to 10 s,
        # not ZMQ's fixed 100 ms: a pool of silent pods costs no connect storm
        sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MIN_MS)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_MAX_MS)
        return sock

    def _subscribe(self, stream: _Stream) -> bool:
        """Open the stream's SUB socket (and its monitor, before it connects, so no
        ending of the connection goes unseen)."""
        sock = self._socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        # pyzmq names a monitor's inproc endpoint after the socket's file descriptor,
        # which the next socket may reuse before libzmq's reaper has unbound the closed
        # socket's monitor ("Address already in use"): each monitor gets its own name
        monitor = sock.get_monitor_socket(
            zmq.EVENT_DISCONNECTED, addr=f"inproc://igw-kv-events-monitor-{next(_MONITORS)}"
        )
        try:
            sock.connect(stream.publisher.address)
        except zmq.ZMQError as error:
            log.warning(
                "kv events: cannot connect to %s for %s: %s",
                stream.publisher.address,
                stream.publisher.pod,
                error,
            )
            _close_sockets(sock, monitor)
            return False
        stream.sock, stream.monitor = sock, monitor
        return True

    async def sync(self) -> None:
        """Subscribe to new publishers, close the ones that left or moved."""
        wanted = {p.pod: p for p in self.publishers()}
        for pod, stream in list(self._streams.items()):
            if wanted.get(pod) != stream.publisher:
                await self._close(pod)
        for pod, publisher in wanted.items():
            if pod in self._streams:
                continue
            stream = _Stream(publisher)
            if self._subscribe(stream):
                self._streams[pod] = stream
                stream.task = asyncio.get_running_loop().create_task(self._follow(stream))

    async def _close(self, pod: str, *, gone: bool = True) -> None:
        stream = self._streams.pop(pod)
        await cancel_and_wait(stream.task)
        _close_sockets(stream.sock, stream.monitor)
        if gone:
            self.consumer.gone(pod)

    async def _follow(self, stream: _Stream) -> None:
        """One pod's messages, in order, as they come; a connection that ended is
        opened again. libzmq ends one for a message over the size cap and then, for
        a protocol error, never reconnects by itself (`session_base_t::engine_error`)."""
        while True:
            await self._read(stream)
            self.reconnects += 1
            await asyncio.sleep(RECONNECT_MIN_MS / 1000)
            _close_sockets(stream.sock, stream.monitor)
            if not self._subscribe(stream):  # forgotten: the next sync starts it afresh
                self._streams.pop(stream.publisher.pod, None)
                self.consumer.gone(stream.publisher.pod)
                return

    async def _read(self, stream: _Stream) -> None:
        """Handle the socket's messages until its connection ends."""
        sock, monitor = stream.sock, stream.monitor
        assert sock is not None and monitor is not None
        poller = zmq.asyncio.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        # the same socket without asyncio's wrapper: its non-blocking receive is one
        # zmq_msg_recv a frame and no future
        plain: zmq.Socket[bytes] = zmq.Socket.shadow(sock.underlying)
        while True:
            # The waiting poll (its futures and reader registrations) only once the socket
            # is empty: while messages are queued, each is taken with a non-blocking
            # receive. Through asyncio's wrapper (a zero-timeout poll, then a receive,
            # each a future) pyzmq's machinery was most of the reader's time (py-spy,
            # 1,024 pods each sending five a second); without it a saturated replica kept
            # about 10 % more events (bench/scale.py).
            ready = dict(await poller.poll())
            while sock in ready:
                try:
                    frames = plain.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                await self._handle(stream, [f.buffer for f in frames])
                await asyncio.sleep(0)  # a backlog is read one message per turn
            if monitor in ready:
                await monitor.recv_multipart()
                return

    # ------------------------------------------------------------------ messages

    async def _handle(self, stream: _Stream, frames: list[memoryview]) -> None:
        """Apply one `[topic, seq, payload]` message from the stream's pod."""
        if len(frames) != 3 or len(frames[1]) != 8:
            self.bad_payloads += 1
            return
        pod, seq = stream.publisher.pod, int.from_bytes(frames[1], "big")
        last = stream.last_seq
        if last >= 0 and seq <= last:  # the engine restarted: its cache is empty
            self.consumer.restarted(pod)
        elif last >= 0 and seq > last + 1:
            self.gaps += 1
            await self._replay(stream, last + 1, seq)
        stream.last_seq = seq  # read, whether or not it decodes
        await self._apply(pod, frames[2])

    async def _apply(self, pod: str, payload: memoryview) -> None:
        try:
            for _ in self.consumer.batch(pod, decode_view(payload)):
                await asyncio.sleep(0)
        except msgspec.DecodeError:  # a validation error is one too
            self.bad_payloads += 1
        except Exception:  # a pod's payload must never end its task (and so its events)
            self.bad_payloads += 1
            log.exception("kv events: a batch from %s could not be applied", pod)

    async def _replay(self, stream: _Stream, first: int, upto: int) -> None:
        """Batches `first` .. `upto - 1` from the pod's replay ROUTER, if it has one."""
        address = stream.publisher.replay
        loop = asyncio.get_running_loop()
        if not address or loop.time() < stream.replay_after:
            return
        deadline = loop.time() + REPLAY_BUDGET_S
        dealer = self._socket(zmq.DEALER)
        done = False
        try:
            dealer.connect(address)
            await dealer.send_multipart((b"", first.to_bytes(8, "big")))
            while not done:
                wait = min(REPLAY_TIMEOUT_S, deadline - loop.time())
                if wait <= 0 or not await dealer.poll(int(wait * 1000)):
                    break
                frames = [f.buffer for f in await dealer.recv_multipart(copy=False)]
                if len(frames) != 3 or len(frames[0]) or len(frames[1]) != 8:
                    self.bad_payloads += 1
                    break
                if not len(frames[2]):  # the end marker: nothing more is buffered
                    done = True
                    break
                seq = int.from_bytes(frames[1], "big")
                if seq < first or seq <= stream.last_seq:
                    continue
                if seq >= upto:  # caught up: the rest arrives on the SUB socket
                    done = True
                    break
                stream.last_seq = seq
                await self._apply(stream.publisher.pod, frames[2])
                self.replayed += 1
                done = seq == upto - 1
        except zmq.ZMQError as error:
            log.debug("kv events: replay from %s failed: %s", address, error)
        finally:
            dealer.close(linger=0)
        if not done:
            self.replay_failures += 1
            stream.replay_after = loop.time() + REPLAY_BACKOFF_S


def _close_sockets(sock: zmq.asyncio.Socket | None, monitor: zmq.asyncio.Socket | None) -> None:
    """Close a SUB socket and its monitor: the monitoring stopped first, then the
    monitor, then the socket. Closed without that, the socket's last events are sent to
    a monitor nobody reads, and libzmq's I/O thread, which every socket of the context
    shares, waits on it for ever (zeromq/libzmq#3575; the order is pyzmq's,
    zeromq/pyzmq#1554): from then on no socket of the context connects, so no pod
    that joins or reconnects is heard again. Here it took 1 to 7 closed streams."""
    if sock is not None and monitor is not None:
        sock.disable_monitor()
    for each in (monitor, sock):
        if each is not None:
            each.close(linger=0)
