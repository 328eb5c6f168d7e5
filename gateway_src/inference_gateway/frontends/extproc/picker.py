"""The Envoy ext_proc endpoint picker: the in-cluster data plane over the shared core.

Envoy opens one bidirectional gRPC stream per HTTP request and sends the request's
headers, body and trailers, then the response's. An `Exchange` holds that stream's
state and has one small handler per message kind; the servicer only feeds it messages
and guarantees `finish()` runs exactly once, however the stream ends (response done,
client hang-up, Envoy gone).

Request side (`FULL_DUPLEX_STREAMED`, the protocol's mode): the body is collected until
`end_of_stream`, then the shared `Director` decides and the picker answers with the
headers response (`clear_route_cache`, `x-gateway-destination-endpoint`, `envoy.lb`
metadata, the new `content-length`) followed by the body — rewritten when a canary rule
applied — in chunks of at most 62,000 bytes. `BUFFERED` mode gets the same answer in one
body response. A refusal is an `ImmediateResponse` with the OpenAI-shaped error.

Response side: SSE streams flow through chunk by chunk (the `model` of each event
written back to the client's name when it was rewritten); a JSON body is held only when
it must be rewritten. Every stream asks the engine for its `usage` (the request body gets
`stream_options.include_usage`, core/request/sse.py), so the token charge settles from
what the engine generated, not one token per event; where the client did not ask, the
usage event is taken out of its stream (issue 31, finding 9, as `igw serve` does). The
request's `RequestLifecycle` (lifecycle.py) does the
bookkeeping: the first response byte reports the TTFT to the scheduler, `usage` is
counted into the gateway metrics, and a stream that ends before the response did (Envoy
or its client gone) counts as a client cancel and frees what the request held.

Token limits: each chunk of a 200 SSE stream is offered to the request's `TokenBudget`
(core/request/budget.py) before it is answered, as `igw serve` relays it. A chunk the
window has no room for is not passed on: in FULL_DUPLEX_STREAMED the answer is the
rate-limit SSE error event `igw serve` ends such a stream with (relay.py
`stream_error_event`) as a `StreamedBodyResponse` with `end_of_stream: true`, and the
exchange closes. Envoy injects that body with end of stream into the filter chain
(envoyproxy/envoy `source/extensions/filters/http/ext_proc/processor_state.cc`
handleDuplexStreamedBodyResponse), so the client gets a clean end (the HTTP/1.1
terminating chunk, HTTP/2 END_STREAM), and the finished downstream stream resets the
upstream one (the engine stops generating). An `ImmediateResponse` cannot do this once
response headers went out: Envoy then resets the client's stream
(`source/common/http/filter_manager.cc` sendLocalReply, "Prior headers have already been
sent"). In BUFFERED mode Envoy still holds the response headers while the body is
processed (processor_state.cc handleHeadersResponse), so a whole stream over the window
is answered as `igw serve` answers one refused before its first byte: a 429
`ImmediateResponse`. In STREAMED mode (one answer per chunk, no early end) the cut chunk
becomes the event and every later chunk is cleared until the upstream ends.

A 200 answer to a request with a token budget is refused whole, as `igw serve` refuses
it, when nothing of it can be sent: in FULL_DUPLEX_STREAMED the answer to Envoy's
`response_headers` is held (`AnswerHold`). Envoy keeps streaming the body meanwhile
(ext_proc.cc onData: in FULL_DUPLEX_STREAMED body chunks are sent while the headers
call is pending) and arms no message timer in that mode (processor_state.cc
onStartProcessorCall), so the hold lasts only until the body's verdict; the answers then
go out in the order Envoy requires (headers, body, trailers; the GIE EPP holds its
request-headers answer the same way, pkg/epp/handlers/server.go). A JSON body is held
up to `max_usage_scan_bytes` (the usage scan's bound): whole, `TokenBudget.admit_whole`
says; over the window, a 429 `ImmediateResponse` (Envoy still holds the response
headers, so that is a clean local reply), else the held headers answer and the body.
Past the bound it is released as it stands and streams on. An SSE stream is held until
its first chunk: refused, a 429 as well; admitted, it flows as above. In BUFFERED mode
the whole JSON gets the same verdict (the headers wait anyway); STREAMED has sent the
headers before the body, so there a JSON answer passes as it always did.

Traces (telemetry/request_trace.py): an exchange's span `igw.picker` continues the trace
context of the ext_proc stream's gRPC metadata (Envoy's tracer puts its ext_proc span
there), else the request's own headers; admission and scheduling are child spans, the
decision explained. A client listed in `tracing.explain.headerClients` that sends
`x-igw-explain: true` gets its decision in the `x-igw-explanation` response header.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

import grpc
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from inference_gateway.config.spec import GatewayConfigSpec
from inference_gateway.core.request import refusals
from inference_gateway.core.request.director import Decision, Director, Rejection
from inference_gateway.core.request.lifecycle import (
    CLIENT_CANCELLED,
    RATE_LIMITED,
    RequestLifecycle,
)
from inference_gateway.core.request.pd_body import (
    LEGACY_PREFILL_HEADER,
    PREFILL_HEADER,
    without_client_params,
)
from inference_gateway.core.request.relay import StreamEnd, stream_error_event
from inference_gateway.core.request.sse import ModelNameRewriter, UsageEventFilter
from inference_gateway.core.request.subset_hint import hinted_hostports
from inference_gateway.core.request.usage import UsageScanner
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.frontends.explain import (
    EXPLAINED_HEADER,
    explanation_header,
    may_explain,
)
from inference_gateway.frontends.extproc.envoy_failure import (
    SNIFF_BYTES,
    body_says_unreachable,
    flags_say_unreachable,
)
from inference_gateway.frontends.extproc.stream import (
    MAX_BODY_BYTES,
    BodyBudget,
    CallChannel,
    Channel,
    ContextChannel,
    Processor,
    Responses,
    drive,
)
from inference_gateway.frontends.extproc.wire import (
    body_chunks,
    body_replacement,
    endpoint_address,
    headers_response,
    immediate_response,
    read_headers,
    read_subset,
    timeout_override,
    trailers_response,
)
from inference_gateway.telemetry.request_trace import RequestTrace
from inference_gateway.telemetry.tracing import TRACEPARENT, Tracing
from inference_gateway.transport.http2_server import Call

__all__ = ["Exchange", "ExtProcServicer", "PickerOptions", "UsageScanner"]

log = logging.getLogger(__name__)

FULL_DUPLEX = ProcessingMode.FULL_DUPLEX_STREAMED
BUFFERED = ProcessingMode.BUFFERED
STREAMED = ProcessingMode.STREAMED


@dataclass(slots=True)
class AnswerHold:
    """The response-headers answer held for the token budget's verdict, and the JSON
    body chunks seen meanwhile (at most `limit` bytes: `add` says False past it)."""

    headers: pb.ProcessingResponse
    limit: int
    body: bytearray = field(default_factory=bytearray)

    def add(self, chunk: bytes) -> bool:
        self.body += chunk
        return len(self.body) <= self.limit

    def take(self) -> bytes:
        whole, self.body = bytes(self.body), bytearray()
        return whole


@dataclass(frozen=True, slots=True)
class PickerOptions:
    """Per-server settings; body modes apply when Envoy sends no `protocol_config`."""

    fallbacks: int = 0  # extra ranked pods after the primary in the destination value
    max_body_bytes: int = MAX_BODY_BYTES
    request_body_mode: int = FULL_DUPLEX
    response_body_mode: int = FULL_DUPLEX
    max_usage_scan_bytes: int = 4 * 2**20  # JSON kept to read `usage` from


def admission_wait_s(director: Director) -> float:
    """The longest a request can wait for admission: the largest TTL of a band that
    queues (0 when none does)."""
    config = director.state.config or GatewayConfigSpec()  # the director's own default
    bands = config.flow_control.bands.values()
    return max((band.ttl_s for band in bands if band.max_queue), default=0.0)


class Exchange(Processor):
    """One HTTP request's ext_proc stream: state plus one handler per message kind (the
    loop, the body modes and the body cap are the shared driver's, `stream.py`)."""

    def __init__(
        self,
        director: Director,
        options: PickerOptions,
        clock: Callable[[], float],
        budget: BodyBudget | None = None,
        tracing: Tracing | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            budget or BodyBudget(),
            options.max_body_bytes,
            options.request_body_mode,
            options.response_body_mode,
        )
        self.director = director
        self.options = options
        self.clock = clock
        self.started = clock()
        self.headers: dict[str, str] = {}
        self.subset: list[str] | None = None
        self.decision: Decision | None = None
        self.life: RequestLifecycle | None = None  # everything the request holds
        self.finished = False
        self.first_byte = False
        self.status = 0
        self.streaming = False
        self.rewriter: ModelNameRewriter | None = None
        # the usage event the picker asked the engine for, taken out of the client's
        # stream (read by the lifecycle: the token charge settles from it)
        self.usage_filter: UsageEventFilter | None = None
        self.held_json = bytearray()  # a JSON response held for the model rewrite
        self.sniff: bytearray | None = None  # a 503's first bytes: Envoy's own reply?
        self.cut = False  # the token budget ended the response (STREAMED: drop the rest)
        self.hold: AnswerHold | None = None  # the response headers' answer, held
        self.tracing = tracing or Tracing.off()
        self.metadata = metadata  # the stream's gRPC metadata (Envoy's trace context)
        self.trace: RequestTrace | None = None
        self.explained: str | None = None  # x-igw-explanation, for the response headers

    async def handle(self, request: pb.ProcessingRequest) -> Responses:
        if request.HasField("metadata_context") and self.subset is None:
            self.subset = read_subset(request)
        return await super().handle(request)

    # ------------------------------------------------------------------ request

    async def on_request_headers(self, request: pb.ProcessingRequest) -> Responses:
        self.headers = read_headers(request.request_headers)
        metadata = self.metadata
        parent = metadata if metadata is not None and TRACEPARENT in metadata else self.headers
        self.trace = RequestTrace(
            self.tracing, parent, self.headers.get(":path", ""), name="igw.picker"
        )
        if request.request_headers.end_of_stream:
            return self._bodiless()
        if self.request_mode == FULL_DUPLEX:
            return []  # the answer waits for the whole body
        return [headers_response()]  # BUFFERED / STREAMED: Envoy waits for this first

    async def on_request_body(self, request: pb.ProcessingRequest) -> Responses:
        part = request.request_body
        body = self.collect(part.body, part.end_of_stream)
        if body is None:
            # STREAMED: the chunk is cleared and the whole body goes with the last one.
            # Envoy has routed by then, so STREAMED cannot steer; BUFFERED and
            # FULL_DUPLEX_STREAMED are the picking modes.
            return self.pending()
        return await self._decide(body)

    async def on_request_trailers(self, request: pb.ProcessingRequest) -> Responses:
        # The body ended without end_of_stream (trailers follow): say none either.
        out: Responses = []
        if self.decision is None:
            body = self.collect(b"", True)
            assert body is not None  # `end`: the whole body
            out = await self._decide(body, end_of_stream=False)
        if self.closed:
            return out
        return [*out, trailers_response()]

    def _bodiless(self) -> Responses:
        """No body (e.g. GET /v1/models): any ready pod of the subset, as upstream."""
        ready = [e for e in self.director.endpoints() if not e.stale]
        if self.subset is not None:
            allowed = set(hinted_hostports(self.subset, ready) or ())
            ready = [e for e in ready if e.hostport in allowed]
        if not ready:
            return self.reject(refusals.no_ready_endpoint())
        chosen = random.choice(ready)
        destination = endpoint_address(chosen.address, chosen.port)
        return [headers_response(clear_route_cache=True, destination=destination)]

    def early(self, request: pb.ProcessingRequest) -> pb.ProcessingResponse | None:
        """Before a BUFFERED body is decided: extend Envoy's message timer (200 ms by
        default) to the longest admission wait, or a queued request ends in 504."""
        if (
            self.request_mode != BUFFERED
            or request.WhichOneof("request") != "request_body"
            or not request.request_body.end_of_stream
        ):
            return None
        wait = admission_wait_s(self.director)
        return timeout_override(wait + 1.0) if wait else None

    async def _decide(self, body: bytes, end_of_stream: bool = True) -> Responses:
        life = await self.director.decide(  # a Rejection is answered by `handle`
            body,
            self.headers,
            client_request_id=self.headers.get("x-request-id", ""),
            subset=self.subset,  # the director reads the hint (core/request/subset_hint.py)
        )
        self.life = life
        self.decision = decision = life.decision
        if self.trace is not None:
            self.trace.decided(life)
        config = self.director.state.config
        if config is not None and may_explain(config.tracing.explain, self.headers):
            self.explained = explanation_header(life.record())
        life.picked(decision.ranked[0])
        destination = ",".join(
            endpoint_address(e.address, e.port)
            for e in decision.ranked[: 1 + max(0, self.options.fallbacks)]
        )
        body = without_client_params(decision.body)  # a client's are hostile (pd_body.py)
        route_headers, remove = self._prefill_headers(life, decision)
        route_headers["content-length"] = str(len(body))
        if decision.rewritten:
            self.rewriter = ModelNameRewriter(decision.client_model)
        if self.request_mode == FULL_DUPLEX:
            return [
                headers_response(
                    set_headers=route_headers,
                    remove=remove,
                    clear_route_cache=True,
                    destination=destination,
                ),
                *body_chunks(body, end_of_stream=end_of_stream),
            ]
        # the engine is asked for the stream's usage (strip_usage): the body differs
        changed = decision.rewritten or decision.strip_usage or body is not decision.body
        return [
            body_replacement(
                body if changed or self.request_mode == STREAMED else None,
                set_headers=route_headers,
                remove=remove,
                clear_route_cache=True,
                destination=destination,
            )
        ]

    @staticmethod
    def _prefill_headers(
        life: RequestLifecycle, decision: Decision
    ) -> tuple[dict[str, str], list[str]]:
        """P/D on the Envoy path (llm-d's convention): the destination is the decode pod
        and the best prefill pod travels in `PREFILL_HEADER` to the sidecar there, which
        runs the prefill leg (frontends/pd_sidecar.py); its end is reported when the
        request ends. Whatever a client sent under these names is replaced or removed."""
        if not decision.prefill:
            return {}, [PREFILL_HEADER, LEGACY_PREFILL_HEADER]
        target = decision.prefill[0]
        life.prefill_picked(target)
        return {PREFILL_HEADER: endpoint_address(target.address, target.port)}, [
            LEGACY_PREFILL_HEADER
        ]

    def reject(self, rejection: Rejection) -> Responses:
        """The driver's refusal, counted and logged as every picker refusal is."""
        model = self.decision.client_model if self.decision else ""
        self.director.child(self.director.metrics.errors, model, "", str(rejection.status)).inc()
        log.info("rejected %s: %s", rejection.status, rejection.message)
        if self.trace is not None:
            self.trace.refused(rejection.status, rejection.code)
            self.trace.finished(status=rejection.status)
            self.trace = None
        return super().reject(rejection)

    # ------------------------------------------------------------------ response

    async def on_response_headers(self, request: pb.ProcessingRequest) -> Responses:
        headers = read_headers(request.response_headers)
        self.status = int(headers.get(":status", "200") or 200)
        self.streaming = headers.get("content-type", "").startswith("text/event-stream")
        if self.life is not None:
            self.life.answered(self.status, self.streaming, self.options.max_usage_scan_bytes)
            if self.streaming and self.life.decision.strip_usage:
                self.usage_filter = UsageEventFilter(self.life.chunk)
            if self.status == 503:
                self._check_unreachable(request)
        if request.response_headers.end_of_stream:
            self._first_byte()
            self.finish()
        # A rewritten body changes length: drop content-length, Envoy re-frames it.
        remove = ["content-length"] if self.rewriter is not None else None
        explained = {EXPLAINED_HEADER: self.explained} if self.explained is not None else None
        answer = headers_response(request=False, remove=remove, set_headers=explained)
        if self._holds(request):
            self.hold = AnswerHold(answer, self.options.max_usage_scan_bytes)
            return []
        return [answer]

    def _holds(self, request: pb.ProcessingRequest) -> bool:
        """Whether the headers answer waits for the budget's verdict (module docstring)."""
        return (
            self.response_mode == FULL_DUPLEX
            and self.status == 200
            and self.life is not None
            and self.life.budget is not None
            and not request.response_headers.end_of_stream
        )

    def _check_unreachable(self, request: pb.ProcessingRequest) -> None:
        """A 503: if Envoy could not reach the pod (UF / UC / UH), the store stops picking
        it until a fresh scrape (envoy_failure.py); without the flags, the body says."""
        verdict = flags_say_unreachable(request)
        if verdict is None:
            self.sniff = bytearray()
        elif verdict and self.life is not None:
            self.life.unreachable()

    def _sniff(self, chunk: bytes, eos: bool) -> None:
        assert self.sniff is not None
        self.sniff += chunk[: SNIFF_BYTES - len(self.sniff)]
        if len(self.sniff) < SNIFF_BYTES and not eos:
            return
        if body_says_unreachable(bytes(self.sniff)) and self.life is not None:
            self.life.unreachable()
        self.sniff = None

    async def on_response_body(self, request: pb.ProcessingRequest) -> Responses:
        part = request.response_body
        chunk, eos = part.body, part.end_of_stream
        if self.cut:  # STREAMED after a cut: nothing more reaches the client
            return [body_replacement(b"", request=False, clear=True)]
        hold = self.hold
        if hold is None:
            if self.response_mode == BUFFERED and eos and not await self._admit_whole(chunk):
                return self._refuse_whole()
            return await self._pass_body(chunk, eos)
        if not self.streaming:
            return await self._held_json(hold, chunk, eos)
        if not chunk and not eos:
            return []  # the verdict waits for the first bytes
        out = await self._pass_body(chunk, eos)
        if self.closed or (not out and not eos):  # refused, or nothing to send yet (a
            return out  # partial line the model rewriter keeps): still before any byte
        return self._release(hold, out)

    async def _held_json(self, hold: AnswerHold, chunk: bytes, eos: bool) -> Responses:
        """A held 200 JSON body: kept to the bound, then judged whole or released."""
        if not hold.add(chunk):  # past the usage scan's bound: it streams on as it is
            return self._release(hold, await self._pass_body(hold.take(), eos))
        if not eos:
            return []
        whole = hold.take()
        if not await self._admit_whole(whole):
            return self._refuse_whole()
        return self._release(hold, await self._pass_body(whole, eos))

    def _release(self, hold: AnswerHold, out: Responses) -> Responses:
        """The held headers answer goes out first, then what followed it."""
        self.hold = None
        return [hold.headers, *out]

    async def _pass_body(self, chunk: bytes, eos: bool) -> Responses:
        """A response body chunk on its way to the client (rewritten, counted, cut)."""
        if self.sniff is not None:
            self._sniff(chunk, eos)
        if chunk:
            self._first_byte()
        out = self._rewrite(chunk, eos)
        if out and not await self._admit(out):
            return self._cut()
        if self.life is not None and out:
            self.life.chunk(out)
        if eos:
            self.finish()
        if self.response_mode == FULL_DUPLEX:
            if out is None or (not out and not eos):
                return []
            return list(body_chunks(out, request=False, end_of_stream=eos))
        # BUFFERED / STREAMED: exactly one answer per message.
        changed = out is not None and out != chunk
        return [body_replacement(out if changed else None, request=False)]

    async def _admit_whole(self, body: bytes) -> bool:
        """The token budget's word on a whole 200 JSON answer (True when none applies)."""
        budget = self.life.budget if self.life is not None else None
        if budget is None or self.streaming or self.status != 200:
            return True
        return await budget.admit_whole(body)

    def _refuse_whole(self) -> Responses:
        """A whole answer over the window: `igw serve`'s 429 in its place."""
        assert self.life is not None
        self.life.cancelled(RATE_LIMITED)  # generated, but not delivered past the limit
        self.finished = self.closed = True
        self.hold = None
        return [self._over_window(whole=True)]

    def _over_window(self, *, whole: bool) -> pb.ProcessingResponse:
        """The 429 of an answer refused before any byte of it went out (Envoy still
        holds the response headers), with `Retry-After` as `igw serve` sends it."""
        assert self.life is not None and self.life.budget is not None
        refusal = refusals.over_window(
            self.life.budget.retry_after_s(), self.life.decision.headers, whole=whole
        )
        return immediate_response(429, refusal.body(), refusal.headers, details=refusal.code)

    async def _admit(self, out: bytes) -> bool:
        """The token budget's word on a 200 SSE chunk (True when no budget applies)."""
        budget = self.life.budget if self.life is not None else None
        if budget is None or not self.streaming or self.status != 200:
            return True
        return await budget.admit(out)

    def _cut(self) -> Responses:
        """The stream outgrew the client's token window: answer the refused chunk with
        the rate-limit event instead, and end the response there (see the module
        docstring for how each body mode ends it)."""
        assert self.life is not None
        self.life.cancelled(RATE_LIMITED)  # settles prompt + what was delivered
        self.finished = True
        end = StreamEnd.OVER_LIMIT
        if self.response_mode == BUFFERED or self.hold is not None:
            self.closed = True  # the headers still wait on this answer: a clean 429
            self.hold = None
            return [self._over_window(whole=False)]
        if self.response_mode == FULL_DUPLEX:
            self.closed = True  # whatever Envoy still sends is not read
            event = stream_error_event(end)
            return list(body_chunks(event, request=False, end_of_stream=True))
        self.cut = True
        return [body_replacement(stream_error_event(end), request=False)]

    async def on_response_trailers(self, request: pb.ProcessingRequest) -> Responses:
        released: Responses = []
        hold = self.hold
        if hold is not None:  # trailers end the body: the verdict is due now
            whole = hold.take()
            if not await self._admit_whole(whole):
                return self._refuse_whole()
            released = self._release(hold, await self._pass_body(whole, False) if whole else [])
        out = [] if self.cut else self._flush_held()
        self.finish()
        return [*released, *out, trailers_response(request=False)]

    def _flush_held(self) -> Responses:
        """Trailers end the body: what the rewriter still holds (a JSON body, a partial
        SSE line) goes out before them, without end_of_stream (Envoy sent none)."""
        if self.rewriter is None or self.response_mode != FULL_DUPLEX:
            return []
        if self.streaming:
            tail = self.rewriter.flush()
        else:
            whole, self.held_json = bytes(self.held_json), bytearray()
            tail = self.rewriter.json_body(whole) if whole else b""
        if not tail:
            return []
        if self.life is not None:
            self.life.chunk(tail)
        return list(body_chunks(tail, request=False, end_of_stream=False))

    def _rewrite(self, chunk: bytes, eos: bool) -> bytes | None:
        """The bytes to pass on now; None while a JSON body is held for its rewrite."""
        if self.usage_filter is not None:  # streaming: the events the client asked for
            chunk = self.usage_filter.stream_chunk(chunk)
            if eos:
                chunk += self.usage_filter.flush()
        if self.rewriter is None:
            return chunk
        if self.streaming:
            out = self.rewriter.stream_chunk(chunk)
            return out + self.rewriter.flush() if eos else out
        if self.response_mode == STREAMED:
            return chunk  # one answer per chunk: a JSON body cannot be held
        self.held_json += chunk
        if not eos and self.response_mode != BUFFERED:  # BUFFERED: one message, whole
            return None
        whole, self.held_json = bytes(self.held_json), bytearray()
        return self.rewriter.json_body(whole)

    def _first_byte(self) -> None:
        if self.first_byte or self.life is None:
            return
        self.first_byte = True
        self.life.first_byte()

    # ------------------------------------------------------------------ end

    def finish(self) -> None:
        """The response ended (or Envoy closed the stream cleanly): report it once."""
        self.hold = None  # nothing held outlives the exchange
        self.release()
        if self.finished:
            self._end_trace()
            return
        self.finished = True
        if self.life is not None:
            self.life.finished()
        self._end_trace()

    def _end_trace(self) -> None:
        trace, self.trace = self.trace, None
        if trace is not None:
            trace.finished(self.life, status=self.status or None)

    def cancel(self) -> None:
        """The stream broke before the response ended: Envoy or its client went away."""
        if self.life is not None and not self.finished:
            self.life.cancelled(CLIENT_CANCELLED)
        self.finished = True
        self.hold = None  # a held answer and its body go with the request
        self.held_json = bytearray()
        self.release()
        self._end_trace()


class ExtProcServicer:
    """`envoy.service.ext_proc.v3.ExternalProcessor/Process` over a `Director`, on either
    gRPC server: `serve_call` for `Http2GrpcServer`, `Process` for grpc.aio (registered
    with raw bytes, `assembly.picker`). Both run the shared driver (`stream.drive`)."""

    def __init__(
        self,
        director: Director,
        options: PickerOptions | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
        budget: BodyBudget | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.director = director
        self.options = options or PickerOptions()
        self.clock = clock
        self.tracing = tracing or Tracing.off()
        self.budget = budget or BodyBudget()  # request bodies still arriving, all streams
        self.active = 0  # ext_proc streams open now (a drain waits for 0)
        self.opened = 0  # streams ever opened

    def exchange(self, metadata: Mapping[str, str] | None = None) -> Exchange:
        """A stream's exchange; `metadata`: its gRPC metadata (the trace context)."""
        return Exchange(
            self.director, self.options, self.clock, self.budget, self.tracing, metadata
        )

    async def serve_call(self, call: Call) -> None:
        """One stream on `Http2GrpcServer`: one socket write per batch of answers."""
        await self.process(CallChannel(call), call.headers)

    async def Process(  # gRPC's method name
        self,
        request_iterator: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext[bytes, bytes],
    ) -> None:
        """One stream on grpc.aio (`context.read`/`write` cost less per message than an
        async generator)."""
        metadata = context.invocation_metadata() or ()
        await self.process(ContextChannel(context), {str(k): str(v) for k, v in metadata})

    async def process(self, channel: Channel, metadata: Mapping[str, str] | None = None) -> None:
        self.active += 1
        self.opened += 1
        try:
            await drive(self.exchange(metadata), channel)
        finally:
            self.active -= 1

    def endpoints_ready(self) -> list[Endpoint]:
        return [e for e in self.director.endpoints() if not e.stale]
