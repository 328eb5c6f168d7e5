"""P/D through real Envoy 1.40 in llm-d's shape: the picker names the decode pod as the
destination and the prefill pod in `x-prefiller-host-port`; `igw pd-sidecar` on the
decode pod runs the prefill leg there, then hands the request to its local decoder.

    openai SDK → Envoy → ext_proc `igw picker` → ORIGINAL_DST → `igw pd-sidecar` (the
    decode pod's port) ─┬─ prefill leg → prefill pod (`igw emulate`, its own process)
                        └─ decode leg  → decode pod's emulator (the sidecar's --decoder)

Upstream: llm-d/llm-d-routing-sidecar (`internal/proxy/proxy.go`: the header name;
`chat_completions.go`: 403 outside the SSRF allowlist; `connector_nixlv2.go`: the two
legs), vllm `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py` (the legs'
bodies), llm-d-inference-scheduler `pkg/plugins/profile/pd_profile_handler.go` (the
config). The pods are emulated NixlConnector pods (no GPU here): the decode pod's
`pulls` say whether it read the prompt's KV from the prefill pod, and the prefill pod
is a separate process so it can be SIGKILLed while it holds a prefill leg.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import yaml
from envoy_harness import EnvoyStack, IgwProcess, free_port

from ..pd_shapes import MODEL, NIXL, ROLE, dial_witness, pd_config, pd_group, stream_text

READY = re.compile(rb"pod\(s\) ready")
LISTENING = re.compile(rb"igw pd-sidecar: listening on http://[^ ]*:(\d+)")


class PDStack(EnvoyStack):
    """Envoy + picker over a decode pod behind `igw pd-sidecar` and a prefill pod."""

    def __init__(self, prefill_gpu: str = "H100") -> None:
        super().__init__({"base_port": 0, "pods": [pd_group("decode")]}, pd_config(), bbr=False)
        self.prefill_gpu = prefill_gpu
        self.prefill: IgwProcess | None = None
        self.sidecar: IgwProcess | None = None

    async def start_pods(self, endpoints: Path) -> None:
        await super().start_pods(self.folder / "decoder.yaml")  # the emulator, not the pod
        assert self.fleet is not None
        decoder = self.fleet.endpoints[0]
        self.prefill = IgwProcess(
            "emulate",
            ["--gpu", self.prefill_gpu, "--model", MODEL, "--kv-transfer-config",
             orjson.dumps(NIXL).decode()],
            port_flag="--port",
            ready=READY,
            port=free_port(),
        )  # fmt: skip
        await self.prefill.start()
        self.sidecar = IgwProcess(
            "pd-sidecar",
            ["--listen", f"127.0.0.1:{free_port()}", "--decoder", decoder_url(decoder),
             "--allow-prefill", "127.0.0.1/32", "--prefill-timeout", "30"],
            port_flag=None,
            ready=LISTENING,
        )  # fmt: skip
        await self.sidecar.start()
        pods = [
            ("decode", self.sidecar.port, "decode"),  # the pod's port is the sidecar's
            ("prefill", self.prefill.port, "prefill"),
        ]
        endpoints.write_text(
            yaml.safe_dump(
                {
                    "endpoints": [
                        {
                            "name": name,
                            "address": "127.0.0.1",
                            "port": port,
                            "labels": {"igw.dev/pool": "pd", ROLE: role},
                        }
                        for name, port, role in pods
                    ]
                }
            )
        )

    def pulls(self) -> int:
        assert self.fleet is not None
        app = self.fleet.pods["decode"].pod_app
        assert app is not None and app.disagg is not None
        assert app.disagg.pull_failures == 0
        return app.disagg.pulls

    async def stop(self) -> None:
        for part in (self.sidecar, self.prefill):
            if part is not None:
                await part.kill()
        await super().stop()


def decoder_url(endpoint: Any) -> str:
    return f"http://{endpoint.host}:{endpoint.port}"


async def until_ready(client: openai.AsyncOpenAI, within_s: float = 15.0) -> None:
    """Both pods scraped: a short (aggregated) request succeeds."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            await stream_text(client, "hi")
            return
        except openai.APIStatusError:
            assert time.monotonic() < deadline, "the P/D pool never became ready"
            await asyncio.sleep(0.2)


async def test_a_p_d_request_goes_prefill_pod_then_decode_pod_and_streams() -> None:
    async with PDStack() as stack:
        client = stack.client()
        await until_ready(client)
        assert stack.pulls() == 0  # the short prompt was aggregated
        assert await stream_text(client, "tok " * 3000) == 8
        assert stack.pulls() == 1  # the decode pod read the prompt's KV from the prefill pod
        # Envoy sent both requests to the decode pod (its sidecar), never to the prefill pod
        assert stack.sidecar is not None
        lines = [line for line in await stack.wait_access_log(2) if line["code"] == 200]
        assert len(lines) >= 2
        assert {line["upstream"] for line in lines} == {f"127.0.0.1:{stack.sidecar.port}"}
        await client.close()


async def test_a_clients_prefill_header_never_reaches_the_sidecar() -> None:
    """A client's `x-prefiller-host-port` naming 127.0.0.2 (outside the sidecar's
    allowlist: the sidecar would answer 403) is removed by the picker on an aggregated
    request and replaced by the picker's own on a P/D one; nothing dials 127.0.0.2."""
    async with dial_witness() as witness:
        hostile = {"x-prefiller-host-port": f"127.0.0.2:{witness.port}"}
        async with PDStack() as stack:
            client = stack.client()
            await until_ready(client)
            assert await stream_text(client, "hello", headers=hostile) == 8  # aggregated: removed
            assert await stream_text(client, "tok " * 3000, headers=hostile) == 8  # P/D: replaced
            assert stack.pulls() == 1
            await client.close()
    assert witness.dialled == 0


async def test_a_prefill_pod_killed_mid_exchange_never_hangs_the_client() -> None:
    """SIGKILL of the prefill pod while it holds the leg (an L4: seconds of prefill for
    this prompt): the sidecar serves the request aggregated on the decode pod, or the
    client gets an OpenAI-shaped error; either within a bound, never a hang."""
    async with PDStack(prefill_gpu="L4") as stack:
        assert stack.prefill is not None
        client = stack.client(timeout=60)
        await until_ready(client)
        task = asyncio.create_task(stream_text(client, "tok " * 8000))
        url = f"http://127.0.0.1:{stack.prefill.port}/metrics"
        deadline = time.monotonic() + 20
        async with aiohttp.ClientSession() as session:
            while True:  # the prefill pod holds the leg
                async with session.get(url) as response:
                    text = await response.text()
                if re.search(r"^vllm:num_requests_running\{[^}]*\} [1-9]", text, re.M):
                    break
                assert not task.done(), "the request ended before the prefill leg began"
                assert time.monotonic() < deadline, "the prefill leg never reached its pod"
                await asyncio.sleep(0.05)
        stack.prefill.process.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        started = time.monotonic()
        async with asyncio.timeout(45):  # never a hang
            try:
                chunks = await task
            except openai.APIStatusError as error:  # the other allowed end: OpenAI-shaped
                body = orjson.loads(error.response.content)
                assert set(body["error"]) >= {"message", "type", "code"}
            else:
                assert chunks == 8  # the aggregated retry on the decode pod
                assert stack.pulls() == 0
        assert time.monotonic() - started < 45
        await client.close()
