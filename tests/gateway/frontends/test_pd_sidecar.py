"""`igw pd-sidecar` in process, on loopback, in front of emulated NixlConnector pods.

Upstream convention: llm-d/llm-d-routing-sidecar (`internal/proxy/proxy.go` names the
header `x-prefiller-host-port`; `chat_completions.go` answers 403 for a target outside
its SSRF allowlist, and serves the request on the decoder alone without the header;
`connector_nixlv2.go` runs the two legs). The legs' bodies are vLLM's toy proxy's
(vllm `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`). The pods are
emulated (`--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'`,
emulator/kvtransfer.py), since no GPU runs here; everything else is real: aiohttp
servers, sockets, the sidecar's own client.

SSRF: a listener on 127.0.0.2 (loopback, outside the allowlist 127.0.0.1/32) counts
every connection it gets; the tests assert it never gets one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from inference_gateway.emulator.kvtransfer import parse_kv_transfer_config
from inference_gateway.emulator.profiles import pod_profile
from inference_gateway.emulator.server import EmulatedPod
from inference_gateway.frontends.pd_sidecar import (
    PREFILL_HEADER,
    PrefillAllowlist,
    PrefillRefused,
    Sidecar,
)

NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
LONG_PROMPT = "tok " * 4000  # 4,000 emulator tokens
LOOPBACK = PrefillAllowlist.parse(["127.0.0.1/32"])


async def _serve(app: web.Application, host: str = "127.0.0.1") -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def _sidecar(decoder: str, **options: Any) -> tuple[Sidecar, web.AppRunner, str]:
    sidecar = Sidecar(decoder, options.pop("allowlist", LOOPBACK), **options)
    runner, port = await _serve(sidecar.app())
    return sidecar, runner, f"http://127.0.0.1:{port}"


def _pod(name: str) -> EmulatedPod:
    config = parse_kv_transfer_config(NIXL, name)
    return EmulatedPod(name, pod_profile("H100", "llama-3.1-8b"), port=0, kv_transfer=config)


@pytest.fixture
async def pods() -> AsyncIterator[tuple[EmulatedPod, EmulatedPod]]:
    prefill, decode = _pod("prefill"), _pod("decode")
    for pod in (prefill, decode):
        await pod.start()
    yield prefill, decode
    for pod in (prefill, decode):
        await pod.stop()


class Recorder:
    """A decoder stand-in that records what reached it (headers, body) and answers a
    completion; and a raw listener that counts connections (the SSRF witness)."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.connections = 0

    def app(self) -> web.Application:
        async def completions(request: web.Request) -> web.Response:
            self.requests.append((dict(request.headers), orjson.loads(await request.read())))
            return web.json_response({"id": "x", "choices": [{"text": "ok"}]})

        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        return app

    async def witness(self, host: str) -> tuple[asyncio.Server, int]:
        def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            writer.close()

        server = await asyncio.start_server(connected, host, 0)
        return server, server.sockets[0].getsockname()[1]


async def _completion(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], **body: Any
) -> tuple[int, list[dict[str, Any]]]:
    """Status and the streamed chunks (or the one JSON answer) of a completion."""
    payload = {"model": "llama-3.1-8b", "prompt": LONG_PROMPT, "max_tokens": 6, **body}
    async with session.post(url + "/v1/completions", json=payload, headers=headers) as r:
        if r.content_type != "text/event-stream":
            return r.status, [await r.json()]
        events = [orjson.loads(line[6:]) async for line in r.content if line.startswith(b"data: {")]
        return r.status, events


async def test_a_prefill_header_runs_the_prefill_leg_then_the_decode_leg(
    pods: tuple[EmulatedPod, EmulatedPod],
) -> None:
    prefill, decode = pods
    sidecar, runner, url = await _sidecar(decode.url)
    try:
        async with aiohttp.ClientSession() as session:
            target = {PREFILL_HEADER: f"{prefill.host}:{prefill.port}"}
            status, events = await _completion(session, url, target, stream=True)
            assert status == 200 and len(events) == 6  # six tokens streamed
            # no header: the decoder alone, as llm-d's "skip disaggregated prefill"
            status, events = await _completion(session, url, {}, stream=True)
            assert status == 200 and len(events) == 6
            # the pod's own paths pass through (the picker scrapes /metrics here)
            async with session.get(url + "/metrics") as r:
                assert r.status == 200 and "vllm:num_requests_running" in await r.text()
            async with session.get(url + "/readyz") as r:
                assert r.status == 200
    finally:
        await runner.cleanup()
    assert prefill.pod_app is not None and decode.pod_app is not None
    assert prefill.pod_app.disagg is not None and decode.pod_app.disagg is not None
    assert prefill.pod_app.disagg.reads_served == 1  # the decode pod read the blocks once
    assert decode.pod_app.disagg.pulls == 1 and decode.pod_app.disagg.pull_failures == 0
    assert sidecar.exchange is not None and sidecar.exchange.counts == {"ok": 1}


async def test_a_failed_prefill_leg_is_served_aggregated(
    pods: tuple[EmulatedPod, EmulatedPod],
) -> None:
    """Allowed but dead (a closed port on 127.0.0.1): the decoder prefills itself."""
    _, decode = pods
    closed = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    dead_port = closed.sockets[0].getsockname()[1]
    closed.close()
    await closed.wait_closed()
    sidecar, runner, url = await _sidecar(decode.url)
    try:
        async with aiohttp.ClientSession() as session:
            status, events = await _completion(
                session, url, {PREFILL_HEADER: f"127.0.0.1:{dead_port}"}, stream=True
            )
        assert status == 200 and len(events) == 6
        assert sidecar.exchange is not None
        assert sidecar.exchange.counts == {"connect_error": 1}
    finally:
        await runner.cleanup()
    assert decode.pod_app is not None and decode.pod_app.disagg is not None
    assert decode.pod_app.disagg.pulls == 0


@pytest.mark.parametrize(
    "value",
    [
        "127.0.0.2:{port}",  # an address outside the allowlist
        "localhost:{port}",  # a name: never resolved
        "127.0.0.2.nip.io:{port}",
        "127.0.0.1:0",  # bad ports
        "127.0.0.1:65536",
        "127.0.0.1:+80",
        "127.0.0.1:٨٠",  # Unicode digits
        "127.0.0.1",  # no port
        "127.000.000.001:{port}",  # not a canonical address
        "http://127.0.0.2:{port}",
        "[::ffff:127.0.0.2]:{port}",  # IPv6 (mapped) outside every v6 network given
        "127.0.0.2:{port},127.0.0.1:1",  # the first value is the one (llm-d)
    ],
)
async def test_a_target_outside_the_allowlist_is_refused_and_never_dialled(value: str) -> None:
    recorder = Recorder()
    decoder, decoder_port = await _serve(recorder.app())
    witness, witness_port = await recorder.witness("127.0.0.2")
    sidecar, runner, url = await _sidecar(f"http://127.0.0.1:{decoder_port}")
    try:
        async with aiohttp.ClientSession() as session:
            header = {PREFILL_HEADER: value.format(port=witness_port)}
            status, answers = await _completion(session, url, header)
        assert status == 403
        assert answers[0]["error"]["code"] == "prefill_target_forbidden"
        assert set(answers[0]["error"]) == {"message", "type", "param", "code"}
        await asyncio.sleep(0.05)
        assert recorder.connections == 0  # never dialled
        assert recorder.requests == []  # nor served: refused as llm-d refuses
        assert sidecar.refused == 1
    finally:
        await runner.cleanup()
        await decoder.cleanup()
        witness.close()


def test_the_allowlist_parses_strictly() -> None:
    allow = PrefillAllowlist.parse(["10.0.0.0/8", "fd00::/8"])
    assert allow.target("10.1.2.3:8000") == ("10.1.2.3", 8000)
    assert allow.target(" [fd00::7]:8000 ") == ("fd00::7", 8000)
    for bad in ("11.0.0.1:8000", "[fe80::1]:8000", "10.1.2.3:8000x", ":8000", ""):
        with pytest.raises(PrefillRefused):
            allow.target(bad)
    with pytest.raises(ValueError):
        PrefillAllowlist.parse(["10.0.0.1/8"])  # host bits set: a typo, not a network
    assert PrefillAllowlist.parse([]).networks == ()


async def test_the_decoder_never_sees_the_p_d_headers_or_a_clients_params() -> None:
    recorder = Recorder()
    decoder, decoder_port = await _serve(recorder.app())
    _, runner, url = await _sidecar(f"http://127.0.0.1:{decoder_port}")
    hostile = {"do_remote_prefill": True, "remote_host": "169.254.169.254", "remote_port": 80}
    try:
        async with aiohttp.ClientSession() as session:
            status, _ = await _completion(
                session,
                url,
                {"x-prefiller-url": "http://169.254.169.254", "x-request-id": "abc"},
                kv_transfer_params=hostile,
            )
        assert status == 200
        ((headers, body),) = recorder.requests
        lower = {k.lower(): v for k, v in headers.items()}
        assert "x-prefiller-url" not in lower and PREFILL_HEADER not in lower
        assert lower["x-request-id"] == "abc"  # the rest goes through
        assert "kv_transfer_params" not in body and body["prompt"] == LONG_PROMPT
    finally:
        await runner.cleanup()
        await decoder.cleanup()
