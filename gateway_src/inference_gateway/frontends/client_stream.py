"""The client side of a relayed stream for the aiohttp front ends (`igw serve`'s proxy,
`igw pd-sidecar`): the response is prepared with its first byte, so a stream that breaks
before one can still be answered with a plain error status (`StreamRelay` in
core/request/relay.py writes to it)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

__all__ = ["LazyClientStream"]


class LazyClientStream:
    """`on_first_byte` runs once, right after the first byte is written (the proxy's TTFT)."""

    __slots__ = ("on_first_byte", "prepared", "request", "response")

    def __init__(
        self,
        request: web.Request,
        response: web.StreamResponse,
        on_first_byte: Callable[[], object] | None = None,
    ) -> None:
        self.request, self.response = request, response
        self.on_first_byte = on_first_byte
        self.prepared = False

    async def write(self, data: bytes) -> None:
        if self.prepared:
            await self.response.write(data)
            return
        self.prepared = True
        await self.response.prepare(self.request)
        await self.response.write(data)
        if self.on_first_byte is not None:
            self.on_first_byte()

    async def write_eof(self) -> None:
        if not self.prepared:  # an empty stream
            self.prepared = True
            await self.response.prepare(self.request)
        await self.response.write_eof()
