"""The picker's HTTP/2 connection state machine (`transport.h2_connection`), in-process.

No socket, no event loop: bytes go in, events and bytes come out, and time is an
argument, as h11's and h2's own tests drive them. The well-formed peer is the `h2`
library's client (python-hyper/h2 4.x, an implementation of RFC 9113 written apart from
ours), so every answer is also checked by a real HTTP/2 parser; hostile frames are
built raw, as RFC 9113 §4.1 lays them out. gRPC framing and trailers follow gRPC's
PROTOCOL-HTTP2.md (grpc/grpc, doc/PROTOCOL-HTTP2.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from h2.config import H2Configuration
from h2.connection import H2Connection as H2Client
from h2.events import DataReceived, ResponseReceived, StreamEnded, TrailersReceived

from inference_gateway.transport.h2_connection import H2Connection
from inference_gateway.transport.h2_frames import (
    DATA,
    ENHANCE_YOUR_CALM,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    NO_ERROR,
    PING,
    PROTOCOL_ERROR,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    ConnectionPolicy,
    GrpcCode,
)
from inference_gateway.transport.h2_stream import (
    CallStarted,
    ConnectionDone,
    ConnectionDropped,
    ConnectionTerminated,
    StreamReadable,
    StreamStopped,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
ECHO = "/test.Echo/Once"
LIMITS = {ECHO: 1_024}


@dataclass
class Frame:
    kind: int
    flags: int
    stream: int
    payload: bytes

    @property
    def code(self) -> int:
        """GOAWAY's error code (bytes 4-8), RST_STREAM's (bytes 0-4)."""
        start = 4 if self.kind == GOAWAY else 0
        return int.from_bytes(self.payload[start : start + 4], "big")


def raw(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


def frames(data: bytes) -> list[Frame]:
    out, offset = [], 0
    while offset < len(data):
        length = int.from_bytes(data[offset : offset + 3], "big")
        kind, flags = data[offset + 3], data[offset + 4]
        stream = int.from_bytes(data[offset + 5 : offset + 9], "big") & 0x7FFFFFFF
        out.append(Frame(kind, flags, stream, data[offset + 9 : offset + 9 + length]))
        offset += 9 + length
    return out


def grpc(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


def events(conn: H2Connection) -> list[Any]:
    return list(conn.events())


class Peer:
    """A gRPC client on `h2`, wired to a server `H2Connection` by hand."""

    def __init__(self, policy: ConnectionPolicy | None = None, now: float = 0.0) -> None:
        self.server = H2Connection(policy or ConnectionPolicy(), LIMITS, now)
        self.server.initiate()
        self.client = H2Client(H2Configuration(client_side=True, header_encoding="utf-8"))
        self.client.initiate_connection()
        self.now = now
        self.seen: list[Any] = []  # the client's events

    def exchange(self, extra: bytes = b"") -> list[Any]:
        """Client bytes (and `extra` raw ones) to the server, its answer back; the
        server's events."""
        self.server.receive_data(self.client.data_to_send() + extra, self.now)
        got = events(self.server)
        self.answer()
        return got

    def answer(self) -> bytes:
        """What the server queued, into the client (returned raw as well)."""
        data = self.server.data_to_send()
        if data:
            self.seen += self.client.receive_data(data)
        return data

    def call(self, path: str = ECHO, extra: list[tuple[str, str]] | None = None) -> int:
        stream: int = self.client.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "picker"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *(extra or []),
        ]
        self.client.send_headers(stream, headers)
        return stream

    def trailers(self, stream: int) -> dict[str, str]:
        for event in self.seen:
            if isinstance(event, TrailersReceived) and event.stream_id == stream:
                return dict(event.headers)
            if isinstance(event, ResponseReceived) and event.stream_id == stream:
                headers = dict(event.headers)
                if "grpc-status" in headers:  # trailers-only answer
                    return headers
        return {}


def test_handshake_announces_the_policy() -> None:
    """Our SETTINGS carry the policy (RFC 9113 §6.5.2), the connection window is opened
    beyond the default with one WINDOW_UPDATE, and the client's SETTINGS are ACKed."""
    policy = ConnectionPolicy(max_concurrent_streams=7, connection_window=2**20)
    conn = H2Connection(policy, LIMITS, 0.0)
    conn.initiate()
    out = frames(conn.data_to_send())
    assert [f.kind for f in out] == [SETTINGS, WINDOW_UPDATE]
    settings = {
        int.from_bytes(out[0].payload[i : i + 2], "big"): int.from_bytes(
            out[0].payload[i + 2 : i + 6], "big"
        )
        for i in range(0, len(out[0].payload), 6)
    }
    assert settings[0x2] == 0 and settings[0x3] == 7 and settings[0x5] == 65_536
    assert settings[0x4] == 65_535  # the largest method's message (1 KiB) fits the default
    assert int.from_bytes(out[1].payload, "big") == 2**20 - 65_535
    conn.receive_data(PREFACE + raw(SETTINGS, 0, 0), 0.0)
    assert events(conn) == []
    assert [(f.kind, f.flags) for f in frames(conn.data_to_send())] == [(SETTINGS, 1)]


def test_a_call_in_and_its_answer_out() -> None:
    """HEADERS + DATA in: CallStarted, then StreamReadable; the message is read, answered
    and ended with trailers grpc-status 0, and the stream leaves the table."""
    peer = Peer()
    stream = peer.call()
    peer.client.send_data(stream, grpc(b"hello"), end_stream=True)
    got = peer.exchange()
    assert [type(e) for e in got] == [CallStarted, StreamReadable]
    call = got[0].stream
    assert got[0].timeout_s is None and call.headers[":path"] == ECHO
    assert peer.server.read_message(call) == b"hello"
    assert peer.server.read_message(call) is None and call.closed_remote
    peer.server.send(call, [b"a", b"bc"])
    peer.server.finish(call)
    peer.answer()
    data = b"".join(e.data for e in peer.seen if isinstance(e, DataReceived))
    assert data == grpc(b"a") + grpc(b"bc")
    assert peer.trailers(stream) == {"grpc-status": "0"}
    assert any(isinstance(e, StreamEnded) for e in peer.seen)
    assert peer.server.streams == {}


def test_unknown_method_is_answered_without_an_event() -> None:
    peer = Peer()
    stream = peer.call("/no.Such/Method")
    got = peer.exchange()
    assert got == []
    assert peer.trailers(stream)["grpc-status"] == str(GrpcCode.UNIMPLEMENTED)
    assert peer.server.streams == {}


def test_grpc_timeout_is_reported_and_expire_ends_the_call() -> None:
    peer = Peer()
    stream = peer.call(extra=[("grpc-timeout", "250m")])
    (started,) = peer.exchange()
    assert isinstance(started, CallStarted) and started.timeout_s == 0.25
    peer.server.expire(started.stream)
    assert [type(e) for e in events(peer.server)] == [StreamStopped]
    assert not started.stream.cancelled  # ended with a status, not cancelled
    peer.answer()
    assert peer.trailers(stream)["grpc-status"] == str(GrpcCode.DEADLINE_EXCEEDED)


def test_malformed_grpc_timeout_is_internal() -> None:
    peer = Peer()
    stream = peer.call(extra=[("grpc-timeout", "1x")])
    assert peer.exchange() == []
    assert peer.trailers(stream)["grpc-status"] == str(GrpcCode.INTERNAL)


def test_receive_window_reopens_on_read_not_on_arrival() -> None:
    """Bytes a handler has not read keep holding the window (so a slow handler slows its
    client instead of growing our buffers); reading the message gives them back."""
    peer = Peer(ConnectionPolicy(connection_window=65_535))
    stream = peer.call()
    (started,) = peer.exchange()
    call = started.stream
    for _ in range(63):  # 63 x 1,029 bytes: past half the stream window
        peer.client.send_data(stream, grpc(b"x" * 1_024))
    peer.server.receive_data(peer.client.data_to_send(), 0.0)
    got = events(peer.server)
    assert not [f for f in frames(peer.answer()) if f.kind == WINDOW_UPDATE]
    assert {type(e) for e in got} == {StreamReadable}
    assert call.held == 63 * 1_029
    before = peer.client.local_flow_control_window(stream)
    assert before == 65_535 - 63 * 1_029
    while peer.server.read_message(call) is not None:
        pass
    out = frames(peer.answer())
    assert {f.stream for f in out if f.kind == WINDOW_UPDATE} == {0, stream}
    assert peer.client.local_flow_control_window(stream) > max(before, 65_535 // 2)
    assert call.held == 0


def test_oversized_message_is_refused_before_it_is_buffered() -> None:
    """A message over its method's limit ends the call RESOURCE_EXHAUSTED as soon as its
    length prefix arrives; the handler is stopped and nothing of it is kept."""
    peer = Peer()
    stream = peer.call()
    (started,) = peer.exchange()
    peer.client.send_data(stream, (b"\x00" + (1_025).to_bytes(4, "big") + b"y" * 100))
    got = peer.exchange()
    assert [type(e) for e in got] == [StreamStopped]
    assert started.stream.partial == bytearray() and started.stream.held == 0
    assert peer.trailers(stream)["grpc-status"] == str(GrpcCode.RESOURCE_EXHAUSTED)


def test_frames_behind_an_event_wait_for_the_caller() -> None:
    """One read holding a message and a RST_STREAM: the message's event comes while the
    stream is still open, so the answer goes out before the reset is seen."""
    peer = Peer()
    stream = peer.call()
    (started,) = peer.exchange()
    call = started.stream
    data = raw(DATA, 0, stream, grpc(b"q")) + raw(RST_STREAM, 0, stream, (8).to_bytes(4, "big"))
    peer.server.receive_data(data, 0.0)
    taken = peer.server.events()
    event = next(taken)
    assert isinstance(event, StreamReadable) and not call.cancelled
    peer.server.send(call, [peer.server.read_message(call) or b""])
    assert isinstance(next(taken), StreamStopped) and call.cancelled
    assert next(taken, None) is None
    kinds = [f.kind for f in frames(peer.server.data_to_send())]
    assert kinds == [HEADERS, DATA]  # the answer, nothing after the reset


def test_reset_flood_ends_in_enhance_your_calm() -> None:
    """Resets are rationed (CVE-2023-44487): past the burst, GOAWAY ENHANCE_YOUR_CALM,
    every call stopped, and nothing more is read."""
    peer = Peer(ConnectionPolicy(resets=(3, 0.001)))
    streams = [peer.call() for _ in range(5)]
    started = peer.exchange()
    assert len(started) == 5
    flood = b"".join(raw(RST_STREAM, 0, s, (8).to_bytes(4, "big")) for s in streams)
    peer.server.receive_data(flood, 0.0)
    got = events(peer.server)
    assert [type(e) for e in got] == [StreamStopped] * 3 + [ConnectionTerminated] + [
        StreamStopped
    ] * 2
    assert got[3].error == ENHANCE_YOUR_CALM
    (goaway,) = [f for f in frames(peer.server.data_to_send()) if f.kind == GOAWAY]
    assert goaway.code == ENHANCE_YOUR_CALM and b"resets" in goaway.payload
    peer.server.receive_data(raw(PING, 0, 0, b"12345678"), 1.0)
    assert events(peer.server) == [] and peer.server.data_to_send() == b""


def test_pings_cost_only_while_we_send_nothing() -> None:
    """A PING after we sent HEADERS or DATA is free (gRPC's BDP probes); back-to-back
    PINGs with nothing sent between spend the ration."""
    peer = Peer(ConnectionPolicy(pings=(1, 0.001)))
    peer.exchange()
    ping = raw(PING, 0, 0, b"abcdefgh")
    for _ in range(3):  # free: an answer went out before each
        stream = peer.call()
        (started,) = peer.exchange()
        peer.server.send(started.stream, [b"r"])
        peer.answer()
        peer.server.receive_data(ping, 0.0)
        assert events(peer.server) == []
        assert [f.kind for f in frames(peer.answer())] == [PING]
        peer.server.finish(started.stream)
        peer.answer()
        assert peer.trailers(stream) == {"grpc-status": "0"}
    # the first is free (trailers went out before it), the second spends the one token
    peer.server.receive_data(ping * 3, 0.0)
    assert [type(e) for e in events(peer.server)] == [ConnectionTerminated]


def test_keepalive_pings_then_drops_a_silent_peer() -> None:
    policy = ConnectionPolicy(keepalive_s=10, keepalive_timeout_s=5, idle_timeout_s=600)
    peer = Peer(policy)
    peer.exchange()
    assert peer.server.tick(5.0) and peer.server.data_to_send() == b""
    assert peer.server.tick(10.0)
    (ping,) = frames(peer.server.data_to_send())
    assert ping.kind == PING and ping.flags == 0
    assert peer.server.tick(14.0)
    assert not peer.server.tick(15.0)
    (dropped,) = events(peer.server)
    assert isinstance(dropped, ConnectionDropped) and "PING" in dropped.reason


def test_keepalive_ack_keeps_the_connection() -> None:
    policy = ConnectionPolicy(keepalive_s=10, keepalive_timeout_s=5, idle_timeout_s=600)
    peer = Peer(policy)
    peer.exchange()
    peer.server.tick(10.0)
    (ping,) = frames(peer.server.data_to_send())
    peer.server.receive_data(raw(PING, 1, 0, ping.payload), 11.0)
    assert events(peer.server) == []
    assert peer.server.tick(16.0) and peer.server.tick(20.0)


def test_a_peer_that_stops_reading_is_dropped() -> None:
    policy = ConnectionPolicy(keepalive_s=10, keepalive_timeout_s=5, idle_timeout_s=600)
    peer = Peer(policy)
    peer.exchange()
    peer.server.pause_writing(1.0)
    assert peer.server.tick(5.0)
    assert not peer.server.tick(6.0)
    (dropped,) = events(peer.server)
    assert isinstance(dropped, ConnectionDropped) and "reading" in dropped.reason


def test_idle_connection_gets_goaway_no_error() -> None:
    policy = ConnectionPolicy(keepalive_s=100, keepalive_timeout_s=100, idle_timeout_s=30)
    peer = Peer(policy)
    peer.exchange()
    assert peer.server.tick(29.0)
    assert not peer.server.tick(30.0)
    assert [type(e) for e in events(peer.server)] == [ConnectionDone]
    (goaway,) = frames(peer.server.data_to_send())
    assert goaway.kind == GOAWAY and goaway.code == NO_ERROR


def test_graceful_goaway_waits_for_the_last_call() -> None:
    """goaway(): new streams are refused, the open one finishes, then ConnectionDone."""
    peer = Peer()
    stream = peer.call()
    (started,) = peer.exchange()
    peer.server.goaway()
    assert events(peer.server) == []
    (goaway,) = frames(peer.server.data_to_send())
    assert goaway.kind == GOAWAY and goaway.code == NO_ERROR
    late = stream + 2  # h2 sends nothing new after a GOAWAY: a raw HEADERS (:method POST)
    peer.server.receive_data(raw(HEADERS, 0x5, late, b"\x83"), 0.0)
    assert events(peer.server) == []
    (refused,) = frames(peer.server.data_to_send())
    assert (refused.kind, refused.stream, refused.code) == (RST_STREAM, late, 0x7)
    peer.server.finish(started.stream)
    assert [type(e) for e in events(peer.server)] == [ConnectionDone]
    (trailers,) = frames(peer.server.data_to_send())
    assert (trailers.kind, trailers.stream, trailers.flags & 0x1) == (HEADERS, stream, 1)


def test_drain_takes_every_stream_sent_before_it_then_names_the_last() -> None:
    """drain(): GOAWAY with the largest stream id and a PING (RFC 9113 §6.8); a stream
    the peer sent before seeing it is still taken; the PING's answer brings the GOAWAY
    naming the last stream taken, after which new streams are refused; the streams in
    flight finish, then ConnectionDone."""
    peer = Peer()
    first = peer.call()
    (started,) = peer.exchange()
    peer.server.drain(0.0)
    goaway, ping = frames(peer.server.data_to_send())
    assert (goaway.kind, goaway.code) == (GOAWAY, NO_ERROR)
    assert int.from_bytes(goaway.payload[:4], "big") == 2**31 - 1
    assert ping.kind == PING and not ping.flags
    crossed = peer.call()  # HEADERS the peer sent before our GOAWAY reached it
    assert crossed == first + 2
    peer.server.receive_data(peer.client.data_to_send(), 0.0)
    (taken,) = events(peer.server)
    assert isinstance(taken, CallStarted) and taken.stream.id == crossed
    peer.server.receive_data(raw(PING, 0x1, 0, ping.payload), 0.0)  # the PING's answer
    assert events(peer.server) == []
    (last,) = frames(peer.server.data_to_send())
    assert (last.kind, int.from_bytes(last.payload[:4], "big")) == (GOAWAY, crossed)
    late = peer.call()
    peer.server.receive_data(peer.client.data_to_send(), 0.0)
    assert events(peer.server) == []
    (refused,) = frames(peer.server.data_to_send())
    assert (refused.kind, refused.stream, refused.code) == (RST_STREAM, late, 0x7)
    peer.server.finish(started.stream)
    assert events(peer.server) == []  # one stream still runs
    peer.server.finish(taken.stream)
    assert [type(e) for e in events(peer.server)] == [ConnectionDone]


def test_a_drain_whose_ping_goes_unanswered_ends_at_the_keepalive_timeout() -> None:
    policy = ConnectionPolicy(keepalive_s=100, keepalive_timeout_s=5, idle_timeout_s=100)
    peer = Peer(policy)
    peer.exchange()
    peer.server.drain(0.0)
    peer.server.data_to_send()
    assert peer.server.tick(4.0) and peer.server.data_to_send() == b""
    peer.server.tick(5.0)
    (last,) = frames(peer.server.data_to_send())
    assert last.kind == GOAWAY and int.from_bytes(last.payload[:4], "big") == 0
    assert [type(e) for e in events(peer.server)] == [ConnectionDone]


def test_connection_errors_are_goaway_with_their_code() -> None:
    """A frame over our SETTINGS_MAX_FRAME_SIZE is FRAME_SIZE_ERROR; a bad preface and an
    even client stream id are PROTOCOL_ERROR (RFC 9113 §4.2, §3.4, §5.1.1)."""
    conn = H2Connection(ConnectionPolicy(max_frame_size=16_384), LIMITS, 0.0)
    conn.receive_data(PREFACE + raw(DATA, 0, 1, b"x" * 16_385), 0.0)
    (terminated,) = events(conn)
    assert isinstance(terminated, ConnectionTerminated) and terminated.error == FRAME_SIZE_ERROR
    conn = H2Connection(ConnectionPolicy(), LIMITS, 0.0)
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 0.0)
    assert [e.error for e in events(conn)] == [PROTOCOL_ERROR]
    peer = Peer()
    peer.exchange()
    peer.server.receive_data(raw(HEADERS, 0x5, 2, b"\x83"), 0.0)
    assert [e.error for e in events(peer.server)] == [PROTOCOL_ERROR]


def test_a_preface_split_across_reads_is_waited_for() -> None:
    conn = H2Connection(ConnectionPolicy(), LIMITS, 0.0)
    conn.receive_data(PREFACE[:10], 0.0)
    assert events(conn) == []
    conn.receive_data(PREFACE[10:] + raw(SETTINGS, 0, 0)[:4], 0.0)
    assert events(conn) == [] and conn.buffered == 4
    conn.receive_data(raw(SETTINGS, 0, 0)[4:], 0.0)
    assert events(conn) == [] and conn.buffered == 0
    assert frames(conn.data_to_send())[-1].kind == SETTINGS
