"""ext_proc details checked message by message against the upstream picker and Envoy.

Each test names the upstream rule it pins: the Gateway API Inference Extension's Go
endpoint picker (kubernetes-sigs/gateway-api-inference-extension, `pkg/epp`, `pkg/bbr`)
and Envoy's ext_proc filter (`envoy.service.ext_proc.v3`, `source/extensions/filters/
http/ext_proc`). The exchange runs against a real `Director` and endpoint store whose
scrape seam answers the pods' metrics (no model server is needed to check messages).
"""

from __future__ import annotations

import time

import orjson
import pytest
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from fake_envoy import FakeEnvoy, request_headers_message

from inference_gateway.assembly.picker import build_picker
from inference_gateway.core.request.director import Director
from inference_gateway.core.request.subset_hint import hinted_hostports
from inference_gateway.core.request.usage import UsageScanner
from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.core.traffic.rewrites import RewriteSet, parse_rewrites
from inference_gateway.frontends.bbr import start_bbr
from inference_gateway.frontends.extproc.picker import Exchange, PickerOptions
from inference_gateway.frontends.extproc.wire import header_map

FULL_DUPLEX = ProcessingMode.FULL_DUPLEX_STREAMED
BUFFERED = ProcessingMode.BUFFERED
MODEL = "llama-3.1-8b"
METRICS = "vllm:num_requests_waiting 0\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.1\n"


async def director_for(
    addresses: list[str],
    config: dict[str, object] | None = None,
    rewrites: RewriteSet | None = None,
) -> Director:
    endpoints = [Endpoint(f"pod-{i}", a, 8000, pool="p") for i, a in enumerate(addresses)]
    models = orjson.dumps({"data": [{"id": MODEL}, {"id": "sql"}]}).decode()

    async def fetch(endpoint: Endpoint, path: str) -> str:
        return models if path == "/v1/models" else METRICS

    picker = build_picker(
        endpoints, parse_config(config) if config else None, fetch=fetch, rewrites=rewrites
    )
    await picker.store.scrape_once()
    return picker.director


def body_message(body: bytes, *, end_of_stream: bool = True) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=end_of_stream))


def chat(model: str = MODEL) -> bytes:
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})


async def routed(
    director: Director,
    *,
    subset: list[str] | None = None,
    mode: int = FULL_DUPLEX,
    model: str = MODEL,
) -> tuple[Exchange, list[pb.ProcessingResponse]]:
    exchange = Exchange(director, PickerOptions(), time.perf_counter)
    headers = request_headers_message("/v1/chat/completions", subset=subset, mode=mode)
    first = await exchange.handle(headers)
    return exchange, first + await exchange.handle(body_message(chat(model)))


def destination_of(responses: list[pb.ProcessingResponse]) -> str:
    for response in responses:
        lb = response.dynamic_metadata.fields["envoy.lb"].struct_value
        if "x-gateway-destination-endpoint" in lb.fields:
            return lb.fields["x-gateway-destination-endpoint"].string_value
    raise AssertionError(f"no destination in {responses!r}")


CANARY = [
    {
        "kind": "InferenceModelRewrite",
        "metadata": {"name": "canary"},
        "spec": {
            "rules": [
                {
                    "matches": [{"model": {"type": "Exact", "value": "assistant"}}],
                    "targets": [{"modelRewrite": MODEL, "weight": 1}],
                }
            ]
        },
    }
]


@pytest.mark.parametrize("streaming", [False, True])
async def test_response_trailers_flush_what_the_rewriter_holds(streaming: bool) -> None:
    """Envoy ext_proc, FULL_DUPLEX_STREAMED: when the backend sends trailers, the body's
    last chunk arrives without end_of_stream and the response_trailers message ends the
    body; the processor must have sent every body byte by its trailers answer (Envoy's
    ext_proc filter forwards the streamed mutations, then the trailers). Bytes the
    model-name rewriter held (a JSON body, a partial SSE line) went missing before."""
    director = await director_for(["10.0.0.1"], rewrites=parse_rewrites(CANARY, known_models=None))
    exchange, _ = await routed(director, model="assistant")
    assert exchange.rewriter is not None
    content_type = "text/event-stream" if streaming else "application/json"
    await exchange.handle(
        pb.ProcessingRequest(
            response_headers=pb.HttpHeaders(
                headers=header_map({":status": "200", "content-type": content_type})
            )
        )
    )
    upstream = (
        b'data: {"model": "llama-3.1-8b", "n": 1}\n\ndata: {"model": "llama-3.1-8b", "n": 2}'
        if streaming
        else b'{"model": "llama-3.1-8b", "usage": {"completion_tokens": 3}}'
    )
    sent = await exchange.handle(
        pb.ProcessingRequest(response_body=pb.HttpBody(body=upstream, end_of_stream=False))
    )
    trailers = await exchange.handle(
        pb.ProcessingRequest(response_trailers=pb.HttpTrailers(trailers=header_map({"x": "1"})))
    )
    answers = sent + trailers
    assert answers[-1].HasField("response_trailers")
    chunks = [m.response_body.response.body_mutation.streamed_response for m in answers[:-1]]
    assert not any(c.end_of_stream for c in chunks)  # Envoy never sent one
    body = b"".join(c.body for c in chunks)
    if streaming:
        events = [orjson.loads(line[6:]) for line in body.split(b"\n") if line]
        assert [e["n"] for e in events] == [1, 2]
        assert {e["model"] for e in events} == {"assistant"}
    else:
        assert orjson.loads(body) == {"model": "assistant", "usage": {"completion_tokens": 3}}


async def test_ipv6_destination_is_bracketed_and_subset_hints_match_by_ip() -> None:
    """Upstream GIE writes the destination with Go's `net.JoinHostPort` (`[ip]:port` for
    IPv6), the form Envoy's address parser (`Network::Utility::parseInternetAddressAndPort`)
    requires for an ORIGINAL_DST / override host. Upstream's subset filter
    (`pkg/epp/.../filter/subset_filter.go`) keeps the pods whose *address* the hint
    names, whatever port it carries; a bare IPv6 entry is an address, not `host:port`."""
    director = await director_for(["fd00::1", "fd00::2", "10.0.0.3"])
    _, answers = await routed(director, subset=["fd00::2"])
    assert destination_of(answers) == "[fd00::2]:8000"
    _, answers = await routed(director, subset=["[fd00:0::1]:9999"])  # other port, same IP
    assert destination_of(answers) == "[fd00::1]:8000"
    _, answers = await routed(director, subset=["10.0.0.3:1234"])
    assert destination_of(answers) == "10.0.0.3:8000"
    header = next(
        o.header.raw_value
        for m in answers
        for o in m.request_headers.response.header_mutation.set_headers
        if o.header.key == "x-gateway-destination-endpoint"
    )
    assert header == b"10.0.0.3:8000"


def test_hinted_hostports_parse_every_spelling() -> None:
    """The subset hint forms the protocol allows (GIE proposal 004: `<ip:port>` entries;
    bare IPs tolerated) resolve to the endpoints' own `address:port`."""
    endpoints = [Endpoint("a", "fd00::1", 8000), Endpoint("b", "10.0.0.1", 8000)]
    assert hinted_hostports(None, endpoints) is None
    assert hinted_hostports([], endpoints) == []
    assert hinted_hostports(["[FD00::1]"], endpoints) == ["fd00::1:8000"]
    assert hinted_hostports(["10.0.0.1"], endpoints) == ["10.0.0.1:8000"]
    assert hinted_hostports(["10.0.0.2:8000", "fd00::9"], endpoints) == []


async def test_request_trailers_are_not_answered_with_end_of_stream() -> None:
    """Envoy ext_proc, FULL_DUPLEX_STREAMED: with request trailers the last body chunk
    comes with end_of_stream false and the trailers close the stream; a streamed
    mutation flagged end_of_stream that Envoy never sent makes it end the request body
    early (the trailers are then out of order). The decision is answered at the
    trailers, its body chunks unflagged, then the trailers answer."""
    director = await director_for(["10.0.0.1"])
    exchange = Exchange(director, PickerOptions(), time.perf_counter)
    await exchange.handle(request_headers_message("/v1/chat/completions"))
    assert await exchange.handle(body_message(chat(), end_of_stream=False)) == []
    answers = await exchange.handle(
        pb.ProcessingRequest(request_trailers=pb.HttpTrailers(trailers=header_map({"x": "1"})))
    )
    assert answers[0].HasField("request_headers")
    bodies = [m.request_body.response.body_mutation.streamed_response for m in answers[1:-1]]
    assert bodies and not any(b.end_of_stream for b in bodies)
    assert b"".join(b.body for b in bodies) == chat()
    assert answers[-1].HasField("request_trailers")


async def test_buffered_mode_extends_envoys_message_timeout_before_admission() -> None:
    """Envoy ext_proc: `ProcessingResponse.override_message_timeout` restarts the timer
    of the message being processed (up to the filter's `max_message_timeout`); without
    it a request that waits in the picker's admission queue longer than Envoy's
    `message_timeout` (200 ms by default) fails with 504 in BUFFERED mode."""
    director = await director_for(
        ["10.0.0.1"], {"flowControl": {"bands": {"standard": {"maxQueue": 8, "ttlS": 7}}}}
    )
    exchange = Exchange(director, PickerOptions(), time.perf_counter)
    await exchange.handle(request_headers_message("/v1/chat/completions", mode=BUFFERED))
    override = exchange.early(body_message(chat()))
    assert override is not None and override.WhichOneof("response") is None
    assert override.override_message_timeout.ToTimedelta().total_seconds() >= 7
    duplex = Exchange(director, PickerOptions(), time.perf_counter)
    await duplex.handle(request_headers_message("/v1/chat/completions"))
    assert duplex.early(body_message(chat())) is None


async def test_buffered_override_reaches_envoy_before_the_body_answer(
    make_picker: object,
) -> None:
    """The same rule over the wire, on both gRPC servers: the override is a message of
    its own, sent before the (possibly queued) routing answer."""
    picker = await make_picker()  # type: ignore[operator]
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        out = await envoy.exchange("/v1/chat/completions", chat(), mode=BUFFERED)
    kinds = [m.WhichOneof("response") for m in out.messages]
    assert kinds[:3] == ["request_headers", None, "request_body"]
    assert out.messages[1].HasField("override_message_timeout")
    assert out.status == 200


@pytest.mark.parametrize(
    ("streaming", "body"),
    [
        (False, b'{"object": "response", "usage": {"input_tokens": 5, "output_tokens": 7}}'),
        (
            True,
            b'event: response.completed\ndata: {"type": "response.completed", "response": '
            b'{"usage": {"input_tokens": 5, "output_tokens": 7}}}\n\n',
        ),
        (False, b'{"usage": {"prompt_tokens": 5, "completion_tokens": 7}}'),
    ],
)
def test_usage_is_read_from_the_responses_api_shape(streaming: bool, body: bytes) -> None:
    """OpenAI's Responses API (which vLLM serves at /v1/responses) reports
    `usage.output_tokens`, in the streamed `response.completed` event inside `response`;
    chat/completions report `usage.completion_tokens`. Upstream GIE's response parser
    reads both shapes."""
    from inference_gateway.core.request.usage import output_tokens

    scanner = UsageScanner(streaming, 1 << 20)
    scanner.feed(body)
    usage = scanner.close()
    assert usage is not None and output_tokens(usage) == 7


@pytest.mark.parametrize(
    ("model", "base"),
    [(MODEL, MODEL), ("sql", MODEL)],
)
async def test_bbr_sets_the_base_model_header_on_every_request(model: str, base: str) -> None:
    """Upstream BBR (`pkg/bbr/handlers/request.go`, its tests: "HandleRequestBody always
    sets BaseModelHeader") sets X-Gateway-Base-Model-Name on every request, so an
    HTTPRoute that matches it also takes requests naming the base model itself."""
    config = {
        "pools": [{"name": "p", "selector": {"app": "vllm"}}],
        "models": [{"name": MODEL, "pool": "p", "adapters": ["sql"]}],
    }
    server, port = await start_bbr(parse_config(config), host="127.0.0.1", port=0)
    try:
        async with FakeEnvoy(f"127.0.0.1:{port}") as envoy:
            stream = envoy.open()
            out = await envoy.send_request(stream, "/v1/completions", chat(model))
            await stream.close()
    finally:
        await server.stop(0)
    assert out.request_headers["X-Gateway-Base-Model-Name"] == base
    assert out.request_headers["X-Gateway-Model-Name"] == model


async def test_bbr_answers_responses_in_the_response_body_mode() -> None:
    """Envoy ext_proc: the response body is answered in `response_body_mode`, which may
    differ from the request's; an answer of the other mode's shape (a streamed mutation
    to a BUFFERED body, or the reverse) makes Envoy fail the request with 500."""
    server, port = await start_bbr(None, host="127.0.0.1", port=0)
    try:
        async with FakeEnvoy(f"127.0.0.1:{port}") as envoy:
            stream = envoy.open()
            headers = request_headers_message("/v1/completions")
            headers.protocol_config.response_body_mode = BUFFERED
            await stream.send(headers)
            await stream.send(body_message(chat()))
            await stream.wait_for(lambda m: m.HasField("request_body"))
            await stream.send(
                pb.ProcessingRequest(response_body=pb.HttpBody(body=b"{}", end_of_stream=True))
            )
            got = await stream.wait_for(lambda m: m.HasField("response_body"))
            await stream.close()
    finally:
        await server.stop(0)
    answer = stream.received[got].response_body.response
    assert not answer.body_mutation.HasField("streamed_response")
