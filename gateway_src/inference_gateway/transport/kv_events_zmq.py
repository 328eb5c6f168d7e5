"""Pods' KV events off the wire: one ZMQ SUB socket per pod, batches handed to a consumer.

For every publisher the caller names (`Publisher`: a pod, its PUB endpoint such as
`tcp://10.0.3.7:5557`, and optionally its replay ROUTER) the subscriber connects a SUB
socket, subscribes to every topic, reads each `[topic, seq, payload]` message, decodes
the batch's header (`kv_events.decode_view`: its events stay undecoded until applied) and
hands it to the consumer, whose work comes back in slices (`KVEventConsumer.batch`).
Publishers follow the caller: a new one is subscribed at the next sync (every second),
one that left is closed and the consumer told (`gone`).

A pod is known by its own connection, never by what it writes: the topic is not read, so
no pod can publish another pod's blocks (one socket for all, told apart by topic as
vLLM's `topic` setting allows, would let it).

One task reads every socket. The loop calls `_readable` when a socket's descriptor
signals, which puts the pod in line; the reader takes one message a pod in turn, pods
with more queued back at the end of the line, and applies batches for `READ_TURN_S` of
each turn of the loop before giving it back (`_Turn`), so that neither a pod's backlog
nor all pods' together hold a request or a scrape for longer. A fleet sending more than
that share can read is dropped at each socket's high-water mark (a gap, below).

Each pod has its own sequence. A gap (messages the SUB socket dropped at its high-water
mark, or lost over a reconnect) is asked of the pod's replay ROUTER when it has one, in
a task of its own: the other pods are read meanwhile, this pod's socket once it is done.
vLLM's ROUTER (`ZmqEventPublisher._service_replay` in vllm-project/vllm
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
a replay waits in its own task; a message over `MAX_MESSAGE_BYTES` is never
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
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, cast

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
READ_TURN_S = 0.001  # the reader's share of a turn of the loop: about one index slice
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
    """One pod's subscription: its sockets, where its sequence stands, what it waits on."""

    __slots__ = (
        "closed",
        "last_seq",
        "monitor",
        "publisher",
        "queued",
        "reopen",
        "replay_after",
        "replaying",
        "sock",
    )

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.sock: zmq.Socket[bytes] | None = None
        self.monitor: zmq.Socket[bytes] | None = None  # the SUB socket's disconnections
        self.last_seq = -1
        self.replay_after = 0.0  # loop time before which a gap is not replayed
        self.queued = False  # in the reader's line
        self.replaying: asyncio.Task[None] | None = None  # its reading waits for it
        self.reopen: asyncio.TimerHandle | None = None  # a connection that ended, opened again
        self.closed = False


class _Turn:
    """The subscriber's share of one turn of the event loop: messages are read and
    batches applied until `READ_TURN_S` is spent, then the loop is given back. A yield a
    message would cost the reader a whole turn of a busy loop each (about 0.7 ms at
    1,024 pods and 500 req/s): it kept 5-10k of 200k events a second."""

    __slots__ = ("ends",)

    def __init__(self) -> None:
        self.ends = 0.0

    def start(self) -> None:
        self.ends = time.perf_counter() + READ_TURN_S

    def spent(self) -> bool:
        return time.perf_counter() >= self.ends


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
        # the same libzmq context without asyncio's wrapper: the SUB sockets are read
        # from the loop's own readiness callbacks, not through pyzmq's futures
        self._plain: zmq.Context[zmq.Socket[bytes]] = zmq.Context.shadow(context.underlying)
        self.sync_interval_s = sync_interval_s
        self.max_message_bytes = max_message_bytes
        self._streams: dict[str, _Stream] = {}
        self._ready: deque[_Stream] = deque()  # streams with something to read, in turn
        self._wakeup: asyncio.Future[None] | None = None  # the idle reader's
        self._reader: asyncio.Task[None] | None = None
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
        reader, self._reader = self._reader, None
        await cancel_and_wait(reader)
        replays = [s.replaying for s in self._streams.values() if s.replaying is not None]
        for replay in replays:  # cancelled at once, awaited together
            replay.cancel()
        await asyncio.gather(*replays, return_exceptions=True)
        for pod in list(self._streams):  # stopped, not gone: the consumer keeps what it has
            await self._close(pod, gone=False)

    async def _run(self) -> None:
        while True:
            await self.sync()
            await asyncio.sleep(self.sync_interval_s)

    # ------------------------------------------------------------------ sockets

    def _socket(self, kind: int) -> zmq.asyncio.Socket:
        sock = self.context.socket(kind)
        _limit(sock, self.max_message_bytes)
        return sock

    def _subscribe(self, stream: _Stream) -> bool:
        """Open the stream's SUB socket (and its monitor, before it connects, so no
        ending of the connection goes unseen)."""
        sock: zmq.Socket[bytes] = self._plain.socket(zmq.SUB)
        _limit(sock, self.max_message_bytes)
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

    def _open(self, stream: _Stream) -> bool:
        """Subscribe, and have the loop call `_readable` whenever either socket signals."""
        if not self._subscribe(stream):
            return False
        assert stream.sock is not None and stream.monitor is not None
        loop = asyncio.get_running_loop()
        loop.add_reader(stream.sock.FD, self._readable, stream)
        loop.add_reader(stream.monitor.FD, self._readable, stream)
        self._readable(stream)  # whatever came before the readers
        return True

    def _shut(self, stream: _Stream) -> None:
        """Close the stream's sockets (its readers first: a closed descriptor may be
        reused by the next socket)."""
        loop = asyncio.get_running_loop()
        for sock in (stream.sock, stream.monitor):
            if sock is not None:
                loop.remove_reader(sock.FD)
        _close_sockets(stream.sock, stream.monitor)
        stream.sock = stream.monitor = None

    async def sync(self) -> None:
        """Subscribe to new publishers, close the ones that left or moved."""
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read())
        wanted = {p.pod: p for p in self.publishers()}
        for pod, stream in list(self._streams.items()):
            if wanted.get(pod) != stream.publisher:
                await self._close(pod)
        for pod, publisher in wanted.items():
            if pod in self._streams:
                continue
            stream = _Stream(publisher)
            if self._open(stream):
                self._streams[pod] = stream

    async def _close(self, pod: str, *, gone: bool = True) -> None:
        stream = self._streams.pop(pod)
        stream.closed = True  # a batch of it being applied stops at its next slice
        if stream.reopen is not None:
            stream.reopen.cancel()
        self._shut(stream)
        await cancel_and_wait(stream.replaying)
        if gone:
            self.consumer.gone(pod)

    def _reopen_later(self, stream: _Stream) -> None:
        """The stream's connection ended: open it again after a pause. libzmq ends one
        for a message over the size cap and then, for a protocol error, never
        reconnects by itself (`session_base_t::engine_error`)."""
        self.reconnects += 1
        self._shut(stream)
        stream.reopen = asyncio.get_running_loop().call_later(
            RECONNECT_MIN_MS / 1000, self._reopen, stream
        )

    def _reopen(self, stream: _Stream) -> None:
        stream.reopen = None
        if stream.closed or self._open(stream):
            return
        if self._streams.get(stream.publisher.pod) is stream:  # the next sync starts afresh
            del self._streams[stream.publisher.pod]
            stream.closed = True
            self.consumer.gone(stream.publisher.pod)

    # ------------------------------------------------------------------ reading

    def _readable(self, stream: _Stream) -> None:
        """Put the stream in the reader's line if it has a message or an ended
        connection. Called by the loop when a socket's descriptor signals, and after
        each message taken. ZMQ's descriptor is edge-triggered: it signals commands,
        not messages; reading `EVENTS` runs the commands (which clears it) and says
        whether a message waits, so a stream is put in line once per change and
        checked again after every read, and no wakeup is lost between the two."""
        sock, monitor = stream.sock, stream.monitor
        if sock is None or monitor is None:
            return
        # both read, whatever the stream's state: the loop's readiness is level-triggered,
        # and a descriptor left signalled calls this again on every turn until it is
        pending = _has_message(sock) | _has_message(monitor)
        if not pending or stream.queued or stream.replaying is not None:
            return
        stream.queued = True
        self._ready.append(stream)
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def _read(self) -> None:
        """Every pod's messages, the pods in turn (a pod's own in order), for a share of
        each turn of the loop (`_Turn`). One task reads every socket: a task, a poller
        and its futures a pod cost about 75 µs a message in pyzmq's asyncio machinery,
        against 25 µs read here (1,024 pods each sending ten batches a second, nothing
        else on the loop). A socket that fails is opened again, so no pod's socket can
        end the reading of the others."""
        ready, turn = self._ready, _Turn()
        while True:
            if not ready:
                self._wakeup = asyncio.get_running_loop().create_future()
                try:
                    await self._wakeup
                finally:
                    self._wakeup = None
            turn.start()
            while ready and not turn.spent():
                stream = ready.popleft()
                stream.queued = False
                try:
                    await self._take(stream, turn)
                except zmq.ZMQError as error:
                    log.warning("kv events: %s's socket failed: %s", stream.publisher.pod, error)
                    self._reopen_later(stream)
                self._readable(stream)  # more queued: back in line, behind the others
            await asyncio.sleep(0)

    async def _take(self, stream: _Stream, turn: _Turn) -> None:
        """The stream's next message; once none is queued, its ended connection."""
        sock, monitor = stream.sock, stream.monitor
        if sock is None or monitor is None:  # closed, or opening again
            return
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            pass
        else:
            await self._handle(stream, [f.buffer for f in frames], turn)
            return
        try:
            monitor.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        self._reopen_later(stream)

    # ------------------------------------------------------------------ messages

    async def _handle(self, stream: _Stream, frames: list[memoryview], turn: _Turn) -> None:
        """Apply one `[topic, seq, payload]` message from the stream's pod; after a gap
        the pod's replay first, in a task of its own (the other pods are read while it
        waits, this one's socket is not)."""
        if len(frames) != 3 or len(frames[1]) != 8:
            self.bad_payloads += 1
            return
        seq, payload = int.from_bytes(frames[1], "big"), frames[2]
        last = stream.last_seq
        if last >= 0 and seq <= last:  # the engine restarted: its cache is empty
            self.consumer.restarted(stream.publisher.pod)
        elif last >= 0 and seq > last + 1:
            self.gaps += 1
            if self._replayable(stream):
                stream.replaying = asyncio.get_running_loop().create_task(
                    self._replay_then_apply(stream, last + 1, seq, payload)
                )
                return
        stream.last_seq = seq  # read, whether or not it decodes
        await self._apply(stream, payload, turn)

    async def _apply(self, stream: _Stream, payload: memoryview, turn: _Turn) -> None:
        """The consumer's slices of the batch, the loop given back between two once the
        turn's share is spent."""
        pod = stream.publisher.pod
        try:
            for _ in self.consumer.batch(pod, decode_view(payload)):
                if turn.spent():
                    await asyncio.sleep(0)
                    turn.start()
                    if stream.closed:  # gone meanwhile: the consumer has forgotten the pod
                        return
        except msgspec.DecodeError:  # a validation error is one too
            self.bad_payloads += 1
        except Exception:  # a pod's payload must never end its reading
            self.bad_payloads += 1
            log.exception("kv events: a batch from %s could not be applied", pod)

    def _replayable(self, stream: _Stream) -> bool:
        return bool(stream.publisher.replay) and (
            asyncio.get_running_loop().time() >= stream.replay_after
        )

    async def _replay_then_apply(
        self, stream: _Stream, first: int, upto: int, payload: memoryview
    ) -> None:
        """The gap, then the message that showed it; then the stream is read again."""
        try:
            turn = _Turn()
            await self._replay(stream, first, upto, turn)
            stream.last_seq = upto
            await self._apply(stream, payload, turn)
        finally:
            stream.replaying = None
        self._readable(stream)

    async def _replay(self, stream: _Stream, first: int, upto: int, turn: _Turn) -> None:
        """Batches `first` .. `upto - 1` from the pod's replay ROUTER, if it has one."""
        address = stream.publisher.replay
        assert address is not None
        loop = asyncio.get_running_loop()
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
                await self._apply(stream, frames[2], turn)
                self.replayed += 1
                done = seq == upto - 1
        except zmq.ZMQError as error:
            log.debug("kv events: replay from %s failed: %s", address, error)
        finally:
            dealer.close(linger=0)
        if not done:
            self.replay_failures += 1
            stream.replay_after = loop.time() + REPLAY_BACKOFF_S


def _limit(sock: zmq.Socket[Any], max_message_bytes: int) -> None:
    """What one pod's socket may hold, and how often a silent pod is dialled."""
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
    sock.setsockopt(zmq.RCVHWM, RCVHWM)
    # a pod that publishes nothing (yet) is retried with backoff up to 10 s,
    # not ZMQ's fixed 100 ms: a pool of silent pods costs no connect storm
    sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MIN_MS)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_MAX_MS)


def _has_message(sock: zmq.Socket[bytes]) -> bool:
    return bool(cast(int, sock.get(zmq.EVENTS)) & zmq.POLLIN)


def _close_sockets(sock: zmq.Socket[bytes] | None, monitor: zmq.Socket[bytes] | None) -> None:
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
