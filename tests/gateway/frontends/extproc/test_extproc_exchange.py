"""Whole ext_proc exchanges, Envoy's side played by `FakeEnvoy`, emulated vLLM pods behind.

Each test asserts on the exact protobuf messages Envoy would receive from the picker.
"""

from __future__ import annotations

import orjson
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from fake_envoy import BUFFERED, FakeEnvoy, PickerFactory

from inference_gateway.core.traffic.rewrites import parse_rewrites
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.frontends.extproc.wire import BODY_CHUNK_BYTES, body_chunks, header_map

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def chat(model: str = "llama-3.1-8b", *, stream: bool = False, **extra: object) -> bytes:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 4,
        "stream": stream,
        **extra,
    }
    return orjson.dumps(body)


def expected_headers_response(destination: str, length: int) -> pb.ProcessingResponse:
    """What the protocol prescribes once the body is complete (built by hand here)."""
    expected = pb.ProcessingResponse()
    common = expected.request_headers.response
    common.clear_route_cache = True
    for key, value in (
        ("content-length", str(length)),
        ("x-gateway-destination-endpoint", destination),
    ):
        option = common.header_mutation.set_headers.add()
        option.header.key = key
        option.header.raw_value = value.encode()
    # llm-d's P/D headers (frontends/pd_sidecar.py): a client's never reach a pod
    common.header_mutation.remove_headers.extend(["x-prefiller-host-port", "x-prefiller-url"])
    lb = expected.dynamic_metadata.fields["envoy.lb"].struct_value
    lb.fields["x-gateway-destination-endpoint"].string_value = destination
    return expected


async def test_chat_non_streaming_exact_messages(
    make_picker: PickerFactory, fleet: EmulatedFleet
) -> None:
    picker = await make_picker()
    body = chat()
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        out = await envoy.exchange(CHAT, body)
    hostports = {f"{e.host}:{e.port}" for e in fleet.endpoints}
    assert out.destination in hostports
    assert out.metadata_destination == out.destination
    headers_answer, body_answer = out.messages[0], out.messages[1]
    assert headers_answer == expected_headers_response(out.destination, len(body))
    expected_body = pb.ProcessingResponse()
    streamed = expected_body.request_body.response.body_mutation.streamed_response
    streamed.body, streamed.end_of_stream = body, True
    assert body_answer == expected_body
    assert out.upstream_body == body
    assert out.status == 200
    reply = orjson.loads(out.response_body)
    assert reply["model"] == "llama-3.1-8b"
    assert reply["usage"]["completion_tokens"] == 4
    # the response half: a plain headers answer, the body passed through unchanged
    response_headers = next(m for m in out.messages if m.HasField("response_headers"))
    assert response_headers == pb.ProcessingResponse(
        response_headers=pb.HeadersResponse(response=pb.CommonResponse())
    )
    metrics = picker.director.metrics
    output = metrics.output_tokens.labels("llama-3.1-8b", "llama-3.1-8b")
    assert output._sum.get() == 4  # type: ignore[attr-defined]
    assert all(e.inflight == 0 for e in picker.store.endpoints)


async def test_completions_streaming_passes_sse_through(make_picker: PickerFactory) -> None:
    picker = await make_picker()
    body = orjson.dumps(
        {
            "model": "llama-3.1-8b",
            "prompt": "once upon a time",
            "max_tokens": 5,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        out = await envoy.exchange(COMPLETIONS, body)
    assert out.response_headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in out.response_body.split(b"\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert {c["model"] for c in chunks} == {"llama-3.1-8b"}
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    output = picker.director.metrics.output_tokens.labels("llama-3.1-8b", "llama-3.1-8b")
    assert output._sum.get() == 5  # type: ignore[attr-defined]


async def test_body_split_across_many_chunks_is_reassembled(make_picker: PickerFactory) -> None:
    picker = await make_picker()
    # ~150 KB, mostly in a field the pod ignores (a long prompt would only slow the
    # emulated prefill): three mutation chunks.
    body = chat(metadata={"blob": "routing " * 19_000})
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        out = await envoy.exchange(CHAT, body, chunk_size=1000)
    body_messages = [m for m in out.messages if m.HasField("request_body")]
    sizes = [
        len(m.request_body.response.body_mutation.streamed_response.body) for m in body_messages
    ]
    assert sizes == [BODY_CHUNK_BYTES, BODY_CHUNK_BYTES, len(body) - 2 * BODY_CHUNK_BYTES]
    flags = [
        m.request_body.response.body_mutation.streamed_response.end_of_stream for m in body_messages
    ]
    assert flags == [False, False, True]
    assert out.upstream_body == body
    assert out.status == 200


async def test_canary_rewrite_of_body_and_back_in_responses(make_picker: PickerFactory) -> None:
    rewrites = parse_rewrites(
        [
            {
                "kind": "InferenceModelRewrite",
                "metadata": {"name": "canary"},
                "spec": {
                    "rules": [
                        {
                            "matches": [{"model": {"type": "Exact", "value": "assistant"}}],
                            "targets": [{"modelRewrite": "sql", "weight": 1}],
                        }
                    ]
                },
            }
        ],
        known_models=None,
    )
    picker = await make_picker(rewrites=rewrites)
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        out = await envoy.exchange(CHAT, chat("assistant"))
        streamed = await envoy.exchange(CHAT, chat("assistant", stream=True))
    sent = orjson.loads(out.upstream_body)
    assert sent["model"] == "sql"
    assert out.request_headers["content-length"] == str(len(out.upstream_body))
    lora_pod = next(e for e in picker.store.endpoints if e.name.startswith("lora"))
    assert out.destination == lora_pod.hostport
    assert orjson.loads(out.response_body)["model"] == "assistant"
    response_headers = next(m for m in out.messages if m.HasField("response_headers"))
    assert list(response_headers.response_headers.response.header_mutation.remove_headers) == [
        "content-length"
    ]
    events = [
        orjson.loads(line[6:])
        for line in streamed.response_body.split(b"\n")
        if line.startswith(b"data: {")
    ]
    assert events and {e["model"] for e in events} == {"assistant"}
    assert picker.director.metrics.requests.labels("assistant", "sql")._value.get() == 2  # type: ignore[attr-defined]


async def test_subset_hint_restricts_the_choice(
    make_picker: PickerFactory, fleet: EmulatedFleet
) -> None:
    """The hint is matched by IP, as upstream's subset filter does (its port is not
    compared): every emulated pod listens on 127.0.0.1, so a hint naming that IP with
    any port routes, and one naming another IP gets 503. Restriction among pods with
    distinct IPs is pinned in test_extproc_upstream_parity.py."""
    picker = await make_picker(options=None)
    hostports = {f"{e.host}:{e.port}" for e in fleet.endpoints}
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        for _ in range(4):
            out = await envoy.exchange(CHAT, chat(), subset=["127.0.0.1:1"])
            assert out.destination in hostports and out.status == 200
        none = await envoy.exchange(CHAT, chat(), subset=["10.9.9.9:8000"])
    assert none.immediate is not None
    assert none.immediate.status.code == 503
    assert orjson.loads(none.immediate.body)["error"]["code"] == "no_ready_endpoint"


async def test_fallbacks_join_the_destination(make_picker: PickerFactory) -> None:
    from inference_gateway.frontends.extproc.picker import PickerOptions

    picker = await make_picker(options=PickerOptions(fallbacks=2))
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        stream = envoy.open()
        out = await envoy.send_request(stream, CHAT, chat())
        stream.cancel()
    parts = out.destination.split(",")
    assert len(parts) == 3 and len(set(parts)) == 3
    assert out.metadata_destination == out.destination


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b'{"prompt": "x"}', 400, "missing_model"),
        (b'{"model": "nope", "prompt": "x"}', 404, "model_not_found"),
    ],
)
async def test_bad_requests_get_immediate_responses(
    make_picker: PickerFactory, body: bytes, status: int, code: str
) -> None:
    picker = await make_picker()
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        out = await envoy.exchange(CHAT, body)
    assert out.immediate is not None
    assert out.immediate.status.code == status
    error = orjson.loads(out.immediate.body)["error"]
    assert error["code"] == code and error["message"]
    assert [(h.header.key, h.header.raw_value) for h in out.immediate.headers.set_headers] == [
        ("content-type", b"application/json")
    ]
    assert len(out.messages) == 1


async def test_rate_limit_answers_429_with_retry_after(make_picker: PickerFactory) -> None:
    picker = await make_picker({"rateLimits": [{"requestsPerMinute": 1}]})
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        first = await envoy.exchange(CHAT, chat())
        second = await envoy.exchange(CHAT, chat())
    assert first.status == 200
    assert second.immediate is not None and second.immediate.status.code == 429
    headers = {
        h.header.key: h.header.raw_value.decode() for h in second.immediate.headers.set_headers
    }
    assert int(headers["retry-after"]) >= 1
    assert orjson.loads(second.immediate.body)["error"]["code"] == "rate_limited"


async def test_no_ready_pod_holds_then_answers_503_with_retry_after(
    make_picker: PickerFactory,
) -> None:
    """Held for the band's TTL (scale from zero), then 503 `no_ready_endpoint` with
    Retry-After; readiness stays SERVING (it never depends on the pod count)."""
    from inference_gateway.core.scheduling.types import Endpoint

    dead = [Endpoint("dead", "127.0.0.1", 9, pool="p", models=frozenset({"llama-3.1-8b"}))]
    short = {"flowControl": {"bands": {"standard": {"maxQueue": 4, "ttlS": 0.3}}}}
    picker = await make_picker(short, endpoints=dead)
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        out = await envoy.exchange(CHAT, chat())
    assert out.immediate is not None and out.immediate.status.code == 503
    assert orjson.loads(out.immediate.body)["error"]["code"] == "no_ready_endpoint"
    mutation = out.immediate.headers.set_headers
    headers = {h.header.key: h.header.raw_value.decode() for h in mutation}
    assert int(headers["retry-after"]) >= 1
    assert picker.serving


async def test_buffered_mode_answers_in_the_body_response(make_picker: PickerFactory) -> None:
    picker = await make_picker()
    body = chat()
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        out = await envoy.exchange(CHAT, body, mode=BUFFERED)
    assert out.messages[0] == pb.ProcessingResponse(
        request_headers=pb.HeadersResponse(response=pb.CommonResponse())
    )
    assert out.messages[1].HasField("override_message_timeout")  # before admission
    answer = out.messages[2].request_body.response
    assert answer.clear_route_cache
    assert not answer.HasField("body_mutation")  # nothing rewritten: Envoy keeps its bytes
    assert out.destination and out.metadata_destination == out.destination
    assert out.status == 200 and orjson.loads(out.response_body)["model"] == "llama-3.1-8b"


async def test_client_hang_up_mid_exchange_finishes_once(make_picker: PickerFactory) -> None:
    picker = await make_picker()
    calls: list[str] = []
    scheduler = picker.director.scheduler
    original = scheduler.on_finished

    def spy(request, endpoint, now):  # type: ignore[no-untyped-def]
        calls.append(endpoint.name)
        original(request, endpoint, now)

    scheduler.on_finished = spy  # type: ignore[method-assign]
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        stream = envoy.open()
        out = await envoy.send_request(stream, CHAT, chat(stream=True))
        chosen = next(e for e in picker.store.endpoints if e.hostport == out.destination)
        assert chosen.inflight == 1
        await stream.send(
            pb.ProcessingRequest(
                response_headers=pb.HttpHeaders(
                    headers=header_map({":status": "200", "content-type": "text/event-stream"})
                )
            )
        )
        await stream.send(pb.ProcessingRequest(response_body=pb.HttpBody(body=b"data: {}\n\n")))
        await stream.wait_for(lambda m: m.HasField("response_body"))
        stream.cancel()  # the client went away: Envoy resets the ext_proc stream
        for _ in range(100):
            if calls:
                break
            import asyncio

            await asyncio.sleep(0.01)
    assert calls == [chosen.name]
    assert chosen.inflight == 0
    assert picker.servicer.active == 0


def test_body_chunks_of_an_empty_body_still_end_the_stream() -> None:
    messages = list(body_chunks(b""))
    assert len(messages) == 1
    assert messages[0].request_body.response.body_mutation.streamed_response.end_of_stream


async def test_bodiless_request_goes_to_a_ready_pod(
    make_picker: PickerFactory, fleet: EmulatedFleet
) -> None:
    from fake_envoy import request_headers_message

    picker = await make_picker()
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        stream = envoy.open()
        await stream.send(request_headers_message("/v1/models", end_of_stream=True))
        await stream.wait_for(lambda m: m.HasField("request_headers"))
        stream.cancel()
    answer = stream.received[0]
    common = answer.request_headers.response
    assert common.clear_route_cache
    [header] = common.header_mutation.set_headers
    assert header.header.key == "x-gateway-destination-endpoint"
    assert header.header.raw_value.decode() in {f"{e.host}:{e.port}" for e in fleet.endpoints}


async def test_oversized_body_is_413(make_picker: PickerFactory) -> None:
    from inference_gateway.frontends.extproc.picker import PickerOptions

    picker = await make_picker(options=PickerOptions(max_body_bytes=1000))
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        out = await envoy.exchange(CHAT, chat(metadata={"blob": "x" * 2000}), chunk_size=500)
    assert out.immediate is not None and out.immediate.status.code == 413
    assert orjson.loads(out.immediate.body)["error"]["code"] == "request_too_large"
