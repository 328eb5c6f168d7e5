"""Disaggregated prefill/decode on emulated pods, driven exactly as vLLM's own proxy
drives NixlConnector pods (`tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`,
vllm-project/vllm): the prefill leg is the client's body with `kv_transfer_params`
`{do_remote_decode: true, do_remote_prefill: false, remote_*: null}`, `stream: false`,
`max_tokens: 1` (and `max_completion_tokens: 1` when present), no `stream_options`, an
`X-Request-Id`; the decode leg is the client's body with the prefill answer's
`kv_transfer_params`, streamed back. The params' shape is NixlConnector's
`request_finished` (`vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from inference_gateway.emulator.kvtransfer import (
    KVTransferConfig,
    link_gbytes_per_s,
    parse_kv_transfer_config,
    transfer_seconds,
)
from inference_gateway.emulator.profiles import instance_profiles, pod_profile
from inference_gateway.emulator.server import EmulatedPod
from inference_gateway.errors import ConfigError

NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
PROMPT_6K = "tok " * 6000  # 6,000 tokens at the emulator's 4 bytes per token


def _pod(name: str, **extra: Any) -> EmulatedPod:
    config = parse_kv_transfer_config({**NIXL, "kv_connector_extra_config": extra}, name)
    return EmulatedPod(name, pod_profile("H100", "llama-3.1-8b"), port=0, kv_transfer=config)


@pytest.fixture
async def pods() -> AsyncIterator[tuple[EmulatedPod, EmulatedPod, EmulatedPod]]:
    """A prefill pod, a decode pod (other nodes, EFA between them) and an aggregated pod
    with no connector, all H100 / 8B."""
    prefill, decode = _pod("prefill", node="node-a"), _pod("decode", node="node-b")
    aggregated = EmulatedPod("aggregated", pod_profile("H100", "llama-3.1-8b"), port=0)
    for pod in (prefill, decode, aggregated):
        await pod.start()
    yield prefill, decode, aggregated
    for pod in (prefill, decode, aggregated):
        await pod.stop()


def _prefill_leg(body: dict[str, Any]) -> dict[str, Any]:
    leg = dict(body)
    leg["kv_transfer_params"] = {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }
    leg["stream"] = False
    leg["max_tokens"] = 1
    if "max_completion_tokens" in leg:
        leg["max_completion_tokens"] = 1
    leg.pop("stream_options", None)
    return leg


async def _ttft(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> float:
    """Seconds to the first content chunk of a streamed completion (the stream is read
    to its `[DONE]`)."""
    start, first = time.monotonic(), None
    async with session.post(url + "/v1/completions", json=body) as response:
        assert response.status == 200, await response.text()
        async for line in response.content:
            if line.startswith(b"data: {") and first is None:
                first = time.monotonic() - start
            if line.strip() == b"data: [DONE]":
                break
    assert first is not None
    return first


async def test_the_proxy_two_step_exchange(pods: tuple[EmulatedPod, ...]) -> None:
    prefill, decode, _ = pods
    body = {"model": "llama-3.1-8b", "prompt": "hello " * 300, "max_tokens": 8, "stream": True}
    headers = {"X-Request-Id": str(uuid.uuid4())}
    async with aiohttp.ClientSession() as session:
        async with session.post(
            prefill.url + "/v1/completions", json=_prefill_leg(body), headers=headers
        ) as response:
            assert response.status == 200
            answer = await response.json()
        params = answer["kv_transfer_params"]
        assert answer["usage"]["completion_tokens"] == 1
        assert set(params) == {
            "do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id",
            "remote_request_id", "remote_host", "remote_port", "tp_size",
        }  # fmt: skip
        assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
        assert len(params["remote_block_ids"]) == 1800 // 64  # full 16-token blocks (4 B/token)
        assert (params["remote_host"], params["remote_port"]) == (prefill.host, prefill.port)
        assert prefill.pod_app is not None and decode.pod_app is not None
        kept = prefill.pod_app.driver.engine.pool.used
        assert kept == len(params["remote_block_ids"])  # pinned after the request finished
        decode_leg = {**body, "kv_transfer_params": params}
        chunks = []
        async with session.post(
            decode.url + "/v1/completions", json=decode_leg, headers=headers
        ) as response:
            assert response.status == 200
            async for line in response.content:
                chunks.append(line)
        assert chunks[-2].strip() == b"data: [DONE]" or b"[DONE]" in b"".join(chunks)
        texts = [orjson.loads(c[6:]) for c in chunks if c.startswith(b"data: {")]
        assert len(texts) == 8
    assert prefill.pod_app.disagg is not None and decode.pod_app.disagg is not None
    assert prefill.pod_app.disagg.reads_served == 1
    assert prefill.pod_app.driver.engine.pool.used == 0  # read, so freed
    assert decode.pod_app.disagg.pull_failures == 0
    assert decode.pod_app.driver.engine.pool.used == 0  # the decode leg ended: all released


async def test_a_decode_pod_answers_a_long_prompt_in_half_an_aggregated_pods_ttft(
    pods: tuple[EmulatedPod, ...],
) -> None:
    """6,000 prompt tokens: the aggregated pod prefills them all; the decode pod reads
    their KV over EFA (p5, 100 Gbps) and computes one token."""
    prefill, decode, aggregated = pods
    body = {"model": "llama-3.1-8b", "prompt": PROMPT_6K, "max_tokens": 4, "stream": True}
    async with aiohttp.ClientSession() as session:
        aggregated_ttft = await _ttft(session, aggregated.url, body)
        async with session.post(prefill.url + "/v1/completions", json=_prefill_leg(body)) as r:
            params = (await r.json())["kv_transfer_params"]
        decode_ttft = await _ttft(session, decode.url, {**body, "kv_transfer_params": params})
    print(f"TTFT aggregated {aggregated_ttft:.3f} s, decode leg {decode_ttft:.3f} s")
    assert decode_ttft <= 0.5 * aggregated_ttft, (decode_ttft, aggregated_ttft)


async def test_blocks_nobody_reads_are_freed_and_the_decode_pod_prefills_itself() -> None:
    prefill = _pod("prefill", abort_timeout_s=0.2)
    decode = _pod("decode")
    await prefill.start()
    await decode.start()
    try:
        body = {"model": "llama-3.1-8b", "prompt": "abc " * 400, "max_tokens": 3}
        async with aiohttp.ClientSession() as session:
            async with session.post(
                prefill.url + "/v1/completions", json=_prefill_leg(body)
            ) as response:
                params = (await response.json())["kv_transfer_params"]
            await _sleep(0.3)
            async with session.post(
                decode.url + "/v1/completions", json={**body, "kv_transfer_params": params}
            ) as response:
                assert response.status == 200
                assert (await response.json())["usage"]["completion_tokens"] == 3
        assert prefill.pod_app is not None and decode.pod_app is not None
        assert prefill.pod_app.driver.engine.pool.used == 0  # freed at the timeout
        assert decode.pod_app.disagg is not None and decode.pod_app.disagg.pull_failures == 1
    finally:
        await prefill.stop()
        await decode.stop()


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


@pytest.mark.parametrize(
    "params",
    [
        {"do_remote_prefill": True},
        {"do_remote_prefill": True, "remote_engine_id": "e", "remote_request_id": "r",
         "remote_host": "127.0.0.1", "remote_port": 70000, "remote_block_ids": []},
        {"do_remote_prefill": True, "remote_engine_id": "e", "remote_request_id": "r",
         "remote_host": "127.0.0.1", "remote_port": 1, "remote_block_ids": ["x"]},
    ],
)  # fmt: skip
async def test_hostile_transfer_params_get_400(
    pods: tuple[EmulatedPod, ...], params: dict[str, Any]
) -> None:
    _, decode, _ = pods
    body = {"model": "llama-3.1-8b", "prompt": "x", "max_tokens": 1, "kv_transfer_params": params}
    async with (
        aiohttp.ClientSession() as session,
        session.post(decode.url + "/v1/completions", json=body) as response,
    ):
        assert response.status == 400


async def test_a_pod_without_a_connector_ignores_the_params_as_vllm_does(
    pods: tuple[EmulatedPod, ...],
) -> None:
    _, _, aggregated = pods
    body = _prefill_leg({"model": "llama-3.1-8b", "prompt": "hi " * 100})
    async with (
        aiohttp.ClientSession() as session,
        session.post(aggregated.url + "/v1/completions", json=body) as response,
    ):
        assert response.status == 200
        assert "kv_transfer_params" not in await response.json()


def test_the_flag_is_checked_with_field_paths() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_kv_transfer_config('{"kv_connector": "NixlConnector", "kv_role": "both"}', "flag")
    assert "kv_transfer_config.kv_role" in str(raised.value)
    with pytest.raises(ConfigError):
        parse_kv_transfer_config("{not json", "flag")
    assert isinstance(parse_kv_transfer_config(NIXL, "flag"), KVTransferConfig)


def test_the_link_is_nvlink_in_a_node_and_the_slower_network_between_nodes() -> None:
    shapes = instance_profiles()
    p5, g5 = shapes["p5.48xlarge"], shapes["g5.2xlarge"]
    assert link_gbytes_per_s(p5, "n1", p5, "n1") == p5.allreduce_busbw_gbs
    assert link_gbytes_per_s(p5, "n1", p5, "n2") == p5.network_gbps / 8
    assert link_gbytes_per_s(p5, "n1", g5, "n2") == g5.network_gbps / 8
    # 6,000 tokens of an 8B model (128 KiB per token) over ENA at 10 Gbps: about 0.63 s
    assert transfer_seconds(375, 131072, g5.network_gbps / 8) == pytest.approx(0.629, abs=0.01)


def test_igw_emulate_takes_vllms_flag_and_a_fleet_file_the_same_key() -> None:
    from inference_gateway.cli.main import build_parser
    from inference_gateway.emulator.cli import build_spec
    from inference_gateway.emulator.fleet import EmulatedFleet, parse_fleet

    argv = ["emulate", "--gpu", "H100", "--model", "llama-3.1-8b"]
    args = build_parser(only="emulate").parse_args(
        [
            *argv,
            "--kv-transfer-config",
            '{"kv_connector": "NixlConnector", "kv_role": "kv_producer"}',
        ]
    )
    spec, _ = build_spec(args)
    (group,) = spec.pods
    assert (
        group.kv_transfer_config is not None and group.kv_transfer_config.kv_role == "kv_producer"
    )
    bad = build_parser(only="emulate").parse_args([*argv, "--kv-transfer-config", "{"])
    with pytest.raises(ConfigError):
        build_spec(bad)
    fleet = EmulatedFleet(
        parse_fleet(
            {"pods": [{"name": "d", "gpu": "H100", "model": "llama-3.1-8b", "replicas": 2,
                       "kv_transfer_config": NIXL}]}
        )
    )  # fmt: skip
    ids = {p.kv_transfer.engine_id for p in fleet.pods.values() if p.kv_transfer is not None}
    assert len(ids) == 2  # one engine id per replica
