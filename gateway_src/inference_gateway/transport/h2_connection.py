"""One client connection of the picker's HTTP/2 gRPC server as a state machine.

No asyncio, no socket, no clock: the caller feeds what the socket read
(`receive_data(data, now)`), takes events one at a time (`events()`), acts on them
and writes `data_to_send()`; time comes in as an argument, and `tick(now)` runs the
keepalive and idle checks. That is how h11 and h2 are built, and it is why every rule
here is tested in-process by feeding frames and reading frames back
(tests/gateway/transport/test_h2_connection.py); the asyncio layer (`http2_server`)
owns the socket, TLS, timers and handlers.

Frames are parsed lazily, one event at a time, so the caller acts on an event
(a handler answers a message) before the frames behind it in the same read are parsed:
an answer and a later RST_STREAM or SETTINGS meet the state in the order the peer sent
them, and everything one read causes goes out in one write.

What it implements: the client preface and SETTINGS, HEADERS + CONTINUATION, DATA with
gRPC length-prefixed messages, flow control in both directions (a stream's receive
window reopens only when its reader takes a message: `read_message`), PING, RST_STREAM,
GOAWAY both ways (a graceful `drain` in two steps, as RFC 9113 §6.8 advises and grpc-go
and nghttp2 do: GOAWAY with the largest stream id and a PING, then, once the PING is
answered, GOAWAY with the last stream really taken, so no stream the peer sent
meanwhile is refused), `grpc-timeout` (reported, the caller keeps the timer), the
per-method message limit (RESOURCE_EXHAUSTED before a larger message is buffered) and
every budget of `ConnectionPolicy` (past one: GOAWAY ENHANCE_YOUR_CALM). Not
implemented: message compression (UNIMPLEMENTED), server push, priorities (ignored).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Mapping

from inference_gateway.transport.h2_frames import (
    ACK,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    DEFAULT_FRAME,
    DEFAULT_WINDOW,
    DRAIN_PING,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_HEAD,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    KEEPALIVE_PING,
    MAX_WINDOW,
    NO_ERROR,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RESPONSE_HEADERS,
    RST_STREAM,
    SETTINGS,
    SETTINGS_ACK,
    TRAILERS_OK,
    WINDOW_UPDATE,
    ConnectionPolicy,
    GrpcCode,
    HeaderDecoder,
    Ration,
    frame,
    parse_grpc_timeout,
    status_block,
    stream_window,
    window_update,
)
from inference_gateway.transport.h2_stream import (
    CallStarted,
    ConnectionDone,
    ConnectionDropped,
    ConnectionTerminated,
    Event,
    Stream,
    StreamReadable,
    StreamStopped,
)

__all__ = [
    "CallStarted",
    "ConnectionDone",
    "ConnectionDropped",
    "ConnectionTerminated",
    "Event",
    "H2Connection",
    "Stream",
    "StreamReadable",
    "StreamStopped",
]

# the server's logger: an operator filters one name for everything the HTTP/2 server says
log = logging.getLogger("inference_gateway.transport.http2_server")


_DONE = ConnectionDone()


class H2Connection:
    """The server side of one HTTP/2 connection carrying gRPC calls.

    `limits` maps each served method path to its largest request message; a request for
    another path is answered UNIMPLEMENTED here, without an event.
    """

    def __init__(
        self,
        policy: ConnectionPolicy,
        limits: Mapping[str, int],
        now: float,
        new_stream: Callable[[int, dict[str, str], int, int, int], Stream] = Stream,
    ) -> None:
        self.policy = policy
        self.new_stream = new_stream  # Stream or a subclass (see Stream)
        self.limits = limits
        self.stream_window = stream_window(limits)
        # a window is given back once the peer has used half of it (read per frame)
        self.stream_half = self.stream_window // 2
        self.connection_half = policy.connection_window // 2
        self.decoder = HeaderDecoder(policy.max_header_list)
        self._data = b""  # the read being parsed, from `_offset` on
        self._view = memoryview(self._data)
        self._offset = 0
        self.queued: deque[Event] = deque()  # events not taken yet (see `events`)
        self._out: list[bytes] = []
        self.preface = False
        self.streams: dict[int, Stream] = {}
        self.last_stream = 0
        self.peer_initial_window = DEFAULT_WINDOW
        self.peer_max_frame = DEFAULT_FRAME
        self.send_window = DEFAULT_WINDOW
        self.recv_window = policy.connection_window  # what the peer may still send us
        self.recv_credit = 0  # bytes consumed (or dropped), not yet given back
        self.header_stream = 0  # a header block continues on this stream
        self.header_flags = 0
        self.header_block = bytearray()
        self.continuations = 0
        self.blocked: dict[int, Stream] = {}  # streams waiting for window
        self.drain_ping_at: float | None = None  # `drain`'s PING went out then, unanswered
        self.goaway_sent = False  # our last GOAWAY (not `drain`'s first) went out
        self.going_away = False  # either side sent GOAWAY: no new streams
        self.closed = False
        self.resets = Ration(*policy.resets, now)
        self.pings = Ration(*policy.pings, now)
        self.settings = Ration(*policy.settings, now)
        self.empty = Ration(*policy.empty_frames, now)
        self.sent_since_ping = True  # HEADERS or DATA written since the peer's last PING
        self.last_read = self.last_active = now
        self.ping_sent_at = 0.0  # our keepalive PING, unanswered since then
        self.write_paused_at = 0.0

    # ------------------------------------------------------------ the caller's side

    def initiate(self) -> None:
        """Queue our SETTINGS (and the connection window beyond the default)."""
        policy = self.policy
        settings = b"".join(
            key.to_bytes(2, "big") + value.to_bytes(4, "big")
            for key, value in (
                (0x2, 0),  # ENABLE_PUSH
                (0x3, policy.max_concurrent_streams),
                (0x4, self.stream_window),
                (0x5, policy.max_frame_size),
                (0x6, policy.max_header_list),
            )
        )
        self._out.append(frame(SETTINGS, 0, 0, settings))
        if policy.connection_window > DEFAULT_WINDOW:
            self._out.append(window_update(0, policy.connection_window - DEFAULT_WINDOW))

    def receive_data(self, data: bytes, now: float) -> None:
        """Take what the socket read; `events()` parses it."""
        if self.closed:  # lingering after GOAWAY: dropped unread
            return
        self.last_read = now
        if self._offset < len(self._data):
            data = self._data[self._offset :] + data
        self._offset = 0
        if not self.preface:
            if len(data) < len(PREFACE):
                self._data, self._view = data, memoryview(data)
                return
            if not data.startswith(PREFACE):
                self._data = b""
                self._abort(PROTOCOL_ERROR, "bad connection preface")
                return
            self.preface = True
            self._offset = len(PREFACE)
        self._data, self._view = data, memoryview(data)

    @property
    def buffered(self) -> int:
        """Received bytes not parsed yet (at most one frame's once events are drained)."""
        return len(self._data) - self._offset

    def events(self) -> Iterator[Event]:
        """The events of what was received, parsed lazily: a frame is handled only once
        the events before it were taken, and what the caller does in between (an answer,
        a reset) is seen by the frames after it. Events the caller's own calls cause
        (`send`, `finish`, `goaway`, `tick`, ...) come out of it too, or wait in
        `queued` when no read is being parsed.

        A generator, with the frame loop written out in it: it runs for every frame the
        picker receives, and resuming it costs less than a method call per event."""
        queued = self.queued
        while queued:
            yield queued.popleft()
        data, view = self._data, self._view
        size, max_frame = len(data), self.policy.max_frame_size
        while size - (offset := self._offset) >= 9 and not self.closed and self.preface:
            high, low, kind, flags, stream = FRAME_HEAD.unpack_from(data, offset)
            length = high << 16 | low
            if length > max_frame:
                self._abort(FRAME_SIZE_ERROR, "frame too large")
            else:
                end = offset + 9 + length
                if end > size:
                    return
                self._offset = end
                payload = view[offset + 9 : end]
                stream &= 0x7FFFFFFF
                if self.header_stream and kind != CONTINUATION:
                    self._abort(PROTOCOL_ERROR, "header block interrupted")
                elif kind == DATA:
                    self._on_data(flags, stream, payload)
                elif kind == WINDOW_UPDATE:
                    self._on_window_update(stream, payload)
                else:
                    self._on_control(kind, flags, stream, payload)
            while queued:
                yield queued.popleft()

    def data_to_send(self) -> bytes:
        """Everything queued for the peer, as one write."""
        out = self._out
        if not out:
            return b""
        data = b"".join(out)  # a single item comes back as it is, uncopied
        out.clear()
        return data

    def read_message(self, stream: Stream) -> bytes | None:
        """The stream's next message (None when none has arrived); reading is what
        reopens the flow-control windows for its bytes."""
        if not stream.inbox:
            return None
        message = stream.inbox.popleft()
        # _consumed, written out: this runs for every message a handler reads
        size = min(len(message) + 5, stream.held)  # 0 once the stream left the table
        if size > 0:
            stream.held -= size
            stream.recv_credit += size
            self.recv_credit += size
            if stream.recv_window < self.stream_half or self.recv_window < self.connection_half:
                self._credit(stream, 0)
        return message

    def send(self, stream: Stream, messages: list[bytes]) -> None:
        """Queue response messages and frame what the peer's windows allow."""
        if stream.done or stream.cancelled:
            return
        pending = stream.pending
        for message in messages:
            pending += b"\x00" + len(message).to_bytes(4, "big")
            pending += message
        self._flush(stream)

    def finish(self, stream: Stream, code: int = GrpcCode.OK, message: str = "") -> None:
        """End the call with a status (the trailers go out after any queued data)."""
        if stream.done or stream.cancelled:
            return
        stream.done = True
        stream.trailers = TRAILERS_OK if code == 0 and not message else status_block(code, message)
        self._flush(stream)

    def expire(self, stream: Stream) -> None:
        """The call's `grpc-timeout` has passed: DEADLINE_EXCEEDED, handler stopped."""
        if not stream.done and not stream.cancelled:
            self._end(stream, GrpcCode.DEADLINE_EXCEEDED, "deadline exceeded")

    def cancel(self, stream: Stream) -> None:
        """Stop the call without answering (server shutdown)."""
        self._cancel(stream)

    def drain(self, now: float) -> None:
        """Graceful, in two steps: GOAWAY with the largest stream id (the peer opens no
        new stream here, and the ones it already sent are still taken) and a PING; once
        the PING is answered (or a keepalive timeout passed), `goaway()` names the last
        stream taken. Streams in flight run to their end meanwhile."""
        if self.closed or self.goaway_sent or self.drain_ping_at is not None:
            return
        self.drain_ping_at = now
        payload = MAX_WINDOW.to_bytes(4, "big") + NO_ERROR.to_bytes(4, "big")
        self._write([frame(GOAWAY, 0, 0, payload), frame(PING, 0, 0, DRAIN_PING)])

    def goaway(self) -> None:
        """Graceful: no new streams; `ConnectionDone` once the last one ends."""
        if self.closed or self.goaway_sent:
            return
        self.drain_ping_at = None
        self.goaway_sent = self.going_away = True
        payload = self.last_stream.to_bytes(4, "big") + NO_ERROR.to_bytes(4, "big")
        self._write([frame(GOAWAY, 0, 0, payload)])
        if not self.streams:
            self.queued.append(_DONE)

    def pause_writing(self, now: float) -> None:
        """The peer is not reading our writes (the caller stops reading from it)."""
        self.write_paused_at = now

    def resume_writing(self) -> None:
        self.write_paused_at = 0.0

    def connection_lost(self) -> None:
        """The socket is gone: every call is cancelled."""
        self.closed = True
        for stream in list(self.streams.values()):
            stream.readable = None
            self._cancel(stream)
        self.streams.clear()
        self.blocked.clear()

    def tick_interval(self) -> float:
        """How often `tick` should run: a few times per keepalive period, not per frame."""
        policy = self.policy
        return min(policy.keepalive_s, policy.keepalive_timeout_s, policy.idle_timeout_s) / 2

    def tick(self, now: float) -> bool:
        """Keepalive and idle checks; False once no further tick is needed."""
        if self.closed:
            return False
        policy = self.policy
        if self.write_paused_at and now - self.write_paused_at >= policy.keepalive_timeout_s:
            return self._drop(f"peer stopped reading for {now - self.write_paused_at:.0f} s")
        if self.ping_sent_at and now - self.ping_sent_at >= policy.keepalive_timeout_s:
            return self._drop("peer did not answer a keepalive PING")
        drained_at = self.drain_ping_at
        if drained_at is not None and now - drained_at >= policy.keepalive_timeout_s:
            self.goaway()  # the drain's PING went unanswered: end the drain anyway
        if self.streams:
            self.last_active = now
        elif now - self.last_active >= policy.idle_timeout_s:
            self.goaway()
            return False
        if not self.ping_sent_at and now - self.last_read >= policy.keepalive_s:
            self.ping_sent_at = now
            self._write([frame(PING, 0, 0, KEEPALIVE_PING)])
        return True

    def _drop(self, reason: str) -> bool:
        self.closed = True
        self.queued.append(ConnectionDropped(reason))
        return False

    # ------------------------------------------------------------ frames

    def _on_control(self, kind: int, flags: int, stream: int, payload: memoryview) -> None:
        """Every frame but DATA and WINDOW_UPDATE (and a CONTINUATION out of place)."""
        if kind == HEADERS:
            self._on_headers(flags, stream, payload)
        elif kind == CONTINUATION:
            self._on_continuation(flags, stream, payload)
        elif kind == SETTINGS:
            self._on_settings(flags, stream, payload)
        elif kind == PING:
            self._on_ping(flags, stream, payload)
        elif kind == RST_STREAM:
            self._on_rst_stream(stream, payload)
        elif kind == GOAWAY:
            self._on_goaway(stream, payload)
        elif kind == PRIORITY:
            self._on_priority(stream, payload)
        elif kind == PUSH_PROMISE:
            self._abort(PROTOCOL_ERROR, "clients cannot push")
        elif not self.empty.take(self.last_read):  # unknown types: ignored, rationed
            self._calm("too many frames that do nothing")

    def _on_data(self, flags: int, stream_id: int, payload: memoryview) -> None:
        length = len(payload)
        if length > self.recv_window:
            self._abort(FLOW_CONTROL_ERROR, "DATA beyond the connection window")
            return
        self.recv_window -= length
        if not length and not flags & END_STREAM and not self.empty.take(self.last_read):
            self._calm("too many empty DATA frames")
            return
        stream = self.streams.get(stream_id)
        if stream is None or stream.closed_remote:
            if stream_id == 0 or stream_id > self.last_stream:
                self._abort(PROTOCOL_ERROR, "DATA on an idle stream")
                return
            self._credit(None, length)  # a stream we already ended: dropped
            return
        if length > stream.recv_window:
            self._credit(None, length)
            self._reset(stream, FLOW_CONTROL_ERROR)
            return
        stream.recv_window -= length
        stream.held += length
        if flags & PADDED:
            pad = payload[0] if length else 0
            if pad >= length:
                self._abort(PROTOCOL_ERROR, "bad padding")
                return
            payload = payload[1 : length - pad]
            self._consumed(stream, pad + 1)
        if payload and stream.done:  # we have answered: nobody reads the rest
            self._consumed(stream, len(payload))
        elif payload:
            refused = stream.take_data(payload)
            if refused is not None:
                self._end(stream, *refused)
                self._consumed(stream, len(stream.partial))
                stream.partial.clear()
                return
        if flags & END_STREAM:
            stream.closed_remote = True
            self.queued.append(stream.readable or StreamReadable(stream))
            self._maybe_close(stream)
            return
        if stream.inbox:  # unread messages (a reader that is not waiting ignores it)
            self.queued.append(stream.readable or StreamReadable(stream))
        if self.recv_window < self.connection_half or stream.recv_window < (self.stream_half):
            self._credit(stream, 0)

    def _on_headers(self, flags: int, stream: int, payload: memoryview) -> None:
        if stream == 0:
            self._abort(PROTOCOL_ERROR, "HEADERS on stream 0")
            return
        length = len(payload)
        start, end = 0, length
        if flags & PADDED:
            if not length:
                self._abort(PROTOCOL_ERROR, "bad padding")
                return
            start, end = 1, length - payload[0]
        if flags & PRIORITY_FLAG:
            start += 5
        if start > end:
            self._abort(PROTOCOL_ERROR, "bad HEADERS")
            return
        self.header_flags = flags
        if flags & END_HEADERS:
            self._header_block(stream, flags, payload[start:end])
        else:
            if start == end and not self.empty.take(self.last_read):
                self._calm("too many empty header fragments")
                return
            self.header_stream = stream
            self.header_block = bytearray(payload[start:end])
            self.continuations = 0

    def _on_continuation(self, flags: int, stream: int, payload: memoryview) -> None:
        if stream != self.header_stream or not stream:
            self._abort(PROTOCOL_ERROR, "unexpected CONTINUATION")
            return
        self.continuations += 1
        if self.continuations > self.policy.max_continuations:
            self._calm("too many CONTINUATION frames")
            return
        if not payload and not flags & END_HEADERS and not self.empty.take(self.last_read):
            self._calm("too many empty CONTINUATION frames")
            return
        self.header_block += payload
        if len(self.header_block) > self.policy.max_header_block:
            self._abort(PROTOCOL_ERROR, "header block too large")
            return
        if flags & END_HEADERS:
            self.header_stream = 0
            block, self.header_block = bytes(self.header_block), bytearray()
            self._header_block(stream, self.header_flags, block)

    def _on_ping(self, flags: int, stream: int, payload: memoryview) -> None:
        if len(payload) != 8:
            self._abort(FRAME_SIZE_ERROR, "PING is not 8 bytes")
        elif stream:
            self._abort(PROTOCOL_ERROR, "PING on a stream")
        elif flags & ACK:
            if payload == KEEPALIVE_PING:
                self.ping_sent_at = 0.0
            elif payload == DRAIN_PING and self.drain_ping_at is not None:
                self.goaway()  # every stream the peer opened before our GOAWAY is here
        elif not self.sent_since_ping and not self.pings.take(self.last_read):
            self._calm("too many PINGs")
        else:
            self.sent_since_ping = False
            self._write([frame(PING, ACK, 0, bytes(payload))])

    def _on_rst_stream(self, stream: int, payload: memoryview) -> None:
        if len(payload) != 4:
            self._abort(FRAME_SIZE_ERROR, "RST_STREAM is not 4 bytes")
        elif not stream or stream > self.last_stream:
            self._abort(PROTOCOL_ERROR, "RST_STREAM on an idle stream")
        else:
            # Rapid reset (CVE-2023-44487) is a call reset before the server answered it:
            # work started and never shown. A reset after the answer began, or of a call
            # already over, is how a client ends a call it is done with: Envoy's ext_proc
            # resets each stream when its HTTP request ends, hundreds a second under load.
            call = self.streams.get(stream)
            unanswered = call is not None and not call.headers_sent
            if unanswered and not self.resets.take(self.last_read):
                self._calm("too many stream resets")
            elif call is not None:
                self._forget(call)
                self._cancel(call)

    def _on_goaway(self, stream: int, payload: memoryview) -> None:
        if len(payload) < 8:
            self._abort(FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes")
        elif stream:
            self._abort(PROTOCOL_ERROR, "GOAWAY on a stream")
        else:
            self.going_away = True
            if not self.streams:
                self.queued.append(_DONE)

    def _on_priority(self, stream: int, payload: memoryview) -> None:
        if len(payload) != 5:
            self._abort(FRAME_SIZE_ERROR, "PRIORITY is not 5 bytes")
        elif not stream:
            self._abort(PROTOCOL_ERROR, "PRIORITY on stream 0")
        elif not self.empty.take(self.last_read):  # priorities are ignored (RFC 9113 5.3)
            self._calm("too many PRIORITY frames")

    def _header_block(self, stream_id: int, flags: int, block: bytes | memoryview) -> None:
        headers = self.decoder.decode(bytes(block))
        if headers is None:
            self._abort(COMPRESSION_ERROR, "bad header block")
            return
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers: only the end of the stream matters
            if flags & END_STREAM:
                stream.closed_remote = True
                self.queued.append(stream.readable or StreamReadable(stream))
                self._maybe_close(stream)
            return
        if stream_id <= self.last_stream:
            return  # trailers of a stream we already ended
        if not stream_id & 1:
            self._abort(PROTOCOL_ERROR, "even stream id from a client")
            return
        self.last_stream = stream_id
        if self.going_away or len(self.streams) >= self.policy.max_concurrent_streams:
            if not self.resets.take(self.last_read):  # a refusal costs what a reset does
                self._calm("too many refused streams")
                return
            self._write([frame(RST_STREAM, 0, stream_id, REFUSED_STREAM.to_bytes(4, "big"))])
            return
        path = headers.get(":path", "")
        limit = self.limits.get(path)
        stream = self.new_stream(
            stream_id, headers, limit or 0, self.peer_initial_window, self.stream_window
        )
        if flags & END_STREAM:
            stream.closed_remote = True
        self.streams[stream_id] = stream
        encoding = headers.get("grpc-encoding", "identity")
        timeout = headers.get("grpc-timeout")
        seconds = parse_grpc_timeout(timeout) if timeout is not None else None
        if limit is None:
            self._end(stream, GrpcCode.UNIMPLEMENTED, f"unknown method {headers.get(':path')}")
        elif headers.get(":method") != "POST" or not headers.get("content-type", "").startswith(
            "application/grpc"
        ):
            self._end(stream, GrpcCode.INTERNAL, "not a gRPC request")
        elif encoding != "identity":
            self._end(stream, GrpcCode.UNIMPLEMENTED, f"grpc-encoding {encoding} not supported")
        elif timeout is not None and seconds is None:
            self._end(stream, GrpcCode.INTERNAL, f"malformed grpc-timeout {timeout!r}")
        else:
            stream.started = True
            self.queued.append(CallStarted(stream, seconds))

    def _on_window_update(self, stream_id: int, payload: memoryview) -> None:
        if len(payload) != 4:
            self._abort(FRAME_SIZE_ERROR, "WINDOW_UPDATE is not 4 bytes")
            return
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if stream_id == 0:
            if not increment:
                self._abort(PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
                return
            self.send_window += increment
            if self.send_window > MAX_WINDOW:
                self._abort(FLOW_CONTROL_ERROR, "window overflow")
                return
            for blocked in list(self.blocked.values()):
                self._flush(blocked)
            return
        if stream_id > self.last_stream:
            self._abort(PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream")
            return
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        if not increment or stream.send_window + increment > MAX_WINDOW:
            self._reset(stream, PROTOCOL_ERROR if not increment else FLOW_CONTROL_ERROR)
            return
        stream.send_window += increment
        self._flush(stream)

    def _on_settings(self, flags: int, stream: int, payload: memoryview) -> None:
        if stream:
            self._abort(PROTOCOL_ERROR, "SETTINGS on a stream")
            return
        if len(payload) % 6 or (flags & ACK and payload):
            self._abort(FRAME_SIZE_ERROR, "bad SETTINGS length")
            return
        if flags & ACK:
            return
        if not self.settings.take(self.last_read):
            self._calm("too many SETTINGS")
            return
        for i in range(0, len(payload), 6):
            key = int.from_bytes(payload[i : i + 2], "big")
            value = int.from_bytes(payload[i + 2 : i + 6], "big")
            if key == 0x2 and value > 1:
                self._abort(PROTOCOL_ERROR, "bad ENABLE_PUSH")
                return
            if key == 0x4:
                if value > MAX_WINDOW:
                    self._abort(FLOW_CONTROL_ERROR, "initial window too large")
                    return
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for call in self.streams.values():
                    call.send_window += delta
                    if call.send_window > MAX_WINDOW:
                        self._abort(FLOW_CONTROL_ERROR, "window overflow")
                        return
            elif key == 0x5:
                if not DEFAULT_FRAME <= value <= 2**24 - 1:
                    self._abort(PROTOCOL_ERROR, "bad max frame size")
                    return
                self.peer_max_frame = value
        self._write([SETTINGS_ACK])
        for call in list(self.streams.values()):
            if call.pending:
                self._flush(call)

    # ------------------------------------------------------------ receive windows

    def _consumed(self, stream: Stream, size: int) -> None:
        """`size` bytes of the stream's DATA were read (or dropped): they may be resent."""
        size = min(size, stream.held)  # nothing, once the stream has left the table
        if size <= 0:
            return
        stream.held -= size
        stream.recv_credit += size
        self.recv_credit += size
        if stream.recv_window < self.stream_half or self.recv_window < self.connection_half:
            self._credit(stream, 0)

    def _credit(self, stream: Stream | None, dropped: int) -> None:
        """Give back window: `dropped` bytes nobody will read, plus what was consumed,
        once the peer has used half a window (WINDOW_UPDATE frames stay rare)."""
        self.recv_credit += dropped
        out = []
        if self.recv_credit and self.recv_window < self.connection_half:
            out.append(window_update(0, self.recv_credit))
            self.recv_window += self.recv_credit
            self.recv_credit = 0
        if (
            stream is not None
            and stream.recv_credit
            and not stream.closed_remote
            and stream.id in self.streams
            and stream.recv_window < self.stream_half
        ):
            out.append(window_update(stream.id, stream.recv_credit))
            stream.recv_window += stream.recv_credit
            stream.recv_credit = 0
        if out:
            self._write(out)

    def _forget(self, stream: Stream) -> None:
        """The stream leaves the table: what it still holds is given back."""
        self.streams.pop(stream.id, None)
        self.blocked.pop(stream.id, None)
        stream.readable = None  # the stream↔event cycle ends: refcounting frees both
        if stream.held:
            held, stream.held = stream.held, 0
            stream.inbox.clear()
            stream.partial.clear()
            self._credit(None, held)

    # ------------------------------------------------------------ sending

    def _flush(self, stream: Stream) -> None:
        """Frame what the windows allow of the stream's queued data, then its trailers."""
        if self.closed or stream.cancelled:
            return
        self.sent_since_ping = True
        out: list[bytes] = []
        stream_id = stream.id
        if not stream.headers_sent:
            stream.headers_sent = True
            if stream.done and not stream.pending and stream.trailers is not None:
                # trailers-only answer
                block = RESPONSE_HEADERS + stream.trailers
                out.append(frame(HEADERS, END_HEADERS | END_STREAM, stream_id, block))
                stream.trailers = None
                self._out.extend(out)  # not closed: checked on entry
                self._closed_local(stream)
                return
            out.append(frame(HEADERS, END_HEADERS, stream_id, RESPONSE_HEADERS))
        pending = stream.pending
        if pending:
            head = stream_id.to_bytes(4, "big")
            limit = self.peer_max_frame
            while pending:
                window = min(self.send_window, stream.send_window)
                if window <= 0:
                    break
                n = min(len(pending), window, limit)
                out.append(n.to_bytes(3, "big") + b"\x00\x00" + head)
                out.append(bytes(pending[:n]) if n < len(pending) else bytes(pending))
                del pending[:n]
                self.send_window -= n
                stream.send_window -= n
            if pending:
                self.blocked[stream_id] = stream
            else:
                self.blocked.pop(stream_id, None)
        if stream.trailers is not None and not pending:
            out.append(frame(HEADERS, END_HEADERS | END_STREAM, stream_id, stream.trailers))
            stream.trailers = None
            self._out.extend(out)  # not closed: checked on entry
            self._closed_local(stream)
            return
        if out:
            self._out.extend(out)  # not closed: checked on entry

    def _write(self, frames: list[bytes]) -> None:
        if not self.closed:
            self._out.extend(frames)

    def _closed_local(self, stream: Stream) -> None:
        """Our side ended; the stream leaves the table (late client data is dropped)."""
        self._forget(stream)
        # No RST_STREAM(NO_ERROR) when the client has not half-closed (RFC 9113 8.1 allows
        # one): gRPC clients then fail a write already in flight instead of ignoring it,
        # as they do against grpcio's server. Late DATA is counted and dropped.
        if self.going_away and not self.streams:
            self.queued.append(_DONE)

    def _maybe_close(self, stream: Stream) -> None:
        if stream.done and stream.trailers is None and not stream.pending:
            self._forget(stream)

    def _end(self, stream: Stream, code: int, message: str) -> None:
        self.finish(stream, code, message)
        if stream.started:
            self.queued.append(StreamStopped(stream))

    def _reset(self, stream: Stream, error: int) -> None:
        """A stream error: RST_STREAM, the handler stopped."""
        self._write([frame(RST_STREAM, 0, stream.id, error.to_bytes(4, "big"))])
        self._forget(stream)
        self._cancel(stream)

    def _cancel(self, stream: Stream) -> None:
        if stream.cancelled:
            return
        stream.cancelled = True
        if stream.started:
            self.queued.append(StreamStopped(stream))

    def _calm(self, reason: str) -> None:
        """A budget is spent: GOAWAY ENHANCE_YOUR_CALM (RFC 9113 7), calls cancelled."""
        self._abort(ENHANCE_YOUR_CALM, reason)

    def _abort(self, error: int, reason: str) -> None:
        """GOAWAY with `error` after what is queued, every call cancelled, reading over."""
        log.warning("HTTP/2 connection error: %s", reason)
        if self.closed:
            return
        payload = self.last_stream.to_bytes(4, "big") + error.to_bytes(4, "big")
        self._out.append(frame(GOAWAY, 0, 0, payload + reason.encode()))
        self.closed = True
        self.queued.append(ConnectionTerminated(error, reason))
        for stream in list(self.streams.values()):
            self._cancel(stream)
