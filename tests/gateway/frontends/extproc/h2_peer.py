"""A scripted HTTP/2 client for the abuse tests: `h2` keeps the protocol state of what a
well-formed peer sends, `hyperframe` builds the frames a hostile one sends, and the
server's frames are read back raw (so a test sees exactly what came, GOAWAY included)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import Event

GOAWAY, HEADERS, DATA, RST_STREAM, WINDOW_UPDATE, PING = 7, 1, 0, 3, 8, 6
NO_ERROR, PROTOCOL_ERROR, FRAME_SIZE_ERROR, ENHANCE_YOUR_CALM = 0x0, 0x1, 0x6, 0xB


def grpc_message(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


def raw_frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


@dataclass
class Frame:
    kind: int
    flags: int
    stream: int
    payload: bytes

    @property
    def error_code(self) -> int:
        """GOAWAY: bytes 4-8; RST_STREAM: bytes 0-4."""
        start = 4 if self.kind == GOAWAY else 0
        return int.from_bytes(self.payload[start : start + 4], "big")


class H2Peer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h2 = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))

    @classmethod
    async def connect(cls, port: int, settings: dict[int, int] | None = None) -> H2Peer:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        peer = cls(reader, writer)
        peer.h2.initiate_connection()
        if settings:
            peer.h2.update_settings(settings)
        peer.flush()
        return peer

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.writer.write(data)

    def raw(self, data: bytes) -> None:
        """Bytes h2 would refuse to send (malformed or abusive frames)."""
        self.writer.write(data)

    def start_call(self, path: str, extra: list[tuple[str, str]] | None = None) -> int:
        stream = self.h2.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "picker"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *(extra or []),
        ]
        self.h2.send_headers(stream, headers)
        self.flush()
        return stream

    def send_message(self, stream: int, payload: bytes, *, end: bool = False) -> None:
        self.h2.send_data(stream, grpc_message(payload), end_stream=end)
        self.flush()

    async def events(self, until: type[Event], timeout: float = 5.0) -> list[Event]:
        """Feed what the server sends to h2 until an event of type `until` (answering
        its SETTINGS and PINGs as a client library would)."""
        got: list[Event] = []
        async with asyncio.timeout(timeout):
            while not any(isinstance(e, until) for e in got):
                data = await self.reader.read(65_536)
                if not data:
                    break
                got += self.h2.receive_data(data)
                self.flush()
        return got

    async def pump(self, seconds: float) -> list[Event]:
        """Feed h2 whatever the server sends for `seconds` (window updates included)."""
        got: list[Event] = []
        try:
            async with asyncio.timeout(seconds):
                while data := await self.reader.read(65_536):
                    got += self.h2.receive_data(data)
                    self.flush()
        except TimeoutError:
            pass
        return got

    async def frames(self, timeout: float = 5.0) -> list[Frame]:
        """Raw frames until the server closes the connection or `timeout` passes."""
        buffer = bytearray()
        out: list[Frame] = []
        try:
            async with asyncio.timeout(timeout):
                while data := await self.reader.read(65_536):
                    buffer += data
        except (TimeoutError, ConnectionError):
            pass
        offset = 0
        while len(buffer) - offset >= 9:
            length = int.from_bytes(buffer[offset : offset + 3], "big")
            end = offset + 9 + length
            if end > len(buffer):
                break
            kind, flags = buffer[offset + 3], buffer[offset + 4]
            stream = int.from_bytes(buffer[offset + 5 : offset + 9], "big") & 0x7FFFFFFF
            out.append(Frame(kind, flags, stream, bytes(buffer[offset + 9 : end])))
            offset = end
        return out

    async def goaway(self, timeout: float = 5.0) -> Frame | None:
        return next((f for f in await self.frames(timeout) if f.kind == GOAWAY), None)

    def close(self) -> None:
        self.writer.close()
