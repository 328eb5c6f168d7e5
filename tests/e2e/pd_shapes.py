"""The P/D fleet and config the P/D end-to-end tests share (igw serve and Envoy).

Pods: vLLM's P/D flags (`--kv-transfer-config '{"kv_connector":"NixlConnector",
"kv_role":"kv_both"}'`, emulated: emulator/kvtransfer.py) and llm-d's role label
(`llm-d.ai/role`, llm-d-inference-scheduler `pkg/plugins/filter/pd_role.go`). Config:
llm-d's `pd-profile-handler` + `prefix-based-pd-decider` (`nonCachedTokens`) shape.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import openai

MODEL = "llama-3.1-8b"
NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
ROLE = "llm-d.ai/role"


def pd_group(role: str, gpu: str = "H100") -> dict[str, Any]:
    """One emulated pod of `role` (its name too) in pool `pd`."""
    return {
        "name": role,
        "gpu": gpu,
        "model": MODEL,
        "replicas": 1,
        "labels": {"igw.dev/pool": "pd", ROLE: role},
        "kv_transfer_config": NIXL,
    }


def pd_fleet(prefill_gpu: str = "H100") -> dict[str, Any]:
    return {"base_port": 0, "pods": [pd_group("prefill", prefill_gpu), pd_group("decode")]}


def _profile(name: str, role_filter: str) -> dict[str, Any]:
    return {
        "name": name,
        "plugins": [{"pluginRef": role_filter}, {"pluginRef": "queue-scorer", "weight": 1}],
    }


def pd_config(non_cached_tokens: int = 512) -> dict[str, Any]:
    """A prompt with at least `non_cached_tokens` uncached tokens goes P/D."""
    decider = {"nonCachedTokens": non_cached_tokens}
    return {
        "pools": [{"name": "pd", "selector": {"igw.dev/pool": "pd"}}],
        "models": [{"name": MODEL, "pool": "pd", "profile": "decode"}],
        "plugins": [
            {"type": "prefill-filter"},
            {"type": "decode-filter"},
            {"type": "prefix-based-pd-decider", "parameters": decider},
            {"type": "pd-profile-handler"},
        ],
        "schedulingProfiles": [
            _profile("decode", "decode-filter"),
            _profile("prefill", "prefill-filter"),
        ],
    }


async def stream_text(
    client: openai.AsyncOpenAI,
    prompt: str,
    max_tokens: int = 8,
    headers: dict[str, str] | None = None,
) -> int:
    """Stream a chat completion to its end; the number of content chunks."""
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        stream=True,
        extra_headers=headers,
    )
    chunks = 0
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            chunks += 1
    return chunks


@dataclass
class DialWitness:
    """A listener on 127.0.0.2 (loopback, outside every allowlist the tests give) that
    counts the connections made to it: what a hostile value would make a pod dial."""

    port: int = 0
    dialled: int = 0


@asynccontextmanager
async def dial_witness() -> AsyncIterator[DialWitness]:
    witness = DialWitness()

    def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        witness.dialled += 1
        writer.close()

    server = await asyncio.start_server(connected, "127.0.0.2", 0)
    witness.port = server.sockets[0].getsockname()[1]
    try:
        yield witness
    finally:
        server.close()
        await server.wait_closed()
