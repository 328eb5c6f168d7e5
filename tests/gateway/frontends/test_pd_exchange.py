"""The prefill exchange (frontends/pd_exchange.py) against prefill pods that misbehave.

Real aiohttp servers on loopback stand in for a prefill pod that answers an error, one
that answers without `kv_transfer_params` (vLLM's answer for a pod without a KV
connector, or a prompt that finished before its cap), one that accepts the leg and never
answers, and a healthy one that records the leg it got. Every failure must leave the
client's body (without its own `kv_transfer_params`) for an aggregated decode, within
the leg's timeout. The healthy leg's body is vLLM's toy proxy's (vllm
`tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web

from inference_gateway.frontends.pd_exchange import PrefillExchange

# what vLLM's NixlConnector answers (its side channel on vLLM's default port, 5600)
PARAMS = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_block_ids": [3],
    "remote_engine_id": "engine-p",
    "remote_request_id": "cmpl-1",
    "remote_host": "127.0.0.1",
    "remote_port": 5600,
    "tp_size": 1,
}
CLIENT = {
    "model": "m",
    "prompt": "hello",
    "max_tokens": 9,
    "stream": True,
    "kv_transfer_params": {"do_remote_prefill": True, "remote_host": "169.254.169.254"},
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def prefill_pod() -> AsyncIterator[Callable[[Handler], Awaitable[int]]]:
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> int:
        app = web.Application()
        app.router.add_post("/v1/completions", handler)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_a_healthy_leg_sends_the_toy_proxy_body_and_returns_the_decode_body(
    prefill_pod: Callable[[Handler], Awaitable[int]],
) -> None:
    seen: list[dict[str, Any]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(orjson.loads(await request.read()))
        return web.json_response({"id": "p", "kv_transfer_params": PARAMS})

    port = await prefill_pod(answer)
    exchange = PrefillExchange(timeout_s=5)
    try:
        leg = await exchange.run("127.0.0.1", port, "/v1/completions", orjson.dumps(CLIENT), {})
    finally:
        await exchange.close()
    assert leg.ok and exchange.counts == {"ok": 1}
    client = {k: v for k, v in CLIENT.items() if k != "kv_transfer_params"}
    assert seen == [
        {
            **client,
            "stream": False,
            "max_tokens": 1,
            "kv_transfer_params": {
                "do_remote_decode": True,
                "do_remote_prefill": False,
                "remote_engine_id": None,
                "remote_block_ids": None,
                "remote_host": None,
                "remote_port": None,
            },
        }
    ]
    assert orjson.loads(leg.body) == {**client, "kv_transfer_params": PARAMS}


async def _error(request: web.Request) -> web.Response:
    return web.json_response({"error": {"message": "busy"}}, status=503)


async def _no_params(request: web.Request) -> web.Response:
    return web.json_response({"id": "p", "choices": [{"text": "x"}]})


async def _silent(request: web.Request) -> web.Response:
    await asyncio.sleep(30)
    return web.json_response({})


@pytest.mark.parametrize(
    ("handler", "outcome"),
    [(_error, "http_503"), (_no_params, "no_params"), (_silent, "timeout")],
)
async def test_a_failed_leg_leaves_the_clients_body_for_an_aggregated_decode(
    prefill_pod: Callable[[Handler], Awaitable[int]], handler: Handler, outcome: str
) -> None:
    port = await prefill_pod(handler)
    seen: list[str] = []
    exchange = PrefillExchange(timeout_s=0.5, on_outcome=seen.append)
    started = time.monotonic()
    try:
        leg = await exchange.run("127.0.0.1", port, "/v1/completions", orjson.dumps(CLIENT), {})
    finally:
        await exchange.close()
    assert time.monotonic() - started < 2  # bounded by the leg's timeout
    assert not leg.ok and leg.outcome == outcome and seen == [outcome]
    assert orjson.loads(leg.body) == {k: v for k, v in CLIENT.items() if k != "kv_transfer_params"}


async def test_a_body_that_is_no_json_object_goes_on_unchanged() -> None:
    exchange = PrefillExchange(timeout_s=0.5)
    try:
        leg = await exchange.run("127.0.0.1", 9, "/v1/completions", b"[1, 2]", {})
    finally:
        await exchange.close()
    assert leg.outcome == "malformed_body" and leg.body == b"[1, 2]"  # the pod answers 400


@pytest.mark.parametrize(
    ("changes", "ports", "ok"),
    [
        ({}, (5600,), True),  # vLLM's answer, its side channel on the default port
        ({"remote_port": 8000}, (), True),  # the pod's own serving port (the emulator's)
        ({"remote_port": 5603}, range(5600, 5608), True),  # data-parallel rank 3
        ({"remote_port": 5603}, (5600,), False),
        ({"remote_block_ids": [[0, 1], [7]]}, (5600,), True),  # one list per KV-cache group
        ({"remote_block_ids": [[0, 1], 7]}, (5600,), False),
        ({"remote_request_id": None}, (5600,), True),  # older NixlConnector versions
        ({"dcp_size": 1, "remote_num_tokens": 48}, (5600,), True),  # newer scalar fields
        ({"remote_host": "::ffff:127.0.0.1"}, (5600,), False),
        ({"remote_block_ids": [2**31]}, (5600,), False),
        ({"do_remote_decode": True}, (5600,), False),
        ({"remote_engine_id": "a\nb"}, (5600,), False),
    ],
)
def test_a_prefill_pods_params_are_checked_before_a_decode_pod_gets_them(
    changes: dict[str, Any], ports: Any, ok: bool
) -> None:
    """pd_body.checked_params on vLLM NixlConnector shapes (`request_finished`)."""
    from inference_gateway.core.request.pd_body import BadParams, checked_params

    params = {**PARAMS, **changes}
    if ok:
        assert checked_params(params, "127.0.0.1", 8000, ports) is params
    else:
        with pytest.raises(BadParams):
            checked_params(params, "127.0.0.1", 8000, ports)
