"""HTTP/2 and gRPC wire constants and encoders for the picker's server; no I/O, no state.

What lives here: frame type, flag and error numbers (RFC 9113), the budgets a client
connection gets (`ConnectionPolicy`, the pattern of nghttp2 and grpc-go), the token
bucket that rations frames, `grpc-timeout` parsing and our constant response headers
and trailers (gRPC PROTOCOL-HTTP2.md), and request-header decoding with `hpack`. Our own
headers are constant HPACK blocks of literals without indexing, so the peer's decoder
table never changes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from hpack import Decoder
from hpack.exceptions import HPACKError

__all__ = [
    "ConnectionPolicy",
    "GrpcCode",
    "HeaderDecoder",
    "Ration",
    "frame",
    "only_indexed",
    "parse_grpc_timeout",
    "status_block",
    "stream_window",
    "window_update",
]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE = 0, 1, 2, 3, 4, 5
PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20

NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x3
FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 0x6, 0x7, 0x8, 0x9
ENHANCE_YOUR_CALM = 0xB

MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65_535
DEFAULT_FRAME = 16_384
DEFAULT_MAX_MESSAGE = 4 * 2**20  # gRPC's own default receive limit
HEADER_TABLE_SIZE = 4_096  # the HPACK table we let the peer use (the protocol default)
KEEPALIVE_PING = b"igw-kpal"
DRAIN_PING = b"igw-drai"  # the PING between a graceful drain's two GOAWAYs


class GrpcCode:
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


@dataclass(frozen=True, slots=True)
class ConnectionPolicy:
    """What one client connection may make the server hold or do.

    A ration is `(burst, per_second)`: a token bucket; a frame past it ends the
    connection with GOAWAY ENHANCE_YOUR_CALM. Resets of calls not answered yet follow
    nghttp2's defaults (1,000, then 33/s: CVE-2023-44487); a reset after the answer began
    is free (Envoy's ext_proc ends every stream that way). A PING costs a token only when
    the server has sent no HEADERS or DATA since the previous one (grpc-go's "ping
    strikes"): gRPC clients probe bandwidth with a PING per burst of data they receive,
    and those are free.
    """

    max_frame_size: int = 65_536  # advertised SETTINGS_MAX_FRAME_SIZE, 16–64 KiB
    connection_window: int = 16 * 2**20  # unread bytes one connection may hold
    max_concurrent_streams: int = 1_000
    max_header_block: int = 65_536  # compressed, across HEADERS + CONTINUATION
    max_header_list: int = 65_536  # decoded (SETTINGS_MAX_HEADER_LIST_SIZE)
    max_continuations: int = 16  # CONTINUATION frames per header block
    write_high_water: int = 1 * 2**20  # queued outgoing bytes that pause reading
    resets: tuple[int, float] = (1_000, 33.0)
    pings: tuple[int, float] = (100, 10.0)
    settings: tuple[int, float] = (100, 10.0)
    empty_frames: tuple[int, float] = (100, 10.0)  # DATA/CONTINUATION with nothing, PRIORITY
    keepalive_s: float = 30.0  # PING a peer silent this long
    keepalive_timeout_s: float = 20.0  # drop it when the PING (or a write) waits this long
    idle_timeout_s: float = 600.0  # GOAWAY a connection with no call this long

    def __post_init__(self) -> None:
        if not DEFAULT_FRAME <= self.max_frame_size <= 65_536:
            raise ValueError("max_frame_size must be 16-64 KiB")
        if not DEFAULT_WINDOW <= self.connection_window <= MAX_WINDOW:
            raise ValueError(f"connection_window must be {DEFAULT_WINDOW}..{MAX_WINDOW}")
        for name in ("resets", "pings", "settings", "empty_frames"):
            burst, rate = getattr(self, name)
            if burst < 1 or rate <= 0:
                raise ValueError(f"{name} needs a burst >= 1 and a rate > 0")
        if min(self.keepalive_s, self.keepalive_timeout_s, self.idle_timeout_s) <= 0:
            raise ValueError("keepalive and idle timeouts must be positive")


class Ration:
    """A token bucket: `take(now)` is False once the peer has spent its budget."""

    __slots__ = ("burst", "last", "rate", "tokens")

    def __init__(self, burst: int, rate: float, now: float) -> None:
        self.burst, self.rate = float(burst), rate
        self.tokens, self.last = float(burst), now

    def take(self, now: float) -> bool:
        tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if tokens < 1:
            self.tokens = tokens
            return False
        self.tokens = tokens - 1
        return True


_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def parse_grpc_timeout(value: str) -> float | None:
    """`grpc-timeout` (gRPC PROTOCOL-HTTP2.md: 1-8 digits and a unit) in seconds; None
    when malformed."""
    digits, unit = value[:-1], value[-1:]
    if not 1 <= len(digits) <= 8 or not digits.isascii() or not digits.isdigit():
        return None
    scale = _TIMEOUT_UNITS.get(unit)
    return None if scale is None else int(digits) * scale


def stream_window(limits: Mapping[str, int]) -> int:
    """The receive window every stream gets: one whole message of the largest method (it
    reopens only as the handler reads), at least the protocol's default."""
    return max(DEFAULT_WINDOW, max(limits.values(), default=0) + 5)


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, increment.to_bytes(4, "big"))


def _literal(name: bytes, value: bytes) -> bytes:
    """HPACK literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    assert len(name) < 127 and len(value) < 127  # constants only
    return b"\x00" + bytes((len(name),)) + name + bytes((len(value),)) + value


def status_block(code: int, message: str) -> bytes:
    """gRPC trailers: `grpc-status`, and `grpc-message` percent-encoded, at most 120 bytes."""
    block = _literal(b"grpc-status", str(code).encode())
    if message:
        encoded = "".join(
            c if " " <= c <= "~" and c != "%" else "".join(f"%{b:02X}" for b in c.encode())
            for c in message
        ).encode()[:120]
        block += _literal(b"grpc-message", encoded)
    return block


# :status 200 is static-table entry 8 (indexed: 0x88).
RESPONSE_HEADERS = b"\x88" + _literal(b"content-type", b"application/grpc")
TRAILERS_OK = status_block(GrpcCode.OK, "")
SETTINGS_ACK = frame(SETTINGS, ACK, 0)
FRAME_HEAD = struct.Struct(">BHBBL")  # length as 1 + 2 bytes, type, flags, stream id


class HeaderDecoder:
    """A connection's HPACK decoder with a cache of decoded blocks shared between calls.

    A gRPC client's headers repeat per call, and after the first call its encoder sends
    them as indexed fields only (8 bytes, `hpack` ≈ 40 us to decode). Such a block cannot
    change the dynamic table, so its meaning holds until a block that can does: those
    clear the cache. The dicts it returns are shared: read them, never change them.
    """

    __slots__ = ("cache", "decoder")

    def __init__(self, max_header_list: int) -> None:
        self.decoder = Decoder()
        self.decoder.max_allowed_table_size = HEADER_TABLE_SIZE
        self.decoder.max_header_list_size = max_header_list
        self.cache: dict[bytes, dict[str, str]] = {}

    def decode(self, block: bytes) -> dict[str, str] | None:
        """Header block → dict; None when the block is undecodable (a connection error)."""
        cache = self.cache
        headers = cache.get(block)
        if headers is not None:
            return headers
        try:
            fields = self.decoder.decode(block, raw=True)
        except HPACKError:
            return None
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in fields}
        if only_indexed(block):
            if len(cache) >= 64:
                cache.clear()
            cache[block] = headers
        else:
            cache.clear()
        return headers


def only_indexed(block: bytes) -> bool:
    """Whether an HPACK block holds indexed fields only (RFC 7541 6.1): no literal and
    no table size update, so decoding it leaves the dynamic table as it was."""
    i, size = 0, len(block)
    while i < size:
        if not block[i] & 0x80:
            return False
        if block[i] & 0x7F == 0x7F:  # the index goes on in continuation bytes
            i += 1
            while i < size and block[i] & 0x80:
                i += 1
        i += 1
    return True
