"""`igw serve` runs the P/D exchange itself, in front of emulated NixlConnector pods.

The pods are started as vLLM's P/D pods are (`--kv-transfer-config
'{"kv_connector":"NixlConnector","kv_role":"kv_both"}'`, emulator/kvtransfer.py: no GPU
here) and labelled with llm-d's role label (`llm-d.ai/role`, llm-d-inference-scheduler
`pkg/plugins/filter/pd_role.go`); the config is llm-d's `pd-profile-handler` +
`prefix-based-pd-decider` shape. The client is the official `openai` SDK, streaming.
Where the request went is read from the pods' own counters: the prefill pod serves the
decode pod's KV read (`reads_served`), the decode pod pulls (`pulls`); an aggregated
request does neither. The legs' bodies are vLLM's toy proxy's (vllm
`tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import openai
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from inference_gateway.core.scheduling.config_checks import parse_config
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.emulator.server import PodApp
from inference_gateway.frontends.proxy import Gateway

from .pd_shapes import MODEL, dial_witness, pd_config, pd_fleet, stream_text


def pod_app(fleet: EmulatedFleet, name: str) -> PodApp:
    app = fleet.pods[name].pod_app
    assert app is not None and app.disagg is not None
    return app


def legs(gateway: Gateway) -> dict[str, float]:
    """`igw_pd_prefill_legs_total` by outcome, from the gateway's registry."""
    text = generate_latest(gateway.metrics.registry).decode()
    return {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "igw_pd_prefill_legs"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


async def test_a_long_prompt_is_prefilled_on_the_prefill_pod_then_decoded(
    gateway_on: Callable[..., Any],
) -> None:
    config = parse_config(pd_config())
    async with EmulatedFleet(pd_fleet()) as fleet, gateway_on(fleet, config=config) as served:
        url, gateway, _ = served
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        assert await stream_text(client, "tok " * 3000) == 8  # ~3,000 tokens: P/D
        prefill, decode = pod_app(fleet, "prefill"), pod_app(fleet, "decode")
        assert prefill.disagg is not None and decode.disagg is not None
        assert prefill.disagg.reads_served == 1
        assert decode.disagg.pulls == 1 and decode.disagg.pull_failures == 0
        assert legs(gateway) == {"ok": 1.0}
        # a short prompt is under nonCachedTokens: aggregated on the decode pod
        assert await stream_text(client, "hello there") == 8
        assert prefill.disagg.reads_served == 1 and decode.disagg.pulls == 1
        assert legs(gateway) == {"ok": 1.0}
        await client.close()


async def test_a_prefill_pod_killed_mid_leg_ends_in_an_aggregated_answer(
    gateway_on: Callable[..., Any],
) -> None:
    """The prefill pod (an L4: ~3.8 s for this prompt) stops as a crash would while it
    holds the leg; the request is served aggregated by the decode pod, within bounds."""
    config = parse_config(pd_config())
    async with EmulatedFleet(pd_fleet("L4")) as fleet, gateway_on(fleet, config=config) as served:
        url, gateway, _ = served
        client = openai.AsyncOpenAI(
            base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30
        )
        task = asyncio.create_task(stream_text(client, "tok " * 8000))
        engine = pod_app(fleet, "prefill").driver.engine
        deadline = time.monotonic() + 10
        while engine.snapshot().num_running + engine.snapshot().num_waiting == 0:
            assert time.monotonic() < deadline, "the prefill leg never reached its pod"
            await asyncio.sleep(0.02)
        await fleet.stop_pod("prefill")
        async with asyncio.timeout(30):  # never a hang
            assert await task == 8
        failed = legs(gateway)
        assert set(failed) <= {"connect_error", "broken"} and sum(failed.values()) == 1
        decode = pod_app(fleet, "decode").disagg
        assert decode is not None and decode.pulls == 0  # it prefilled the prompt itself
        await client.close()


async def test_a_decode_pod_lost_before_its_answer_is_retried_whole(
    gateway_on: Callable[..., Any],
) -> None:
    """A non-streamed P/D request's decode pod, having read the prompt's blocks, stops as
    a crash would before its answer: the connection closed before any byte, so the
    attempt plan retries on the other decode pod, without the prefill pod's
    `kv_transfer_params` (pd_body.py `for_next_pod`): the blocks were read and freed, and
    a second read of them is what vLLM only logs. The other pod prefills the prompt
    itself: it tries no read."""
    fleet_spec = pd_fleet()
    fleet_spec["pods"][1]["replicas"] = 2  # decode-0, decode-1
    config = parse_config(pd_config(non_cached_tokens=0))
    async with EmulatedFleet(fleet_spec) as fleet, gateway_on(fleet, config=config) as served:
        url, gateway, _ = served
        client = openai.AsyncOpenAI(
            base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60
        )
        task = asyncio.create_task(
            client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "tok " * 3000}],
                max_tokens=2000,
            )
        )
        decoders = {name: pod_app(fleet, name) for name in ("decode-0", "decode-1")}
        deadline = time.monotonic() + 20
        while True:  # the decode leg has read its blocks and is generating
            taken = [
                name
                for name, app in decoders.items()
                if app.disagg is not None
                and app.disagg.pulls == 1
                and app.driver.engine.snapshot().num_running == 1
            ]
            if taken:
                break
            assert not task.done() and time.monotonic() < deadline, "no decode leg ran"
            await asyncio.sleep(0.02)
        (lost,) = taken
        await fleet.stop_pod(lost)
        async with asyncio.timeout(60):  # never a hang
            reply = await task
        assert reply.usage is not None and reply.usage.completion_tokens == 2000
        (other,) = set(decoders) - {lost}
        disagg = decoders[other].disagg
        assert disagg is not None and (disagg.pulls, disagg.pull_failures) == (0, 0)
        assert legs(gateway) == {"ok": 1.0}  # one prefill leg, not a second
        await client.close()


async def test_a_clients_kv_transfer_params_never_reach_a_pod(
    gateway_on: Callable[..., Any],
) -> None:
    """A client's own params (a decode leg naming 127.0.0.2, where a listener counts its
    connections) would make the decode pod read KV from there; igw serve strips them, on
    an aggregated request and on a P/D one alike."""
    async with dial_witness() as witness:
        hostile = {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_engine_id": "someone-else",
            "remote_request_id": "their-request",
            "remote_block_ids": [0, 1, 2],
            "remote_host": "127.0.0.2",
            "remote_port": witness.port,
        }
        config = parse_config(pd_config())
        async with EmulatedFleet(pd_fleet()) as fleet, gateway_on(fleet, config=config) as served:
            url, gateway, _ = served
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
            for prompt in ("hello there", "tok " * 3000):  # aggregated, then P/D
                reply = await client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": prompt}],
                    max_tokens=4,
                    extra_body={"kv_transfer_params": hostile},
                )
                assert reply.choices[0].message.content
            decode = pod_app(fleet, "decode").disagg
            assert decode is not None and decode.pulls == 1 and decode.pull_failures == 0
            assert legs(gateway) == {"ok": 1.0}
            await client.close()
    assert witness.dialled == 0
