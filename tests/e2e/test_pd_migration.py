"""Resume on break with a P/D split (issue 33's P/D line, docs/migration.md): `igw serve`
in front of one prefill pod and two decode pods, each its own `igw emulate` process
started as vLLM's NixlConnector pods are (`--kv-transfer-config`) and labelled with
llm-d's role label; every request goes P/D (`nonCachedTokens: 0`). 12 concurrent
streamed chat requests of 1,000 tokens at temperature 0 through the official `openai`
SDK; the decode pod serving the most of them is killed (SIGKILL) or stopped (SIGSTOP: a
stall past the stream idle timeout) mid-stream.

Every request ends with a `finish_reason` and no error, its text byte for byte the same
request's unbroken text, one `usage` counting the prompt once and each token once, and
the token budget charged once (`assert_spliced_whole` and the budget check of
test_stream_migration.py). Where the continuations went is read from the pods' own
counters (`vllm:request_success_total`): the surviving decode pod finished its own
streams and every broken one, the prefill pod only its 12 prefill legs (1 token each):
a continuation carries no `kv_transfer_params` (the prefill pod freed the blocks once
they were read) and is served aggregated on a decode pod, never on a prefill pod and
never with a second prefill leg (`igw_pd_prefill_legs_total`: the 12 and the probe's).

A prefill pod lost before the first token is today's fallback, covered by
test_pd_serve.py (`test_a_prefill_pod_killed_mid_leg_ends_in_an_aggregated_answer`), as
is a decode pod lost before its answer's first byte
(`test_a_decode_pod_lost_before_its_answer_is_retried_whole`).
Bounded: one load of 12 requests per fault, each wait under a deadline.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import openai
import orjson
import pytest

from tests.e2e.pd_shapes import NIXL, ROLE, pd_config
from tests.e2e.serve_process import igw_serve
from tests.e2e.test_stream_migration import (
    REASONS,
    assert_spliced_whole,
    busiest_mid_answer,
    charge,
    header_port,
    metric_sum,
    pods,
    remaining_tokens,
    start_streams,
    unbroken_texts,
    until_healthy,
)

pytestmark = pytest.mark.slow
REQUESTS = 12
TOKENS = 1000
ROLES = ("prefill", "decode", "decode")
FINISHED = "vllm:request_success_total"


def config() -> dict[str, object]:
    """Every request P/D (`nonCachedTokens: 0`), over `igw serve`'s test pool `p`."""
    out = pd_config(non_cached_tokens=0)
    out["pools"] = [{"name": "pd", "selector": {"igw.dev/pool": "p"}}]
    out["scrape"] = {"intervalMs": 100, "stalenessMs": 3000, "timeoutMs": 500}
    out["migration"] = {"streamIdleTimeoutMs": 1000, "deadlineMs": 10_000}
    # a token budget that never refuses here, read for what it was charged
    out["rateLimits"] = [{"tokensPerMinute": 10_000_000, "windowS": 600}]
    return out


async def finished(port: int) -> float:
    return await metric_sum(f"http://127.0.0.1:{port}", FINISHED, 'finished_reason="length"')


@pytest.mark.parametrize("fault", ["kill", "stall"])
async def test_a_lost_decode_pods_streams_resume_on_the_other_decode_pod(
    tmp_path: Path, fault: str
) -> None:
    nixl = ["--kv-transfer-config", orjson.dumps(NIXL).decode()]
    with pods(tmp_path, nixl, nixl, nixl) as procs:
        ports = [p.port for p in procs]  # type: ignore[attr-defined]
        await until_healthy(ports)
        # the unbroken texts, asked of the prefill pod whole (a kv_both engine serves
        # aggregated requests too); the pods' counts are read from here on
        expected = await unbroken_texts(ports[0], REQUESTS, TOKENS)
        labels = [{ROLE: role} for role in ROLES]
        async with igw_serve(
            tmp_path, ports, "--debug-destination-headers", config=config(), labels=labels
        ) as served:
            api = openai.AsyncOpenAI(
                base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=120
            )
            remaining_before, probe_total = await remaining_tokens(api)
            before = [await finished(port) for port in ports]  # the pods' counts from here
            outcomes, tasks = start_streams(api, REQUESTS, tokens=TOKENS)
            serving, busiest = await busiest_mid_answer(outcomes, tasks)
            victim_port = header_port(busiest)
            decode_ports = {f"127.0.0.1:{port}" for port in ports[1:]}
            assert set(serving) <= decode_ports, serving  # streams come from decode pods
            victim = procs[ports.index(victim_port)]
            victim.send_signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=180)
            # where the continuations went: the other decode pod, aggregated; the
            # prefill pod ran one prefill leg per request, no more
            survivor = next(p for p in ports[1:] if p != victim_port)
            broken = serving[busiest]
            done_there = await finished(survivor) - before[ports.index(survivor)]
            assert done_there == serving[f"127.0.0.1:{survivor}"] + broken
            url = served.url
            legs = await metric_sum(url, "igw_pd_prefill_legs_total", 'outcome="ok"')
            assert legs == REQUESTS + 1  # and the probe's
            assert await finished(ports[0]) - before[0] == REQUESTS
            remaining_after, _ = await remaining_tokens(api)
            await api.close()

            # each stream whole, as the unbroken one; the budget charged once
            assert_spliced_whole(outcomes, expected, TOKENS)
            charged = remaining_before - remaining_after - probe_total
            assert charged == charge(REQUESTS, TOKENS)
            total = "igw_request_migrations_total"
            assert await metric_sum(url, total, 'outcome="resumed"') == broken
            assert await metric_sum(url, total) == broken
            reason = REASONS[fault]
            assert await metric_sum(url, total, f'reason="{reason}"') == broken
