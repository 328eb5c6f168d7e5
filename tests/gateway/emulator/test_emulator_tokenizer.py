"""vLLM's `--tokenizer` and `--prefix-caching-hash-algo` on the emulator: a pod counts
and hashes the model's own token ids, with vLLM's block hash of choice, its adapters'
int ids and a request's cache salt (`protocols.vllm.block_hashing`, checked against vLLM
v0.11.0's definitions in tests/gateway/protocols/vllm/test_vllm_block_hashes.py)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from model_files import write_model_files

from inference_gateway.emulator.cli import build_spec, register
from inference_gateway.emulator.fleet import EmulatedFleet
from inference_gateway.protocols.vllm.block_hashing import (
    block_hashes,
    hash_function,
    none_hash,
    to_external,
)
from inference_gateway.protocols.vllm.hf_tokenizer import HFTokenizer


def parse(*argv: str) -> object:
    import argparse

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["emulate", *argv])


def test_the_flags_reach_the_fleet_spec(tmp_path: Path) -> None:
    args = parse(
        "--gpu", "H100", "--model", "llama-3.1-8b", "--tokenizer", str(tmp_path),
        "--prefix-caching-hash-algo", "sha256_cbor",
    )  # fmt: skip
    spec, _ = build_spec(args)  # type: ignore[arg-type]
    (group,) = spec.pods
    assert group.tokenizer == str(tmp_path) and group.prefix_caching_hash_algo == "sha256_cbor"
    with pytest.raises(SystemExit):
        parse("--gpu", "H100", "--model", "llama-3.1-8b", "--prefix-caching-hash-algo", "xxhash")


async def test_a_pod_counts_and_hashes_the_models_own_ids(tmp_path: Path) -> None:
    model = write_model_files(tmp_path / "model")
    fleet = EmulatedFleet(
        {
            "base_port": 0,
            "pods": [
                {
                    "name": "pod", "gpu": "H100", "model": "llama-3.1-8b",
                    "adapters": ["a", "b"], "max_loras": 2, "hash_seed": "5",
                    "tokenizer": str(model), "prefix_caching_hash_algo": "sha256_cbor",
                }
            ],
        }
    )  # fmt: skip
    await fleet.start()
    try:
        pod = fleet.pods["pod"]
        text = "You are a helpful assistant who answers questions about the weather. " * 6
        body = {"model": "b", "messages": [{"role": "user", "content": text}],
                "max_tokens": 3, "cache_salt": "tenant"}  # fmt: skip
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{pod.url}/v1/chat/completions", json=body) as response,
        ):
            answer = await response.json()
        ids = HFTokenizer(model).prompt_ids(body)
        assert ids is not None and answer["usage"]["prompt_tokens"] == len(ids)
        assert pod.pod_app is not None
        hashed = block_hashes(
            ids,
            none_hash("5", "sha256_cbor"),
            lora_id=2,  # "b" is the second adapter: vLLM's --lora-modules numbering
            cache_salt="tenant",
            hash_fn=hash_function("sha256_cbor"),
        )
        assert pod.pod_app._block_hashes(ids, "b", body) == [to_external(h) for h in hashed]
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{pod.url}/v1/chat/completions", json={**body, "cache_salt": 7}) as bad,
        ):
            assert bad.status == 400  # vLLM: a non-empty string or nothing
    finally:
        await fleet.stop()
