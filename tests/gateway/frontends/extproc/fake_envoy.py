"""An Envoy-like ext_proc client for tests: it plays Envoy's half of the protocol.

Per HTTP request it opens one `Process` stream on loopback, sends the request headers
(with the subset hint in `metadata_context` when given) and the body in chunks, reads
the picker's answers, and — as Envoy's ORIGINAL_DST cluster would — sends the
(possibly rewritten) body to the pod named in `x-gateway-destination-endpoint`, then
streams the pod's response headers and body back through the picker and reassembles
what the client would receive. Every protobuf message the picker sent is kept so tests
can assert on the exact messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import grpc
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from inference_gateway.frontends.extproc.wire import SUBSET_KEY, SUBSET_NAMESPACE, header_map

FULL_DUPLEX = ProcessingMode.FULL_DUPLEX_STREAMED
BUFFERED = ProcessingMode.BUFFERED
TIMEOUT_S = 10.0

# make_picker(config=None, *, rewrites=None, options=None, endpoints=None, **server) -> picker
PickerFactory = Callable[..., Awaitable[Any]]


@dataclass
class Outcome:
    """What one exchange produced, as Envoy and the client would see it."""

    messages: list[pb.ProcessingResponse] = field(default_factory=list)
    immediate: pb.ImmediateResponse | None = None
    request_headers: dict[str, str] = field(default_factory=dict)  # after mutation
    destination: str = ""
    metadata_destination: str = ""
    upstream_body: bytes = b""  # what the pod received
    status: int = 0
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: bytes = b""  # what the client received


def request_headers_message(
    path: str,
    headers: dict[str, str] | None = None,
    *,
    end_of_stream: bool = False,
    subset: list[str] | None = None,
    mode: int = FULL_DUPLEX,
) -> pb.ProcessingRequest:
    all_headers = {
        ":method": "POST" if not end_of_stream else "GET",
        ":path": path,
        ":authority": "gateway",
        "content-type": "application/json",
        **(headers or {}),
    }
    message = pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(
            headers=header_map(all_headers), end_of_stream=end_of_stream
        ),
        protocol_config=pb.ProtocolConfiguration(
            request_body_mode=mode,  # type: ignore[arg-type]
            response_body_mode=mode,  # type: ignore[arg-type]
        ),
    )
    if subset is not None:
        hint = message.metadata_context.filter_metadata[SUBSET_NAMESPACE]
        hint.fields[SUBSET_KEY].list_value.extend(subset)
    return message


class ExchangeStream:
    """One `Process` stream with a reader task collecting the picker's answers."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.received: list[pb.ProcessingResponse] = []
        self._new = asyncio.Event()
        self.done = False
        self.error: BaseException | None = None
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            async for message in self.call:
                self.received.append(message)
                self._new.set()
        except grpc.aio.AioRpcError as error:
            self.error = error
        finally:
            self.done = True
            self._new.set()

    def refused(self) -> bool:
        return any(m.HasField("immediate_response") for m in self.received)

    async def send(self, message: pb.ProcessingRequest) -> None:
        """Write a message; like Envoy, stop once the picker answered for good (an
        `ImmediateResponse` ends the stream even while body chunks are still due)."""
        if self.done or self.refused():
            return
        try:
            await self.call.write(message)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            async with asyncio.timeout(TIMEOUT_S):
                await asyncio.shield(self._reader)
            if not self.refused():
                raise

    async def wait_for(self, predicate: Any, start: int = 0) -> int:
        """Index of the first received message from `start` that matches."""
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                for i in range(start, len(self.received)):
                    if predicate(self.received[i]):
                        return i
                if self.done:
                    raise AssertionError(f"stream ended; got {self.received!r}, {self.error!r}")
                self._new.clear()
                await self._new.wait()

    async def ended(self) -> bool:
        """True once the picker has ended the stream by itself (within the timeout)."""
        try:
            async with asyncio.timeout(TIMEOUT_S):
                await asyncio.shield(self._reader)
        except TimeoutError:
            return False
        return self.error is None

    async def close(self) -> None:
        await self.call.done_writing()
        async with asyncio.timeout(TIMEOUT_S):
            await self._reader

    def cancel(self) -> None:
        self.call.cancel()


def _is_request_end(m: pb.ProcessingResponse) -> bool:
    if m.HasField("immediate_response"):
        return True
    if m.HasField("request_body"):
        mutation = m.request_body.response.body_mutation
        return (
            not mutation.HasField("streamed_response") or mutation.streamed_response.end_of_stream
        )
    return False


def _is_response_end(m: pb.ProcessingResponse) -> bool:
    if m.HasField("response_body"):
        mutation = m.response_body.response.body_mutation
        return (
            not mutation.HasField("streamed_response") or mutation.streamed_response.end_of_stream
        )
    return False


class FakeEnvoy:
    def __init__(self, target: str, credentials: grpc.ChannelCredentials | None = None) -> None:
        self.target = target
        self.credentials = credentials
        self.channel: grpc.aio.Channel | None = None
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> FakeEnvoy:
        if self.credentials is not None:
            self.channel = grpc.aio.secure_channel(
                self.target,
                self.credentials,
                options=[("grpc.ssl_target_name_override", "localhost")],
            )
        else:
            self.channel = grpc.aio.insecure_channel(self.target)
        self.session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.session is not None:
            await self.session.close()
        if self.channel is not None:
            await self.channel.close()

    def open(self) -> ExchangeStream:
        assert self.channel is not None
        return ExchangeStream(pb_grpc.ExternalProcessorStub(self.channel).Process())

    async def send_request(
        self,
        stream: ExchangeStream,
        path: str,
        body: bytes,
        *,
        headers: dict[str, str] | None = None,
        chunk_size: int = 65_536,
        subset: list[str] | None = None,
        mode: int = FULL_DUPLEX,
        outcome: Outcome | None = None,
    ) -> Outcome:
        """The request half: headers, then the body in chunks; returns the routing."""
        out = outcome or Outcome()
        await stream.send(request_headers_message(path, headers, subset=subset, mode=mode))
        start = 0
        if mode == BUFFERED:  # Envoy waits for the headers answer before the body
            start = await stream.wait_for(lambda m: m.HasField("request_headers")) + 1
            chunk_size = max(1, len(body))
        chunks = [body[i : i + chunk_size] for i in range(0, len(body), chunk_size)] or [b""]
        for i, chunk in enumerate(chunks):
            await stream.send(
                pb.ProcessingRequest(
                    request_body=pb.HttpBody(body=chunk, end_of_stream=i == len(chunks) - 1)
                )
            )
        end = await stream.wait_for(_is_request_end, start)
        out.messages = list(stream.received[: end + 1])
        self._apply_request(out, headers or {}, body)
        return out

    @staticmethod
    def _apply_request(out: Outcome, headers: dict[str, str], body: bytes) -> None:
        upstream = bytearray()
        replaced: bytes | None = None
        out.request_headers = dict(headers)
        for m in out.messages:
            if m.HasField("immediate_response"):
                out.immediate = m.immediate_response
                return
            common = None
            if m.HasField("request_headers"):
                common = m.request_headers.response
            elif m.HasField("request_body"):
                common = m.request_body.response
                mutation = common.body_mutation
                if mutation.HasField("streamed_response"):
                    upstream += mutation.streamed_response.body
                elif mutation.body:
                    replaced = mutation.body
            if common is not None:
                for option in common.header_mutation.set_headers:
                    out.request_headers[option.header.key] = option.header.raw_value.decode()
            if m.HasField("dynamic_metadata"):
                lb = m.dynamic_metadata.fields["envoy.lb"].struct_value
                out.metadata_destination = lb.fields["x-gateway-destination-endpoint"].string_value
        out.destination = out.request_headers.get("x-gateway-destination-endpoint", "")
        streamed = any(
            m.HasField("request_body")
            and m.request_body.response.body_mutation.HasField("streamed_response")
            for m in out.messages
        )
        out.upstream_body = bytes(upstream) if streamed else (replaced or body)

    async def relay(
        self,
        stream: ExchangeStream,
        out: Outcome,
        path: str,
        *,
        mode: int = FULL_DUPLEX,
    ) -> Outcome:
        """The response half: forward to the chosen pod, stream its answer through.

        As Envoy does (ext_proc.cc onData), FULL_DUPLEX_STREAMED sends the body without
        waiting for the headers answer, which may come later (or be an
        `ImmediateResponse`); BUFFERED and STREAMED wait for it first."""
        assert self.session is not None
        host = out.destination.split(",")[0]
        async with self.session.post(
            f"http://{host}{path}",
            data=out.upstream_body,
            headers={"content-type": "application/json"},
        ) as response:
            out.status = response.status
            headers = {":status": str(response.status), **dict(response.headers)}
            headers = {k.lower(): v for k, v in headers.items()}
            start = len(stream.received)
            await stream.send(
                pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=header_map(headers)))
            )
            if mode != FULL_DUPLEX:
                await stream.wait_for(lambda m: m.HasField("response_headers"), start)
            raw = await response.read() if mode == BUFFERED else None
            if raw is not None:
                chunks: list[bytes] = [raw]
            else:
                chunks = [c async for c in response.content.iter_any()]
        body = bytearray()
        for i, chunk in enumerate([*chunks, b""] if raw is None else chunks):
            last = raw is not None or i == len(chunks)
            await stream.send(
                pb.ProcessingRequest(response_body=pb.HttpBody(body=chunk, end_of_stream=last))
            )
            if mode == BUFFERED:
                got = await stream.wait_for(
                    lambda m: m.HasField("response_body") or m.HasField("immediate_response"),
                    start,
                )
                replaced = stream.received[got].response_body.response.body_mutation.body
                body += replaced or chunk
        if mode != BUFFERED:
            await stream.wait_for(
                lambda m: _is_response_end(m) or m.HasField("immediate_response"), start
            )
        out.messages = list(stream.received)
        for m in out.messages[start:]:
            if m.HasField("immediate_response"):  # Envoy's local reply replaces the answer
                out.immediate = m.immediate_response
                out.status = m.immediate_response.status.code
                out.response_body = m.immediate_response.body
                return out
            if m.HasField("response_headers"):
                for name in m.response_headers.response.header_mutation.remove_headers:
                    headers.pop(name, None)
            elif m.HasField("response_body") and mode != BUFFERED:
                body += m.response_body.response.body_mutation.streamed_response.body
        out.response_headers = headers
        out.response_body = bytes(body)
        return out

    async def exchange(
        self,
        path: str,
        body: bytes,
        *,
        headers: dict[str, str] | None = None,
        chunk_size: int = 65_536,
        subset: list[str] | None = None,
        mode: int = FULL_DUPLEX,
    ) -> Outcome:
        """A whole request: route it, and if routed, relay the pod's response."""
        stream = self.open()
        out = await self.send_request(
            stream, path, body, headers=headers, chunk_size=chunk_size, subset=subset, mode=mode
        )
        if out.immediate is None:
            await self.relay(stream, out, path, mode=mode)
        await stream.close()
        return out
