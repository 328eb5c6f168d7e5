"""The pod's HTTP surface seen raw: error shapes, /health, /metrics, disconnects, stops."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inference_gateway.core.endpoints.adapters import FILTERED_PATHS, parse_metrics
from inference_gateway.emulator.server import EmulatedPod

VLLM_NAMES = {
    "vllm:num_requests_waiting": "gauge",
    "vllm:num_requests_running": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:gpu_cache_usage_perc": "gauge",
    "vllm:lora_requests_info": "gauge",
    "vllm:cache_config_info": "gauge",
    "vllm:prefix_cache_hits": "counter",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
}


async def scrape(session: aiohttp.ClientSession, pod: EmulatedPod) -> dict[str, object]:
    async with session.get(f"{pod.url}/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await response.text()
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict[str, object], name: str, **labels: str) -> float:
    """The value of sample `name` (e.g. `…_total`, `…_count`) with these labels."""
    for family in families.values():
        for sample in family.samples:  # type: ignore[attr-defined]
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"no sample {name} with {labels}")


async def wait_for(
    session: aiohttp.ClientSession, pod: EmulatedPod, timeout: float = 10, **expected: float
) -> dict[str, object]:
    """Scrape until `vllm:num_requests_<key>` equals each expected value (no fixed sleeps)."""
    async with asyncio.timeout(timeout):
        while True:
            families = await scrape(session, pod)
            if all(value(families, f"vllm:num_requests_{k}") == v for k, v in expected.items()):
                return families
            await asyncio.sleep(0.02)


def chat(content: str, max_tokens: int, model: str = "llama-3.1-8b", **extra: object) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        **extra,
    }


async def test_health_and_error_shapes(pod: EmulatedPod) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{pod.url}/health") as response:
            assert response.status == 200
        url = f"{pod.url}/v1/chat/completions"
        async with session.post(url, data=b"{not json") as response:
            assert response.status == 400
            error = (await response.json())["error"]
            assert error["type"] == "BadRequestError" and error["code"] == 400
            assert "JSON" in error["message"]
        async with session.post(url, json=[1, 2]) as response:
            assert response.status == 400
        async with session.post(url, json=chat("hi", 3, model="nope")) as response:
            assert response.status == 404
            error = (await response.json())["error"]
            assert set(error) >= {"message", "type", "code"}
            assert error["type"] == "NotFoundError" and error["code"] == 404
        async with session.post(f"{pod.url}/v1/completions", json={"prompt": "hi"}) as response:
            assert response.status == 200  # no model: the base model, as vLLM does
            assert (await response.json())["model"] == "llama-3.1-8b"
        too_long = {"model": "llama-3.1-8b", "prompt": "x" * 4 * 200_000}
        async with session.post(f"{pod.url}/v1/completions", json=too_long) as response:
            assert response.status == 400
            assert "maximum context length" in (await response.json())["error"]["message"]


async def test_metrics_parse_with_vllm_names_and_move_with_load(pod: EmulatedPod) -> None:
    async with aiohttp.ClientSession() as session:
        idle = await scrape(session, pod)
        for name, kind in VLLM_NAMES.items():
            assert name in idle and idle[name].type == kind, name  # type: ignore[attr-defined]
        info = idle["vllm:cache_config_info"].samples[0].labels  # type: ignore[attr-defined]
        assert info["block_size"] == "16" and int(info["num_gpu_blocks"]) > 1000
        assert value(idle, "vllm:kv_cache_usage_perc", model_name="llama-3.1-8b") == 0
        lora = idle["vllm:lora_requests_info"].samples[0]  # type: ignore[attr-defined]
        assert lora.labels == {
            "max_lora": "1",
            "running_lora_adapters": "",
            "waiting_lora_adapters": "",
        }
        assert lora.value > 1.7e9  # a Unix timestamp, as vLLM exports it

        url = f"{pod.url}/v1/chat/completions"
        long_prompt = "tell me everything " * 400
        busy = [
            asyncio.create_task(session.post(url, json=chat(long_prompt, tokens, model=m)))
            for m, tokens in (("sql", 300), ("sql", 300), ("support", 5), ("llama-3.1-8b", 300))
        ]
        # support waits for the only LoRA slot, which sql holds
        loaded = await wait_for(session, pod, running=3, waiting=1)
        assert value(loaded, "vllm:kv_cache_usage_perc") > 0
        assert value(loaded, "vllm:gpu_cache_usage_perc") == value(
            loaded, "vllm:kv_cache_usage_perc"
        )
        lora = loaded["vllm:lora_requests_info"].samples[0]  # type: ignore[attr-defined]
        assert lora.labels["running_lora_adapters"] == "sql"
        assert lora.labels["waiting_lora_adapters"] == "support"
        for response in await asyncio.gather(*busy):
            assert response.status == 200
            await response.read()
        done = await scrape(session, pod)
    assert value(done, "vllm:generation_tokens_total") == 3 * 300 + 5
    assert value(done, "vllm:request_success_total", finished_reason="length") == 4
    assert value(done, "vllm:time_to_first_token_seconds_count") == 4
    assert (
        value(done, "vllm:prefix_cache_hits_total") > 0
    )  # sql's second request reuses the first's blocks
    assert value(done, "vllm:num_requests_running") == 0
    assert value(done, "vllm:kv_cache_usage_perc") == 0


async def test_the_filtered_page_is_vllms_name_filter_and_parses_like_the_whole(
    pod: EmulatedPod,
) -> None:
    """vLLM's `/metrics/` is prometheus_client's ASGI app, serving only the samples named
    by `name[]`; its exact `/metrics` is the instrumentator's whole page, whatever the
    query (vllm/entrypoints/serve/instrumentator/metrics.py). The picker's filtered path
    (`adapters.FILTERED_PATHS`) gets the routing families and nothing else, and parses
    to what the whole page says."""
    url = f"{pod.url}/v1/chat/completions"
    async with aiohttp.ClientSession() as session:
        busy = asyncio.create_task(session.post(url, json=chat("x " * 500, 200, model="sql")))
        await wait_for(session, pod, running=1)
        async with session.get(pod.url + FILTERED_PATHS["vllm"]) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            filtered = await response.text()
        async with session.get(f"{pod.url}/metrics?name[]=vllm:num_requests_running") as response:
            whole = await response.text()
        async with session.get(f"{pod.url}/metrics/") as response:
            unnamed = await response.text()
        (await busy).release()
    names = {f.name for f in text_string_to_metric_families(filtered)}
    assert names == {
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:lora_requests_info",
        "vllm:cache_config_info",
    }
    assert len(filtered) * 4 < len(whole), (len(filtered), len(whole))
    assert {f.name for f in text_string_to_metric_families(unnamed)} >= set(VLLM_NAMES)
    assert {f.name for f in text_string_to_metric_families(whole)} >= set(VLLM_NAMES)
    seen, full = parse_metrics(filtered), parse_metrics(whole)
    assert seen.running == full.running == 1
    assert (seen.kv_usage, seen.running_adapters) == (full.kv_usage, full.running_adapters)
    assert (seen.num_gpu_blocks, seen.max_loras) == (full.num_gpu_blocks, full.max_loras) != (0, 0)


async def test_metrics_pass_promtool(pod: EmulatedPod) -> None:
    if shutil.which("promtool") is None:  # `make test` installs it; never a skip
        pytest.fail("promtool is missing: install the Debian package `prometheus`", pytrace=False)
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{pod.url}/v1/completions", json={"prompt": "x", "max_tokens": 2}):
            pass
        async with session.get(f"{pod.url}/metrics") as response:
            text = await response.read()
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, timeout=30, check=False
    )
    # Exit 1 is a parse error. Exit 3 is lint only; vLLM's names contain ':', which
    # promtool's lint reserves for recording rules, so that one finding is expected.
    assert result.returncode in (0, 3), result.stdout + result.stderr
    findings = (result.stdout + result.stderr).decode().strip().splitlines()
    unexpected = [f for f in findings if not f.endswith("metric names should not contain ':'")]
    assert unexpected == []


async def test_client_disconnect_mid_stream_aborts_the_request_within_a_second(
    pod: EmulatedPod,
) -> None:
    """vLLM aborts a request whose client disconnected (its OpenAI server watches the
    connection): the pod's running count falls within 1 s, the request counts as
    `finished_reason="abort"` with the tokens it produced, and the engine serves on."""
    url = f"{pod.url}/v1/chat/completions"
    async with aiohttp.ClientSession() as session:
        response = await session.post(url, json=chat("go on", 20_000, stream=True))
        assert (await response.content.readline()).startswith(b"data: ")
        await wait_for(session, pod, running=1)
        loop = asyncio.get_running_loop()
        left = loop.time()
        response.close()  # drop the connection mid-stream
        families = await wait_for(session, pod, timeout=1.0, running=0, waiting=0)
        assert loop.time() - left < 1.0
        assert value(families, "vllm:request_success_total", finished_reason="abort") == 1
        assert value(families, "vllm:generation_tokens_total") < 20_000
        async with session.post(url, json=chat("again", 5)) as again:
            assert again.status == 200
            assert (await again.json())["usage"]["completion_tokens"] == 5
        families = await wait_for(session, pod, running=0, waiting=0)
    assert value(families, "vllm:request_success_total", finished_reason="length") == 1
    assert value(families, "vllm:kv_cache_usage_perc") == 0.0


async def test_client_that_leaves_a_plain_request_aborts_it(pod: EmulatedPod) -> None:
    """Not streaming: the handler is cancelled when the connection closes (aiohttp's
    handler cancellation), and the engine drops the request too."""
    url = f"{pod.url}/v1/chat/completions"
    async with aiohttp.ClientSession() as session:
        task = asyncio.create_task(session.post(url, json=chat("long", 20_000)))
        await wait_for(session, pod, running=1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        families = await wait_for(session, pod, timeout=1.0, running=0, waiting=0)
    assert value(families, "vllm:request_success_total", finished_reason="abort") == 1


async def test_stopped_pod_cuts_streams_and_restarts_on_its_port(pod: EmulatedPod) -> None:
    url = f"{pod.url}/v1/chat/completions"
    port = pod.port
    async with aiohttp.ClientSession() as session:
        response = await session.post(url, json=chat("long story", 2000, stream=True))
        await response.content.readline()
        await pod.stop()
        with pytest.raises(aiohttp.ClientError):
            body = await response.content.read()
            assert b"[DONE]" in body  # never reached: the stream is cut
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(f"{pod.url}/health")
        await pod.start()
        assert pod.port == port
        async with session.get(f"{pod.url}/health") as health:
            assert health.status == 200
        families = await scrape(session, pod)
    assert value(families, "vllm:prompt_tokens_total") == 0  # a fresh process: no history


async def test_the_gateways_scraper_reads_the_pod(pod: EmulatedPod) -> None:
    """The picker's own vLLM adapter parses this text into the state the engine holds."""
    async with aiohttp.ClientSession() as session:
        url = f"{pod.url}/v1/chat/completions"
        busy = asyncio.create_task(session.post(url, json=chat("x " * 500, 200, model="sql")))
        await wait_for(session, pod, running=1)
        async with session.get(f"{pod.url}/metrics") as response:
            metrics = parse_metrics(await response.text())
        (await busy).close()
    assert metrics.running == 1 and metrics.waiting == 0
    assert metrics.running_adapters == {"sql"} and metrics.max_loras == 1
    assert metrics.block_size == 16
    assert metrics.num_gpu_blocks == pod.profile.num_gpu_blocks
    assert 0 < metrics.kv_usage < 0.01
