"""The picker refuses an answer over the client's token window as `igw serve` does: a
429 in place of the whole answer (issue 23), by holding its response-headers answer.

Envoy's half is played by `FakeEnvoy`'s stream (the real one:
tests/e2e/envoy/test_envoy_whole_refusal.py); the pod's answers are written here, so
their `usage` is exact. What Envoy does, from its source (envoyproxy/envoy v1.40):

* `source/extensions/filters/http/ext_proc/ext_proc.cc` onData: in FULL_DUPLEX_STREAMED
  body chunks go to the processor while the headers call is still pending
  (handleDataStreamedModeBase keeps the HeadersCallback state), so the picker sees the
  body before it answers `response_headers`;
* `processor_state.cc` onStartProcessorCall arms no message timer in
  FULL_DUPLEX_STREAMED, so holding the answer races no `message_timeout`;
  handleHeadersResponse then moves to the streamed-body state when body chunks came,
  and the streamed body answers that follow are injected in order;
* the response headers have not reached the client while their answer is held, so an
  `ImmediateResponse` is a clean local reply (`source/common/http/filter_manager.cc`
  sendLocalReply, the sendDirectLocalReply branch), as in BUFFERED mode.

The order of answers (headers, body, trailers) is the one the GIE EPP keeps when it
holds its request-headers answer (kubernetes-sigs/gateway-api-inference-extension
`pkg/epp/handlers/server.go` updateStateAndSendIfNeeded).
"""

from __future__ import annotations

import orjson
import pytest
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from fake_envoy import (
    BUFFERED,
    FULL_DUPLEX,
    ExchangeStream,
    FakeEnvoy,
    PickerFactory,
    request_headers_message,
)

from inference_gateway.core.request.contracts import openai_error
from inference_gateway.core.request.lifecycle import CLIENT_CANCELLED
from inference_gateway.core.request.relay import StreamEnd, end_error
from inference_gateway.core.traffic.rewrites import parse_rewrites
from inference_gateway.frontends.extproc.picker import PickerOptions
from inference_gateway.frontends.extproc.wire import body_chunks, header_map, headers_response

STREAMED = ProcessingMode.STREAMED
COMPLETIONS = "/v1/completions"
LIMIT = 60
CONFIG = {"rateLimits": [{"tokensPerMinute": LIMIT}]}
KEY = {"authorization": "Bearer client-a"}
JSON_HEADERS = {":status": "200", "content-type": "application/json"}
SSE_HEADERS = {":status": "200", "content-type": "text/event-stream"}


def request_body(stream: bool = False) -> bytes:
    return orjson.dumps(
        {"model": "llama-3.1-8b", "prompt": "hello", "max_tokens": 4, "stream": stream}
    )


def completion(tokens: int) -> bytes:
    """A vLLM completions answer whose usage reports `tokens` generated."""
    choice = {"index": 0, "text": " t" * tokens, "logprobs": None, "finish_reason": "length"}
    usage = {"prompt_tokens": 2, "completion_tokens": tokens, "total_tokens": 2 + tokens}
    answer = {"id": "cmpl-1", "object": "text_completion", "model": "llama-3.1-8b",
              "choices": [choice], "usage": usage}  # fmt: skip
    return orjson.dumps(answer)


def token_events(n: int) -> bytes:
    event = {"id": "cmpl-1", "object": "text_completion", "model": "llama-3.1-8b",
             "choices": [{"index": 0, "text": " t", "finish_reason": None}]}  # fmt: skip
    return (b"data: " + orjson.dumps(event) + b"\n\n") * n


async def routed(envoy: FakeEnvoy, mode: int = FULL_DUPLEX, stream: bool = False) -> ExchangeStream:
    exchange = envoy.open()
    out = await envoy.send_request(
        exchange, COMPLETIONS, request_body(stream), headers=KEY, mode=mode
    )
    assert out.immediate is None
    return exchange


async def send(exchange: ExchangeStream, message: pb.ProcessingRequest) -> None:
    await exchange.send(message)


def response_headers(headers: dict[str, str]) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=header_map(headers)))


def response_body(chunk: bytes, eos: bool = False) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(response_body=pb.HttpBody(body=chunk, end_of_stream=eos))


def refusal_of(answer: pb.ProcessingResponse, *, whole: bool) -> dict[str, str]:
    """Check an `ImmediateResponse` is igw serve's 429 to the byte; its headers."""
    assert answer.WhichOneof("response") == "immediate_response"
    refusal = answer.immediate_response
    end = StreamEnd.OVER_LIMIT
    message, kind = end_error(end, whole=whole)
    assert refusal.status.code == 429 and refusal.details == end.value
    assert refusal.body == openai_error(message, kind, end.value, None)
    headers = {h.header.key: h.header.raw_value.decode() for h in refusal.headers.set_headers}
    assert headers["content-type"] == "application/json"
    assert headers["x-ratelimit-limit-tokens"] == str(LIMIT)
    assert 0 <= int(headers["x-ratelimit-remaining-tokens"]) < LIMIT
    assert 1 <= int(headers["retry-after"]) <= 61  # a window of 60 s at most (one slot more)
    return headers


async def test_json_over_the_window_is_a_429_in_place_of_the_held_headers(
    make_picker: PickerFactory,
) -> None:
    picker = await make_picker(CONFIG)
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        exchange = await routed(envoy)
        start = len(exchange.received)
        answer = completion(3 * LIMIT)
        await send(exchange, response_headers(JSON_HEADERS))
        await send(exchange, response_body(answer[:40]))
        await send(exchange, response_body(answer[40:], eos=True))
        await exchange.wait_for(lambda m: m.HasField("immediate_response"), start)
        # nothing before it: the headers answer was held, then replaced by the 429
        assert len(exchange.received) == start + 1
        refusal_of(exchange.received[start], whole=True)
        assert await exchange.ended()
    rejected = picker.director.metrics.rejected.labels("llama-3.1-8b", "rate_limited")
    assert rejected._value.get() == 1  # type: ignore[attr-defined]
    assert all(e.inflight == 0 for e in picker.store.endpoints)


async def test_json_within_the_window_is_released_whole_after_the_headers(
    make_picker: PickerFactory,
) -> None:
    """A test that can fail: the same exchange, a small answer, passes byte for byte."""
    picker = await make_picker(CONFIG)
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        exchange = await routed(envoy)
        start = len(exchange.received)
        answer = completion(3)
        await send(exchange, response_headers(JSON_HEADERS))
        await send(exchange, response_body(answer[:40]))
        await send(exchange, response_body(answer[40:], eos=True))
        await exchange.wait_for(lambda m: m.HasField("response_body"), start)
        expected = [headers_response(request=False), *body_chunks(answer, request=False)]
        assert exchange.received[start:] == expected
        await exchange.close()
    assert all(e.inflight == 0 for e in picker.store.endpoints)


async def test_sse_whose_first_chunk_is_refused_is_a_429(make_picker: PickerFactory) -> None:
    picker = await make_picker(CONFIG)
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        exchange = await routed(envoy, stream=True)
        start = len(exchange.received)
        await send(exchange, response_headers(SSE_HEADERS))
        await send(exchange, response_body(b""))  # an empty chunk: still no verdict
        await send(exchange, response_body(token_events(2 * LIMIT)))  # one batch, too big
        await exchange.wait_for(lambda m: m.HasField("immediate_response"), start)
        assert len(exchange.received) == start + 1
        refusal_of(exchange.received[start], whole=False)
        assert await exchange.ended()
    assert all(e.inflight == 0 for e in picker.store.endpoints)


async def test_sse_first_chunk_admitted_releases_the_headers_with_it(
    make_picker: PickerFactory,
) -> None:
    picker = await make_picker(CONFIG)
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        exchange = await routed(envoy, stream=True)
        start = len(exchange.received)
        await send(exchange, response_headers(SSE_HEADERS))
        await send(exchange, response_body(token_events(1)))
        await exchange.wait_for(lambda m: m.HasField("response_body"), start)
        first = [headers_response(request=False), *body_chunks(token_events(1), request=False,
                                                              end_of_stream=False)]  # fmt: skip
        assert exchange.received[start:] == first
        await send(exchange, response_body(token_events(1), eos=True))  # then as it comes
        got = await exchange.wait_for(lambda m: m.HasField("response_body"), start + 2)
        assert exchange.received[got:] == list(body_chunks(token_events(1), request=False))
        await exchange.close()


async def test_a_partial_line_the_rewriter_keeps_does_not_release_the_headers(
    make_picker: PickerFactory,
) -> None:
    """With a model rewrite, a first chunk that ends mid-line sends nothing yet (the
    rewriter keeps it), so the headers stay held and a refusal is still a 429."""
    rule = {"matches": [{"model": {"type": "Exact", "value": "assistant"}}],
            "targets": [{"modelRewrite": "llama-3.1-8b", "weight": 1}]}  # fmt: skip
    rewrites = parse_rewrites(
        [{"kind": "InferenceModelRewrite", "metadata": {"name": "r"}, "spec": {"rules": [rule]}}],
        known_models=None,
    )
    picker = await make_picker(CONFIG, rewrites=rewrites)
    body = orjson.dumps({"model": "assistant", "prompt": "hello", "max_tokens": 4, "stream": True})
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        exchange = envoy.open()
        out = await envoy.send_request(exchange, COMPLETIONS, body, headers=KEY)
        assert out.immediate is None
        start = len(exchange.received)
        events = token_events(2 * LIMIT)
        await send(exchange, response_headers(SSE_HEADERS))
        await send(exchange, response_body(events[:30]))  # part of the first event's line
        await send(exchange, response_body(events[30:]))  # its rest, and too many more
        await exchange.wait_for(lambda m: m.HasField("immediate_response"), start)
        assert len(exchange.received) == start + 1
        refusal_of(exchange.received[start], whole=False)


async def test_json_past_the_scan_bound_streams_on_unjudged(make_picker: PickerFactory) -> None:
    """Beyond `max_usage_scan_bytes` nothing more is held: the headers and what was held
    go out, and the rest follows as it comes (the answer is not judged)."""
    picker = await make_picker(CONFIG, options=PickerOptions(max_usage_scan_bytes=64))
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        exchange = await routed(envoy)
        start = len(exchange.received)
        answer = completion(3 * LIMIT)
        await send(exchange, response_headers(JSON_HEADERS))
        await send(exchange, response_body(answer[:40]))
        await send(exchange, response_body(answer[40:100]))  # 100 bytes held: over 64
        await exchange.wait_for(lambda m: m.HasField("response_body"), start)
        released = [headers_response(request=False),
                    *body_chunks(answer[:100], request=False, end_of_stream=False)]  # fmt: skip
        assert exchange.received[start:] == released
        await send(exchange, response_body(answer[100:], eos=True))
        got = await exchange.wait_for(lambda m: m.HasField("response_body"), start + 2)
        assert exchange.received[got:] == list(body_chunks(answer[100:], request=False))
        await exchange.close()


async def test_buffered_json_over_the_window_is_a_429(make_picker: PickerFactory) -> None:
    """BUFFERED: the headers are answered first (Envoy holds them for the body), and the
    whole body's answer is the same 429."""
    picker = await make_picker(CONFIG)
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        exchange = await routed(envoy, mode=BUFFERED)
        start = len(exchange.received)
        await send(exchange, response_headers(JSON_HEADERS))
        await exchange.wait_for(lambda m: m.HasField("response_headers"), start)
        await send(exchange, response_body(completion(3 * LIMIT), eos=True))
        got = await exchange.wait_for(lambda m: m.HasField("immediate_response"), start)
        refusal_of(exchange.received[got], whole=True)
        assert await exchange.ended()


@pytest.mark.parametrize("mode", [STREAMED, FULL_DUPLEX], ids=["streamed", "no-budget"])
async def test_unheld_answers_pass_as_before(make_picker: PickerFactory, mode: int) -> None:
    """STREAMED answers the headers at once (Envoy sends them on before the body): the
    JSON passes unjudged; without a token limit nothing is held in any mode."""
    picker = await make_picker(CONFIG if mode == STREAMED else None)
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        exchange = await routed(envoy, mode=mode)
        start = len(exchange.received)
        await send(exchange, response_headers(JSON_HEADERS))
        got = await exchange.wait_for(lambda m: m.HasField("response_headers"), start)
        assert exchange.received[got] == headers_response(request=False)
        await send(exchange, response_body(completion(3 * LIMIT), eos=True))
        await exchange.wait_for(lambda m: m.HasField("response_body"), got)
        assert not exchange.refused()
        await exchange.close()


async def test_a_held_answer_goes_with_a_cancelled_exchange(make_picker: PickerFactory) -> None:
    """The exchange itself (no gRPC): Envoy gone while the JSON is held frees the body
    kept so far and ends the request as a client cancel."""
    picker = await make_picker(CONFIG)
    exchange = picker.servicer.exchange()
    assert await exchange.handle(request_headers_message(COMPLETIONS, KEY)) == []
    routing = await exchange.handle(
        pb.ProcessingRequest(request_body=pb.HttpBody(body=request_body(), end_of_stream=True))
    )
    assert routing[0].HasField("request_headers")
    life = exchange.life
    assert life is not None and life.budget is not None
    assert await exchange.handle(response_headers(JSON_HEADERS)) == []
    assert await exchange.handle(response_body(completion(3)[:40])) == []
    assert exchange.hold is not None and len(exchange.hold.body) == 40
    exchange.cancel()
    assert exchange.hold is None
    assert life.outcome == CLIENT_CANCELLED and life.budget.closed
    assert all(e.inflight == 0 for e in picker.store.endpoints)
