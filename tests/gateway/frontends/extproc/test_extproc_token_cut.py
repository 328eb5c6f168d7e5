"""The picker cuts a stream that outgrows the client's token window (issue 23).

Envoy's half is played by `FakeEnvoy` (the real one: tests/e2e/envoy/test_envoy_token_cut.py);
the SSE chunks are written here, one token each, so the count is exact. What the answers
must look like comes from Envoy's own source (envoyproxy/envoy v1.40):

* FULL_DUPLEX_STREAMED: `source/extensions/filters/http/ext_proc/processor_state.cc`
  handleDuplexStreamedBodyResponse injects `StreamedBodyResponse.body` into the filter
  chain with its `end_of_stream`: true ends the client's response cleanly. `ext_proc.cc`
  isLastBodyResponse / closeGrpcStreamIfLastRespReceived then close the gRPC stream, so
  the picker ends its side too and reads nothing more.
* BUFFERED: the response headers wait for the body's answer (processor_state.cc
  handleHeadersResponse), so an `ImmediateResponse` is still a clean 429
  (`source/common/http/filter_manager.cc` sendLocalReply, sendDirectLocalReply branch):
  what `igw serve` answers for a stream refused before its first byte.
* STREAMED: one `BodyResponse` per chunk with a plain `BodyMutation` (a
  `streamed_response` there is a spurious message, processor_state.cc
  handleBodyInStreamedState), so the cut chunk becomes the event and later ones are
  cleared (`clear_body`).
"""

from __future__ import annotations

import orjson
import pytest
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from fake_envoy import BUFFERED, FULL_DUPLEX, ExchangeStream, FakeEnvoy, PickerFactory

from inference_gateway.core.request.relay import StreamEnd, stream_error_event
from inference_gateway.frontends.extproc.wire import header_map

STREAMED = ProcessingMode.STREAMED
COMPLETIONS = "/v1/completions"
LIMIT = 60
CONFIG = {"rateLimits": [{"tokensPerMinute": LIMIT}]}
KEY = {"authorization": "Bearer client-a"}
BODY = orjson.dumps({"model": "llama-3.1-8b", "prompt": "hello", "max_tokens": 4, "stream": True})
EVENT = stream_error_event(StreamEnd.OVER_LIMIT)


def token_chunk(i: int) -> bytes:
    """One SSE event of one token, as vLLM streams a completion."""
    choice = {"index": 0, "text": f" t{i}", "logprobs": None, "finish_reason": None}
    event = {"id": "cmpl-1", "object": "text_completion", "model": "llama-3.1-8b",
             "choices": [choice]}  # fmt: skip
    return b"data: " + orjson.dumps(event) + b"\n\n"


async def start_stream(envoy: FakeEnvoy, mode: int) -> ExchangeStream:
    """Route the request, then give the picker the pod's 200 SSE headers. In
    FULL_DUPLEX_STREAMED their answer waits for the first chunk's verdict
    (test_extproc_whole_refusal.py), so only the other modes wait for it here."""
    stream = envoy.open()
    out = await envoy.send_request(stream, COMPLETIONS, BODY, headers=KEY, mode=mode)
    assert out.immediate is None
    start = len(stream.received)
    headers = {":status": "200", "content-type": "text/event-stream"}
    await stream.send(
        pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=header_map(headers)))
    )
    if mode != FULL_DUPLEX:
        await stream.wait_for(lambda m: m.HasField("response_headers"), start)
    return stream


async def feed(stream: ExchangeStream, chunk: bytes, eos: bool = False) -> pb.ProcessingResponse:
    start = len(stream.received)
    await stream.send(
        pb.ProcessingRequest(response_body=pb.HttpBody(body=chunk, end_of_stream=eos))
    )
    answered = await stream.wait_for(
        lambda m: m.HasField("response_body") or m.HasField("immediate_response"), start
    )
    return stream.received[answered]


async def test_full_duplex_cut_is_the_event_with_end_of_stream(
    make_picker: PickerFactory,
) -> None:
    picker = await make_picker(CONFIG)
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        stream = await start_stream(envoy, FULL_DUPLEX)
        delivered = 0
        for i in range(3 * LIMIT):  # far more than the window holds
            answer = await feed(stream, token_chunk(i))
            streamed = answer.response_body.response.body_mutation.streamed_response
            if streamed.body != token_chunk(i):
                break
            assert not streamed.end_of_stream
            delivered += 1
        expected = pb.ProcessingResponse()
        cut = expected.response_body.response.body_mutation.streamed_response
        cut.body, cut.end_of_stream = EVENT, True
        assert answer == expected  # the wire shape Envoy ends the stream on
        error = orjson.loads(EVENT[len(b"data: ") :])["error"]
        assert error["code"] == "rate_limit_exceeded" and error["type"] == "tokens"
        assert 4 < delivered < LIMIT  # grown past the reservation, never past the limit
        # the picker ended the exchange by itself: nothing Envoy sends now is answered
        assert await stream.ended()
        answers = len(stream.received)
        await stream.send(pb.ProcessingRequest(response_body=pb.HttpBody(body=token_chunk(0))))
        assert len(stream.received) == answers
        # the window is spent: the next request of this key is refused up front
        again = await envoy.exchange(COMPLETIONS, BODY, headers=KEY)
        assert again.immediate is not None and again.immediate.status.code == 429
        assert orjson.loads(again.immediate.body)["error"]["code"] == "rate_limited"
    rejected = picker.director.metrics.rejected.labels("llama-3.1-8b", "rate_limited")
    assert rejected._value.get() == 2  # type: ignore[attr-defined]  # the cut + the 429
    assert all(e.inflight == 0 for e in picker.store.endpoints)


async def test_streamed_cut_replaces_the_chunk_then_clears_the_rest(
    make_picker: PickerFactory,
) -> None:
    picker = await make_picker(CONFIG)
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        stream = await start_stream(envoy, STREAMED)
        answers = [await feed(stream, token_chunk(i)) for i in range(2 * LIMIT)]
        mutations = [a.response_body.response.body_mutation for a in answers]
        kinds = [m.WhichOneof("mutation") for m in mutations]
        delivered = kinds.index("body")  # passed through unchanged until the cut
        assert 4 < delivered < LIMIT
        assert kinds[:delivered] == [None] * delivered
        assert mutations[delivered].body == EVENT
        assert all(m.clear_body for m in mutations[delivered + 1 :])
        last = await feed(stream, b"")  # the upstream's end still gets its answer
        assert last.response_body.response.body_mutation.clear_body
        await stream.close()


@pytest.mark.parametrize("mode", [FULL_DUPLEX, STREAMED], ids=["full-duplex", "streamed"])
async def test_stream_within_its_window_is_untouched(make_picker: PickerFactory, mode: int) -> None:
    """A test that can fail: the same stream, short enough, passes through whole."""
    picker = await make_picker(CONFIG)
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        stream = await start_stream(envoy, mode)
        for i in range(4):
            answer = await feed(stream, token_chunk(i))
            mutation = answer.response_body.response.body_mutation
            passed = mutation.streamed_response.body if mode == FULL_DUPLEX else token_chunk(i)
            assert passed == token_chunk(i) and not mutation.body and not mutation.clear_body
        await stream.close()


async def test_buffered_stream_over_the_window_is_a_429(make_picker: PickerFactory) -> None:
    picker = await make_picker(CONFIG)
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        stream = await start_stream(envoy, BUFFERED)
        whole = b"".join(token_chunk(i) for i in range(3 * LIMIT)) + b"data: [DONE]\n\n"
        answer = await feed(stream, whole, eos=True)
        assert answer.HasField("immediate_response")
        refusal = answer.immediate_response
        assert refusal.status.code == 429 and refusal.details == "rate_limit_exceeded"
        error = orjson.loads(refusal.body)["error"]
        assert (error["type"], error["code"]) == ("tokens", "rate_limit_exceeded")
        assert error["message"] == orjson.loads(EVENT[len(b"data: ") :])["error"]["message"]
        headers = {h.header.key: h.header.raw_value for h in refusal.headers.set_headers}
        assert headers["x-ratelimit-limit-tokens"] == str(LIMIT).encode()
        assert await stream.ended()
