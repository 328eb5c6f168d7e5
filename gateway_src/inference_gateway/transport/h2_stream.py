"""What one HTTP/2 stream of the picker's server holds, and the events its connection
reports (`h2_connection.H2Connection.events`). No asyncio: the asyncio layer turns
each event into an action on a socket, a timer or a handler.
"""

from __future__ import annotations

from collections import deque

from inference_gateway.transport.h2_frames import GrpcCode

__all__ = [
    "CallStarted",
    "ConnectionDone",
    "ConnectionDropped",
    "ConnectionTerminated",
    "Event",
    "Stream",
    "StreamReadable",
    "StreamStopped",
]


class Stream:
    """One gRPC call (an HTTP/2 stream): its windows, received messages and queued answer.

    A caller keeps its own per-call state on the same object by subclassing it (with
    `__slots__`) and handing `H2Connection` the subclass's factory (`new_stream`): the
    asyncio layer's `Call` is one. One object per call, freed by reference counting.
    """

    __slots__ = (
        "cancelled",
        "closed_remote",
        "done",
        "headers",
        "headers_sent",
        "held",
        "id",
        "inbox",
        "max_message",
        "partial",
        "pending",
        "readable",
        "recv_credit",
        "recv_window",
        "send_window",
        "started",
        "trailers",
    )

    def __init__(
        self,
        stream_id: int,
        headers: dict[str, str],
        max_message: int,
        send_window: int,
        recv_window: int,
    ) -> None:
        self.id = stream_id
        self.headers = headers
        self.max_message = max_message
        self.inbox: deque[bytes] = deque()  # whole messages, not yet read
        self.partial = bytearray()  # the start of a message still arriving
        self.cancelled = False
        self.closed_remote = False
        self.done = False  # trailers queued: nothing more is sent
        self.started = False  # CallStarted was reported: a handler runs for it
        self.headers_sent = False
        self.pending = bytearray()  # framed gRPC data waiting for the peer's window
        self.trailers: bytes | None = None
        self.send_window = send_window
        self.recv_window = recv_window  # what the peer may still send us
        self.recv_credit = 0  # bytes read, not yet given back
        self.held = 0  # bytes received and not yet read (they hold connection window)
        # its readable event, made once: messages arrive far more often than streams
        # (the connection drops it when the stream leaves the table)
        self.readable: StreamReadable | None = StreamReadable(self)

    def take_data(self, chunk: bytes | memoryview) -> tuple[int, str] | None:
        """Split length-prefixed messages out of DATA; a gRPC status if one is refused."""
        partial = self.partial
        if not partial and len(chunk) >= 5 and chunk[0] == 0:
            # Fast path: whole messages in this frame, nothing carried over.
            size = int.from_bytes(chunk[1:5], "big")
            if len(chunk) == 5 + size and size <= self.max_message:
                self.inbox.append(bytes(chunk[5:]))
                return None
        partial += chunk
        while len(partial) >= 5:
            if partial[0] != 0:
                return GrpcCode.UNIMPLEMENTED, "compressed messages are not supported"
            size = int.from_bytes(partial[1:5], "big")
            if size > self.max_message:
                return (
                    GrpcCode.RESOURCE_EXHAUSTED,
                    f"message of {size} bytes is over the limit of {self.max_message}",
                )
            if len(partial) < 5 + size:
                break
            self.inbox.append(bytes(partial[5 : 5 + size]))
            del partial[: 5 + size]
        return None


class CallStarted:
    """A valid gRPC request opened `stream` (its method is `stream.headers[":path"]`):
    run its handler. `timeout_s` is its `grpc-timeout`; on expiry call `expire`."""

    __slots__ = ("stream", "timeout_s")

    def __init__(self, stream: Stream, timeout_s: float | None) -> None:
        self.stream, self.timeout_s = stream, timeout_s


class StreamReadable:
    """Messages arrived on `stream`, or the client half-closed it: wake its reader."""

    __slots__ = ("stream",)

    def __init__(self, stream: Stream) -> None:
        self.stream = stream


class StreamStopped:
    """`stream`'s handler must stop: the peer reset it, the connection ended, or the
    server ended it with a status (deadline, refused message). `stream.cancelled` tells
    a cancel (nothing more is sent) from an end (its trailers are queued)."""

    __slots__ = ("stream",)

    def __init__(self, stream: Stream) -> None:
        self.stream = stream


class ConnectionTerminated:
    """A connection error: GOAWAY(`error`) is the last thing in `data_to_send()`. Write
    it, shut the socket for writing and drop what the peer still sends for a moment (a
    "lingering close", as nghttp2 and Go do: closing with unread input resets the
    socket, and the peer would lose the GOAWAY and its reason)."""

    __slots__ = ("error", "reason")

    def __init__(self, error: int, reason: str) -> None:
        self.error, self.reason = error, reason


class ConnectionDone:
    """Graceful end: GOAWAY was exchanged and no stream is left; close the socket."""

    __slots__ = ()


class ConnectionDropped:
    """The peer stopped reading our writes or answering our PING: abort the socket."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


Event = (
    CallStarted | StreamReadable | StreamStopped | ConnectionTerminated | ConnectionDone
) | ConnectionDropped
