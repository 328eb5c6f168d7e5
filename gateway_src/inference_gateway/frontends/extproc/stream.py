"""One ext_proc stream driver for every processor of this package: the endpoint picker
(`extproc/picker.py`) and the body-based router (`bbr.py`).

Envoy opens one bidirectional gRPC stream per HTTP request and sends the request's
headers, body and trailers, then the response's. What a server does with each message
differs; how a stream lives does not, so that is written once, here:

* one loop, `drive`: read a message, hand it to the stream's `Processor`, write its
  answers in one batch, until Envoy half-closes or an answer ended the exchange (an
  `ImmediateResponse`). `finish()` runs once however the stream ends, `cancel()` before
  it when the stream broke (Envoy or its client gone, the server stopping).
* one mode negotiation, `Processor.handle`: the body modes Envoy announces in
  `protocol_config` (first message), else the server's defaults. Each direction keeps
  its own: Envoy answers 500 to an answer shaped for a mode it did not send.
* one request-body collector with one cap, `Processor.collect`: a body past
  `max_body_bytes` is a 413 before more of it is kept, and the bytes all streams of one
  server hold while their bodies arrive are bounded by a shared `BodyBudget` (past it,
  a 503 with `Retry-After`), so twenty hostile uploads hold at most the budget, never
  the sum of what they send. A body is released the moment it is complete (its owner
  takes it) or the stream ends, cancelled or not; handlers are found by name, so no
  reference cycle keeps a stream's bytes alive until the cyclic GC happens to run.

A refusal is a `Rejection` (core/request/director.py) raised by any handler: the
processor answers it as an `ImmediateResponse` with the OpenAI-shaped body (`reject`,
which a server may extend, e.g. to count it).

The transport is a `Channel`: `CallChannel` over `Http2GrpcServer`'s call (raw bytes,
one socket write per batch of answers) or `ContextChannel` over a grpc.aio servicer
context registered with raw (de)serializers.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

import grpc
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from inference_gateway.core.request import refusals
from inference_gateway.core.request.refusals import Rejection
from inference_gateway.frontends.extproc.wire import body_replacement, immediate_response
from inference_gateway.transport.http2_server import Call

__all__ = [
    "BODY_BUDGET_BYTES",
    "FULL_DUPLEX",
    "MAX_BODY_BYTES",
    "MESSAGE_KINDS",
    "BodyBudget",
    "CallChannel",
    "Channel",
    "ContextChannel",
    "Processor",
    "Responses",
    "drive",
    "max_message",
]

log = logging.getLogger(__name__)

FULL_DUPLEX = ProcessingMode.FULL_DUPLEX_STREAMED
STREAMED = ProcessingMode.STREAMED
Responses = list[pb.ProcessingResponse]
MESSAGE_KINDS = frozenset(
    f"{side}_{part}" for side in ("request", "response") for part in ("headers", "body", "trailers")
)

#: The largest request body any ext_proc server here accepts (`igw serve` and the P/D
#: sidecar take the same): past it, a 413 before more is kept.
MAX_BODY_BYTES = 4 * 2**20
#: What all streams of one server may hold at once of bodies still arriving.
BODY_BUDGET_BYTES = 32 * 2**20
#: Headers, metadata and framing around a body chunk in one ext_proc message.
MESSAGE_OVERHEAD = 64 * 1024


def max_message(max_body_bytes: int = MAX_BODY_BYTES) -> int:
    """The largest ext_proc message to accept: one body (or chunk) plus the rest; a larger
    one is refused by the transport (RESOURCE_EXHAUSTED) before it is buffered."""
    return max_body_bytes + MESSAGE_OVERHEAD


class BodyBudget:
    """The request-body bytes one server holds while bodies arrive, across its streams."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int = BODY_BUDGET_BYTES) -> None:
        if limit <= 0:
            raise ValueError("a body budget must be positive")
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> bool:
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size


class Channel(Protocol):
    """One ext_proc stream as the driver sees it: raw messages in, batches of raw out."""

    def read(self) -> Awaitable[bytes | None]: ...
    def send(self, messages: list[bytes]) -> Awaitable[None]: ...


class CallChannel:
    """`Http2GrpcServer`'s call: `send` writes a batch in one socket write."""

    __slots__ = ("call",)

    def __init__(self, call: Call) -> None:
        self.call = call

    def read(self) -> Coroutine[Any, Any, bytes | None]:
        return self.call.read()  # its coroutine, unwrapped: one frame less per message

    async def send(self, messages: list[bytes]) -> None:
        self.call.send(messages)


class ContextChannel:
    """A grpc.aio servicer context whose method has no (de)serializers (raw bytes)."""

    __slots__ = ("context",)

    def __init__(self, context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
        self.context = context

    async def read(self) -> bytes | None:
        message: object = await self.context.read()
        return message if isinstance(message, bytes) else None  # grpc.aio.EOF: half-closed

    async def send(self, messages: list[bytes]) -> None:
        for message in messages:
            await self.context.write(message)


class Processor:
    """One stream's state: its body modes, the request body collected so far, and whether
    an answer ended the exchange (`closed`). A server subclasses it with async
    `on_<kind>` handlers (`on_request_headers`, ..., `on_response_trailers`) that return
    the answers; a kind without a handler gets none."""

    def __init__(
        self, budget: BodyBudget, max_body_bytes: int, request_mode: int, response_mode: int
    ) -> None:
        self.budget = budget
        self.max_body_bytes = max_body_bytes
        self.request_mode = request_mode
        self.response_mode = response_mode
        self.body: bytes | bytearray = b""  # the request body so far (see `collect`)
        self.held = 0  # of it, bytes taken from the budget
        self.closed = False  # an answer ended the exchange: nothing more is read

    async def handle(self, request: pb.ProcessingRequest) -> Responses:
        if request.HasField("protocol_config"):
            config = request.protocol_config
            self.request_mode = config.request_body_mode or self.request_mode
            self.response_mode = config.response_body_mode or self.response_mode
        kind = request.WhichOneof("request")
        # By name, not a dict of bound methods: that dict would make every processor a
        # reference cycle, its body freed by the cyclic GC instead of when the stream ends.
        handler = getattr(self, f"on_{kind}", None) if kind in MESSAGE_KINDS else None
        if handler is None:
            return []
        try:
            answers: Responses = await handler(request)
        except Rejection as rejection:
            return self.reject(rejection)
        return answers

    def early(self, request: pb.ProcessingRequest) -> pb.ProcessingResponse | None:
        """An answer to write before `request` is handled (none by default)."""
        return None

    def collect(self, chunk: bytes, end: bool) -> bytes | None:
        """Add a request-body chunk: the whole body once `end`, else None (the owner takes
        it, and this stream holds nothing more). Raises a 413 `Rejection` past
        `max_body_bytes`, a 503 when the server's budget has no room for the chunk."""
        if not self.body and end:
            whole = chunk  # the usual case, the whole body in one message: no copy
        else:
            size = len(self.body) + len(chunk)
            if size > self.max_body_bytes:
                self.release()
                raise refusals.too_large_body(self.max_body_bytes)
            if not end:
                if not self.budget.take(len(chunk)):
                    self.release()
                    raise refusals.busy()
                self.held += len(chunk)
            if not isinstance(self.body, bytearray):
                self.body = bytearray(self.body)
            self.body += chunk
            if not end:
                return None
            whole = bytes(self.body)
            self.release()
        if len(whole) > self.max_body_bytes:
            raise refusals.too_large_body(self.max_body_bytes)
        return whole

    def pending(self) -> Responses:
        """The answer to a body chunk that is not the last: none, but in STREAMED mode
        (one answer per chunk) the chunk is cleared; the whole body goes with the last."""
        return [body_replacement(b"", clear=True)] if self.request_mode == STREAMED else []

    def reject(self, rejection: Rejection) -> Responses:
        """The exchange ends with Envoy answering the client itself."""
        self.closed = True
        self.release()
        return [
            immediate_response(
                rejection.status, rejection.body(), rejection.headers, details=rejection.code
            )
        ]

    def release(self) -> None:
        """Give back what the stream holds of a body still arriving."""
        self.budget.give(self.held)
        self.held = 0
        self.body = b""

    def finish(self) -> None:
        """The stream ended (runs once, however it ended)."""
        self.release()

    def cancel(self) -> None:
        """The stream broke before its exchange ended (`finish` follows)."""
        self.release()


async def drive(processor: Processor, channel: Channel) -> None:
    """Read, handle, write until Envoy half-closes or an answer closed the exchange."""
    parse: Callable[[bytes], pb.ProcessingRequest] = pb.ProcessingRequest.FromString
    try:
        while not processor.closed:
            raw = await channel.read()
            if raw is None:
                return
            request = parse(raw)
            early = processor.early(request)
            if early is not None:
                await channel.send([early.SerializeToString()])
            responses = await processor.handle(request)
            if responses:
                await channel.send([r.SerializeToString() for r in responses])
    except BaseException:
        processor.cancel()
        raise
    finally:
        processor.finish()
