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
from collections.abc import AsyncIterator, Callable
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


def _answer(params: Callable[[int], dict[str, Any]]) -> web.Application:
    """A prefill pod (inside the allowlist) whose leg answers `params(its own port)`."""

    async def complete(request: web.Request) -> web.Response:
        await request.read()
        assert request.transport is not None
        port = request.transport.get_extra_info("sockname")[1]
        answer = {"id": "cmpl-p", "choices": [], "kv_transfer_params": params(port)}
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    return app


def _nixl(pod_port: int, **changes: Any) -> dict[str, Any]:
    """vLLM NixlConnector's answer for a pod on 127.0.0.1:`pod_port`, then `changes`."""
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": [0, 1, 2],
        "remote_engine_id": "engine-p",
        "remote_request_id": "cmpl-p",
        "remote_host": "127.0.0.1",
        "remote_port": pod_port,
        "tp_size": 1,
        **changes,
    }


async def _through_sidecar(decoder: str, prefill: web.Application) -> tuple[Sidecar, int, int]:
    """One streamed completion through a sidecar, prefilled on `prefill`: the sidecar,
    the status and the number of events."""
    runner, prefill_port = await _serve(prefill)
    sidecar, sidecar_runner, url = await _sidecar(decoder)
    try:
        async with aiohttp.ClientSession() as session:
            header = {PREFILL_HEADER: f"127.0.0.1:{prefill_port}"}
            status, events = await _completion(session, url, header, stream=True)
    finally:
        await sidecar_runner.cleanup()
        await runner.cleanup()
    return sidecar, status, len(events)


# (pod's port, a loopback witness's port, a 127.0.0.2 witness's port) → the answer's changes
Steer = Callable[[int, int, int], dict[str, Any]]


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param(lambda pod, near, far: {"remote_port": near}, id="another-port"),
        pytest.param(
            lambda pod, near, far: {"remote_host": "127.0.0.2", "remote_port": far},
            id="another-host",
        ),
        pytest.param(
            lambda pod, near, far: {"remote_host": "localhost", "remote_port": near},
            id="a-name",
        ),
        pytest.param(
            lambda pod, near, far: {"remote_block_ids": list(range(400_000))}, id="400k-ids"
        ),
        pytest.param(lambda pod, near, far: {"remote_port": str(pod)}, id="port-string"),
        pytest.param(lambda pod, near, far: {"remote_block_ids": [0, -1]}, id="negative-id"),
        pytest.param(
            lambda pod, near, far: {"extra": {"remote_host": "127.0.0.2"}}, id="nested-value"
        ),
        pytest.param(lambda pod, near, far: {"remote_engine_id": "e" * 10_000}, id="10kb-id"),
    ],
)
async def test_a_prefill_pod_cannot_steer_the_decoder(
    pods: tuple[EmulatedPod, EmulatedPod], changes: Steer
) -> None:
    """The prefill pod's answer reaches the decoder only when it names that pod and holds
    sane values (pd_body.checked_params); otherwise the request is served aggregated.
    Witnesses on 127.0.0.1 (another service on the decode pod's loopback) and 127.0.0.2
    count every connection the decoder would make where a hostile answer points it
    (before: the decoder dialled them, past `--allow-prefill`; 400,000 ids or a string
    port made the client's answer the decoder's 400)."""
    _, decode = pods
    recorder = Recorder()
    near, near_port = await recorder.witness("127.0.0.1")
    far, far_port = await recorder.witness("127.0.0.2")
    hostile = _answer(lambda pod: _nixl(pod, **changes(pod, near_port, far_port)))
    try:
        sidecar, status, events = await _through_sidecar(decode.url, hostile)
    finally:
        near.close()
        far.close()
    assert status == 200 and events == 6
    await asyncio.sleep(0.05)
    assert recorder.connections == 0  # the decoder dialled nothing it was pointed at
    assert decode.pod_app is not None and decode.pod_app.disagg is not None
    assert decode.pod_app.disagg.pulls == 0  # served aggregated: it prefilled itself
    assert sidecar.exchange is not None and sidecar.exchange.counts == {"bad_params": 1}


async def test_a_decoder_that_refuses_the_params_serves_the_request_aggregated(
    pods: tuple[EmulatedPod, EmulatedPod],
) -> None:
    """70,000 block ids pass the sidecar's cap (a long prompt) but not the emulated
    decoder's (65,536), as a decoder of another version might refuse a field: its 400
    is not the client's answer; the request goes again without the params."""
    _, decode = pods
    prefill = _answer(lambda pod: _nixl(pod, remote_block_ids=list(range(70_000))))
    sidecar, status, events = await _through_sidecar(decode.url, prefill)
    assert status == 200 and events == 6
    assert sidecar.params_refused == 1
    assert sidecar.exchange is not None and sidecar.exchange.counts == {"ok": 1}


async def test_a_decoder_that_is_down_gets_no_prefill_leg(
    pods: tuple[EmulatedPod, EmulatedPod],
) -> None:
    """A prefill pod keeps a finished leg's blocks until a decoder reads them (vLLM frees
    them otherwise only after VLLM_NIXL_ABORT_REQUEST_TIMEOUT, 480 s): with the decoder
    down, the sidecar runs no leg, so nothing is pinned (before: one prompt's blocks
    pinned per request, the client answered 502 all the same)."""
    prefill, _ = pods
    closed = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    dead_port = closed.sockets[0].getsockname()[1]
    closed.close()
    await closed.wait_closed()
    sidecar, runner, url = await _sidecar(f"http://127.0.0.1:{dead_port}")
    try:
        async with aiohttp.ClientSession() as session:
            target = {PREFILL_HEADER: f"{prefill.host}:{prefill.port}"}
            status, answers = await _completion(session, url, target, stream=True)
        assert status == 502 and answers[0]["error"]["code"] == "decoder_down"
        assert sidecar.decoder_down == 1
    finally:
        await runner.cleanup()
    assert prefill.pod_app is not None and prefill.pod_app.disagg is not None
    assert prefill.pod_app.disagg.sends.pinned == {}  # no blocks kept for a decoder
