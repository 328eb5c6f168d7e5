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
    "keeps_table",
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
CACHED_BLOCKS, CACHED_BLOCK_BYTES = 64, 1_024  # a connection's decoded header blocks kept
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

    A gRPC client's headers repeat per call. After its first call grpc-go's encoder sends
    them as indexed fields only (8 bytes, `hpack` ≈ 40 us to decode); Envoy 1.40's sends
    `:path` as a literal without indexing, Huffman-coded, on every ext_proc stream, its
    other seven fields indexed (the same 46 bytes each time: a quarter of `igw bbr`'s CPU
    went to decoding them). Neither kind of block changes the dynamic table
    (`keeps_table`), so its meaning holds until a block that can does: those clear the
    cache. Blocks over `CACHED_BLOCK_BYTES` are not kept, and the cache holds at most
    `CACHED_BLOCKS`, so a peer's distinct blocks cost it no more than that. The dicts it
    returns are shared: read them, never change them.
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
        if len(block) <= CACHED_BLOCK_BYTES and keeps_table(block):
            if len(cache) >= CACHED_BLOCKS:
                cache.clear()
            cache[block] = headers
        else:
            cache.clear()
        return headers


def keeps_table(block: bytes) -> bool:
    """Whether decoding an HPACK block leaves the dynamic table as it was (RFC 7541 6):
    it holds indexed fields and literals without indexing only, no literal with
    incremental indexing and no table size update. Literals marked never-indexed (6.2.3,
    values the peer calls sensitive) and blocks cut short count as changing it, so they
    are never cached."""
    i, size = 0, len(block)
    while 0 <= i < size:
        first = block[i]
        if first & 0x80:  # 6.1 indexed field: a 7-bit prefix index
            i = _integer(block, i, 0x7F)[1]
        elif first & 0xF0:  # 6.2.1 incremental indexing, 6.2.3 never indexed, 6.3 size update
            return False
        else:  # 6.2.2 without indexing: a 4-bit prefix name index, 0 for a literal name
            name_index, i = _integer(block, i, 0x0F)
            if name_index == 0:
                i = _after_string(block, i)
            i = _after_string(block, i)
    return i == size


def _integer(block: bytes, i: int, mask: int) -> tuple[int, int]:
    """The prefix integer (RFC 7541 5.1) at `i` and the offset after it; (-1, -1) when
    the block ends inside it or it runs past 2^28 (no field of ours is that long)."""
    value, i = block[i] & mask, i + 1
    if value < mask:
        return value, i
    shift = 0
    while i < len(block) and shift <= 21:
        byte = block[i]
        value += (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not byte & 0x80:
            return value, i
    return -1, -1


def _after_string(block: bytes, i: int) -> int:
    """The offset after the string literal (RFC 7541 5.2) at `i`; -1 if it is cut short."""
    if not 0 <= i < len(block):
        return -1
    length, start = _integer(block, i, 0x7F)
    end = start + length
    return end if 0 <= start <= end <= len(block) else -1
